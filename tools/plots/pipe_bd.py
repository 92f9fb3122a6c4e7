#!/usr/bin/python3
"""Figures of Pipe-BD from bench/bd's JSON output (PNG, with the plotted data as CSV).

Inputs (generate(out_dir, inputs), or the command line):
  bench  one path, or a list of paths, of JSON files written by `bd_bench --json PATH`; each holds one or
         both workloads (nas: MobileNetV2 -> supernet; compression: ResNet-18 -> depthwise-separable) with
         the measured run of every strategy on its workers and the simulator's projections.

Figures:
  pipe_bd_speedup    speedup over DP of DP, LS, TR, TR+DPU and TR+DPU+AHD per workload: measured on the
                     bench's workers, and simulated from the profile for those and for more workers.
  pipe_bd_breakdown  per strategy and rank, the measured time in loading, teacher, student, update,
                     communication (including waiting for relays and collectives) and idle.
  pipe_bd_memory     peak memory per worker (largest over the ranks) of every strategy, measured.
  pipe_bd_timeline   one step of every strategy: each rank's instructions on its compute and comm lanes.
"""

import argparse
import json
import os
import sys

from plot_files import print_written, save, write_csv  # first: it selects matplotlib's Agg backend
import matplotlib.pyplot as plt  # noqa: E402

STRATEGIES = ["dp", "ls", "tr", "dpu", "ahd"]
TITLES = {"dp": "DP", "ls": "LS", "tr": "TR", "dpu": "TR+DPU", "ahd": "TR+DPU+AHD"}
COLORS = {"dp": "#7f7f7f", "ls": "#8c564b", "tr": "#1f77b4", "dpu": "#2ca02c", "ahd": "#d62728"}
PARTS = ["load", "teacher", "student", "update", "comm", "idle"]
PART_COLORS = {"load": "#9467bd", "teacher": "#1f77b4", "student": "#2ca02c", "update": "#e6b800",
               "comm": "#d62728", "idle": "#dddddd"}
KIND_COLORS = {"load": "#9467bd", "forward": "#1f77b4", "forward_backward": "#2ca02c", "update": "#e6b800",
               "send": "#ff7f0e", "recv": "#d62728", "all_reduce": "#8c564b", "barrier": "#000000"}


def _paths(value):
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def load_workloads(paths):
    """Every workload of every bench file, labelled '<name> <input>px'."""
    out = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if "workloads" not in data:
            raise ValueError("%s is not a bd_bench JSON file (no 'workloads')" % path)
        for w in data["workloads"]:
            w = dict(w)
            w["label"] = "%s %spx" % (w["name"], data.get("input", "?"))
            w["measured_workers"] = w["report"]["workers"]
            out.append(w)
    if not out:
        raise ValueError("no workloads in %s" % ", ".join(paths))
    return out


def _strategy(w, name):
    for s in w["report"]["strategies"]:
        if s["name"] == name:
            return s
    return None


def speedup_figure(out_dir, workloads):
    rows = []
    for w in workloads:
        for name in STRATEGIES:
            s = _strategy(w, name)
            if s and "speedup" in s:
                rows.append([w["label"], w["measured_workers"], "measured", TITLES[name], "%.4f" % s["speedup"]])
        for p in w.get("projections", []):
            rows.append([w["label"], p["workers"], "simulated", p["title"], "%.4f" % p["speedup"]])
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        groups = [("%d\nmeasured" % w["measured_workers"], "measured", w["measured_workers"])]
        for n in sorted({p["workers"] for p in w.get("projections", [])}):
            groups.append(("%d\nsimulated" % n, "simulated", n))
        width = 0.8 / len(STRATEGIES)
        for i, name in enumerate(STRATEGIES):
            values = []
            for _, source, n in groups:
                v = [float(r[4]) for r in rows if r[0] == w["label"] and r[1] == n and r[2] == source
                     and r[3] == TITLES[name]]
                values.append(v[0] if v else 0.0)
            ax.bar([g + (i - 2) * width for g in range(len(groups))], values, width, label=TITLES[name],
                   color=COLORS[name])
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([g[0] for g in groups])
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_title(w["label"])
        ax.set_xlabel("workers")
        ax.set_ylabel("speedup over DP")
    axes[0][0].legend(fontsize=8)
    return save(fig, out_dir, "pipe_bd_speedup", ["workload", "workers", "source", "strategy", "speedup"], rows,
                dpi=120)


