#!/usr/bin/python3
"""Figures of Cyclic Data Parallelism from tools:cyclic's outputs (PNG, with the plotted data as CSV).

Inputs (generate(out_dir, inputs), or the command line):
  simulation  a directory written by `cyclic --simulate --out DIR` (timeline_dp.csv, timeline_<rule>.csv,
              activations_sim.csv, comm_sim.csv): the unit-time timelines of DP and CDP.
  runs        {label: directory written by `cyclic --out DIR`} (log.csv, eval.csv, memory.csv, comm.csv):
              training runs, e.g. {"dp": ..., "cdp-v1": ..., "cdp-v2": ...}.
  curve_runs  optional {label: directory}: other runs for the memory and communication curves (e.g. short
              recordings of the configuration of long training runs); default: runs.

Figures:
  cyclic_timeline     DP against CDP as in the paper's figure: stages as rows, time steps as columns,
                      micro-batches coloured, forward (^) and backward (v) marked.
  cyclic_activations  stored stage activations over time: DP's peak against CDP's constant (unit-time model),
                      and the runs' measured totals over workers on their schedules' time axis.
  cyclic_comm         gradient traffic per time step (unit-time model) and the runs' bytes over wall time.
  cyclic_accuracy     test accuracy and training loss of the runs by epoch.
"""

import argparse
import os
import sys

from plot_files import print_written, read_csv, save, write_csv  # first: it selects matplotlib's Agg backend
import matplotlib.pyplot as plt  # noqa: E402

COLORS = ["#1f77b4", "#d62728", "#e6b800", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _model_and_runs_figure(out_dir, name, sim_dir, runs, model_panel, runs_panel):
    """A figure with one panel for the unit-time model (if sim_dir) and one for the runs (if any), each drawn by
    its function (ax, rows) which appends the plotted rows; saved as NAME (plot_files.save). Returns the paths
    written."""
    panels = ([model_panel] if sim_dir else []) + ([runs_panel] if runs else [])
    if not panels:
        return []
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4), squeeze=False)
    rows = []
    for ax, panel in zip(axes[0], panels):
        panel(ax, rows)
    return save(fig, out_dir, name, ["source", "series", "time", "value"], rows, dpi=130)


def _model_panel(sim_dir, name, ylabel, draw):
    """The panel function (ax, rows) of the unit-time model's CSV NAME (a step column and one per timeline):
    draw(ax, j, n, column, steps, values) plots column j of n."""

    def panel(ax, rows):
        sim = read_csv(os.path.join(sim_dir, name))
        cols = [k for k in sim[0].keys() if k != "step"]
        steps = [int(r["step"]) for r in sim]
        for j, col in enumerate(cols):
            vals = [float(r[col]) for r in sim]
            draw(ax, j, len(cols), col, steps, vals)
            rows += [["unit-time model", col, s, v] for s, v in zip(steps, vals)]
        _label(ax, "time step", ylabel, "unit-time model")

    return panel


def _run_tables(runs, name):
    """(index, label, rows of the run's CSV NAME) for every run that wrote NAME, in label order."""
    for j, (label, d) in enumerate(sorted(runs.items())):
        path = os.path.join(d, name)
        if os.path.exists(path):
            yield j, label, read_csv(path)


def _label(ax, xlabel, ylabel, title, **legend):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(**legend)


def _timeline_panel(ax, cells, title, steps):
    """cells: rows of the timeline CSV; one disc per (stage, step, micro), stacked when they share a cell."""
    stages = max(int(c["stage"]) for c in cells) + 1
    by_cell = {}
    for c in cells:
        step = int(float(c["start"]))
        if step >= steps:
            continue
        by_cell.setdefault((int(c["stage"]), step), []).append(c)
    for (stage, step), items in by_cell.items():
        n = len(items)
        for i, c in enumerate(sorted(items, key=lambda c: int(c["micro"]))):
            dy = (i - (n - 1) / 2) * 0.22
            micro = int(c["micro"])
            ax.scatter(step + 0.5, stage + 0.5 + dy, s=260 / max(1, n * 0.8), color=COLORS[micro % len(COLORS)],
                       edgecolors="black", linewidths=0.5, zorder=3)
            ax.text(step + 0.5, stage + 0.5 + dy, "\u2191" if c["kind"] == "f" else "\u2193", ha="center",
                    va="center", fontsize=7, color="white", zorder=4, fontweight="bold")
    # Update boundaries (the figure's double bars): where each round's last operation ends.
    ends = {}
    for c in cells:
        ends[c["round"]] = max(ends.get(c["round"], 0.0), float(c["end"]))
    for e in ends.values():
        if e <= steps:
            ax.axvline(e, color="black", linewidth=2.2, zorder=2)
    ax.set_xlim(0, steps)
    ax.set_ylim(0, stages)
    ax.set_yticks([s + 0.5 for s in range(stages)])
    ax.set_yticklabels(["Model stage %d" % (s + 1) for s in range(stages)])
    ax.set_xticks(range(0, steps + 1, 1))
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", color="#dddddd", zorder=0)
    ax.set_xlabel("time step")
    ax.set_title(title)