def breakdown_figure(out_dir, workloads):
    rows = []
    fig, axes = plt.subplots(len(workloads), len(STRATEGIES), figsize=(3.2 * len(STRATEGIES), 3 * len(workloads)),
                             squeeze=False)
    for wi, w in enumerate(workloads):
        for si, name in enumerate(STRATEGIES):
            ax = axes[wi][si]
            s = _strategy(w, name)
            if s is None:
                ax.axis("off")
                continue
            parts = s["breakdown_s"]
            bottom = [0.0] * len(parts)
            for part in PARTS:
                values = [p.get(part, 0.0) for p in parts]
                ax.bar(range(len(parts)), values, bottom=bottom, color=PART_COLORS[part], label=part)
                bottom = [b + v for b, v in zip(bottom, values)]
                for rank, v in enumerate(values):
                    rows.append([w["label"], TITLES[name], rank, part, "%.6f" % v])
            ax.set_title("%s: %s" % (w["label"], TITLES[name]), fontsize=9)
            ax.set_xticks(range(len(parts)))
            ax.set_xlabel("rank")
            if si == 0:
                ax.set_ylabel("seconds")
    axes[0][0].legend(fontsize=7)
    return save(fig, out_dir, "pipe_bd_breakdown", ["workload", "strategy", "rank", "part", "seconds"], rows, dpi=110)


def memory_figure(out_dir, workloads):
    rows = []
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 3.5), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        names, values = [], []
        for name in STRATEGIES:
            s = _strategy(w, name)
            if s is None:
                continue
            peak = max(s["peak_memory"]) / 2.0 ** 20
            names.append(TITLES[name])
            values.append(peak)
            rows.append([w["label"], TITLES[name], "%.3f" % peak])
        ax.bar(range(len(names)), values, color=[COLORS[n] for n in STRATEGIES if _strategy(w, n)])
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=20, fontsize=8)
        ax.set_ylabel("peak memory per worker (MiB)")
        ax.set_title(w["label"])
    return save(fig, out_dir, "pipe_bd_memory", ["workload", "strategy", "peak_mib"], rows, dpi=120)


def timeline_figure(out_dir, workloads):
    written = []
    rows = []
    for w in workloads:
        present = [n for n in STRATEGIES if _strategy(w, n)]
        fig, axes = plt.subplots(len(present), 1, figsize=(10, 1.6 * len(present) + 0.6), squeeze=False)
        for ax, name in zip(axes[:, 0], present):
            events = _strategy(w, name)["timeline"]
            workers = 1 + max([e["worker"] for e in events] + [0])
            for e in events:
                y = e["worker"] + (0.35 if e["lane"] == "comm" else 0.0)
                h = 0.3 if e["lane"] == "comm" else 0.6
                ax.broken_barh([(e["start_s"] * 1e3, max(1e-6, (e["end_s"] - e["start_s"]) * 1e3))], (y - 0.3, h),
                               facecolors=KIND_COLORS.get(e["kind"], "#999999"))
                rows.append([w["label"], TITLES[name], e["worker"], e["lane"], e["kind"], e["label"],
                             "%.6f" % e["start_s"], "%.6f" % e["end_s"]])
            ax.set_yticks(range(workers))
            ax.set_yticklabels(["rank %d" % r for r in range(workers)], fontsize=7)
            ax.invert_yaxis()
            ax.set_title("%s: %s, one step" % (w["label"], TITLES[name]), fontsize=9)
        axes[-1][0].set_xlabel("ms")
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in KIND_COLORS.values()]
        axes[0][0].legend(handles, list(KIND_COLORS), fontsize=6, ncol=4, loc="upper right")
        fig.tight_layout()
        path = os.path.join(out_dir, "pipe_bd_timeline_%s.png" % w["label"].replace(" ", "_"))
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    csv_path = os.path.join(out_dir, "pipe_bd_timeline.csv")
    write_csv(csv_path, ["workload", "strategy", "rank", "lane", "kind", "label", "start_s", "end_s"], rows)
    return written + [csv_path]


def generate(out_dir, inputs):
    """Writes every figure and its CSV; returns the paths written.

    inputs: {"bench": PATH or [PATH, ...]} (JSON files of `bd_bench --json`), or the path(s) themselves.
    """
    paths = _paths(inputs.get("bench") if isinstance(inputs, dict) else inputs)
    if not paths:
        raise ValueError("nothing to plot: give bd_bench JSON files (inputs['bench'])")
    workloads = load_workloads(paths)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    written += speedup_figure(out_dir, workloads)
    written += breakdown_figure(out_dir, workloads)
    written += memory_figure(out_dir, workloads)
    written += timeline_figure(out_dir, workloads)
    return written


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench", nargs="+", help="JSON files written by `bd_bench --json PATH`")
    p.add_argument("--out", required=True, help="output directory")
    a = p.parse_args(argv)
    return print_written("pipe_bd.py", lambda: generate(a.out, {"bench": a.bench}))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