def timeline_figure(out_dir, sim_dir):
    files = sorted(f for f in os.listdir(sim_dir) if f.startswith("timeline_") and f.endswith(".csv"))
    names = [f[len("timeline_"):-len(".csv")] for f in files]
    if "dp" not in names or len(names) < 2:
        raise ValueError("%s needs timeline_dp.csv and one CDP timeline (run `cyclic --simulate`)" % sim_dir)
    order = ["dp"] + [n for n in names if n != "dp"]
    panels = {n: read_csv(os.path.join(sim_dir, "timeline_%s.csv" % n)) for n in order}
    stages = max(int(c["stage"]) for c in panels["dp"]) + 1
    micro = max(int(c["micro"]) for c in panels["dp"]) + 1
    steps = int(max(float(c["end"]) for c in panels[order[1]]))
    fig, axes = plt.subplots(len(order), 1, figsize=(max(8, steps * 0.45), 1.1 * stages * len(order) + 1.2))
    titles = {"dp": "a) Data Parallelism", "cdp-v1": "b) Cyclic Data Parallelism v1",
              "cdp-v2": "b) Cyclic Data Parallelism v2"}
    rows = []
    for ax, n in zip(axes, order):
        _timeline_panel(ax, panels[n], titles.get(n, n), steps)
        for c in panels[n]:
            rows.append([n, int(c["stage"]) + 1, int(float(c["start"])), int(c["micro"]) + 1, c["kind"], c["round"]])
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=COLORS[m % len(COLORS)], label="micro-batch %d" % (m + 1))
               for m in range(micro)]
    fig.legend(handles=handles, loc="upper right", fontsize=8)
    fig.suptitle("N = %d micro-batches, S = %d stages (\u2191 forward, \u2193 backward)" % (micro, stages), fontsize=10)
    return save(fig, out_dir, "cyclic_timeline", ["panel", "stage", "step", "micro_batch", "kind", "round"], rows,
                dpi=130, rect=(0, 0, 0.92, 0.95))


def activations_figure(out_dir, sim_dir, runs):
    def draw(ax, j, n, col, steps, vals):
        ax.step(steps, vals, where="post", label=col, color=COLORS[j])

    def measured(ax, rows):
        for j, label, mem in _run_tables(runs, "memory.csv"):
            t = [float(r["schedule_time"]) for r in mem]
            v = [float(r["measured_total"]) / 2 ** 20 for r in mem]
            ax.step(t, v, where="post", label="%s measured" % label, color=COLORS[j])
            p = [float(r["predicted_total"]) / 2 ** 20 for r in mem]
            ax.step(t, p, where="post", linestyle=":", color=COLORS[j], label="%s predicted" % label)
            rows += [[label, "measured_MiB", a, b] for a, b in zip(t, v)]
            rows += [[label, "predicted_MiB", a, b] for a, b in zip(t, p)]
        _label(ax, "schedule time (s, simulated from measured stage times)", "activation MiB (total over workers)",
               "training runs", fontsize=8)

    model = _model_panel(sim_dir, "activations_sim.csv", "stored stage activations (total over workers)", draw)
    return _model_and_runs_figure(out_dir, "cyclic_activations", sim_dir, runs, model, measured)


def comm_figure(out_dir, sim_dir, runs):
    def draw(ax, j, n, col, steps, vals):
        width = 0.8 / n
        ax.bar([s + j * width for s in steps], vals, width=width, label=col, color=COLORS[j])

    def measured(ax, rows):
        for j, label, comm in _run_tables(runs, "comm.csv"):
            t = [float(r["time_s"]) for r in comm]
            v = [float(r["bytes"]) / 2 ** 20 for r in comm]
            ax.plot(t, v, label=label, color=COLORS[j], linewidth=0.9)
            rows += [[label, "MiB_per_bin", a, b] for a, b in zip(t, v)]
        _label(ax, "wall time of the recorded rounds (s)", "MiB moved per bin (all workers)", "training runs",
               fontsize=8)

    model = _model_panel(sim_dir, "comm_sim.csv", "stage gradients sent (all workers)", draw)
    return _model_and_runs_figure(out_dir, "cyclic_comm", sim_dir, runs, model, measured)


def accuracy_figure(out_dir, runs):
    if not runs:
        return []
    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(12, 4))
    rows = []
    for j, (label, d) in enumerate(sorted(runs.items())):
        ev_path, log_path = os.path.join(d, "eval.csv"), os.path.join(d, "log.csv")
        if os.path.exists(ev_path):
            ev = read_csv(ev_path)
            e = [float(r["epoch"]) for r in ev]
            a = [100 * float(r["test_accuracy"]) for r in ev]
            acc_ax.plot(e, a, marker="o", label=label, color=COLORS[j])
            rows += [[label, "test_accuracy_pct", x, y] for x, y in zip(e, a)]
        if os.path.exists(log_path):
            log = read_csv(log_path)
            e = [float(r["epoch"]) for r in log]
            l = [float(r["loss"]) for r in log]
            loss_ax.plot(e, l, label=label, color=COLORS[j], linewidth=0.9)
            rows += [[label, "train_loss", x, y] for x, y in zip(e, l)]
    acc_ax.set_xlabel("epoch")
    acc_ax.set_ylabel("test accuracy (%)")
    acc_ax.legend()
    loss_ax.set_xlabel("epoch")
    loss_ax.set_ylabel("training loss")
    loss_ax.legend()
    return save(fig, out_dir, "cyclic_accuracy", ["run", "series", "epoch", "value"], rows, dpi=130)


def generate(out_dir, inputs):
    """Writes the figures whose inputs are given; returns the paths written.

    inputs: {"simulation": DIR, "runs": {label: DIR}, "curve_runs": {label: DIR}} (each optional).
    """
    os.makedirs(out_dir, exist_ok=True)
    sim_dir = inputs.get("simulation")
    runs = inputs.get("runs") or {}
    curve_runs = inputs.get("curve_runs") or runs
    for label, d in list(runs.items()) + list(curve_runs.items()):
        if not os.path.isdir(d):
            raise ValueError("run '%s': %s is not a directory" % (label, d))
    if sim_dir is None and not runs:
        raise ValueError("nothing to plot: give a simulation directory and/or runs")
    written = []
    if sim_dir:
        written += timeline_figure(out_dir, sim_dir)
    written += activations_figure(out_dir, sim_dir, curve_runs)
    written += comm_figure(out_dir, sim_dir, curve_runs)
    written += accuracy_figure(out_dir, runs)
    return written


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--simulation", help="directory written by `cyclic --simulate --out DIR`")
    p.add_argument("--run", action="append", default=[], metavar="LABEL=DIR",
                   help="a training run written by `cyclic --out DIR` (repeat: dp=..., cdp-v1=..., cdp-v2=...)")
    p.add_argument("--curve-run", action="append", default=[], metavar="LABEL=DIR",
                   help="a run for the memory and communication curves only (default: the --run ones)")
    p.add_argument("--out", required=True, help="output directory")
    a = p.parse_args(argv)

    def labelled(items, flag):
        out = {}
        for r in items:
            if "=" not in r:
                p.error("%s needs LABEL=DIR, got '%s'" % (flag, r))
            label, d = r.split("=", 1)
            out[label] = d
        return out

    runs, curve_runs = labelled(a.run, "--run"), labelled(a.curve_run, "--curve-run")
    return print_written("cyclic.py",
                         lambda: generate(a.out, {"simulation": a.simulation, "runs": runs, "curve_runs": curve_runs}))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
