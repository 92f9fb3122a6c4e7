#!/usr/bin/env python3
"""Times the cases of bench/models (ResNet-18, ResNet-50, MobileNetV2) in PyTorch eager and prints
Tandem / PyTorch throughput ratios.

Cases: torchvision's ImageNet architectures (1000 classes), f32 (TF32 for convolutions and matrix products as
Tandem's run had it), channels-last model and inputs on a GPU, NCHW on the CPU, with as many CPU threads as
Tandem's run used, in three modes:
    fwd       forward in eval mode under torch.no_grad()
    fwd_bwd   forward in training mode, F.cross_entropy, backward
    step      fwd_bwd plus torch.optim.SGD(lr=0.01, momentum=0.9, weight_decay=5e-4).step()
With --bf16, each case is also timed in PyTorch under bf16 autocast (torch.autocast with torch.bfloat16 around
the forward and the loss: PyTorch's mixed precision, what a user would pick instead of f32), in a column beside.
cuDNN picks convolution algorithms on both sides alike: by its heuristics (both runtimes' default), or with
--cudnn-benchmark by timing them all (PyTorch's cudnn.benchmark, models_bench --cudnn-benchmark); with --tandem,
as the JSON's run did (tandem_cudnn_benchmark).
With --precision bf16, Tandem's run is bf16 (models_bench --precision=bf16, or a JSON it wrote so) and the
PyTorch column is bf16 autocast: mixed precision side by side.
With --tandem-graph, a second models_bench JSON, of a run whose iterations replayed a CUDA graph (models_bench
--cuda-graph on a GPU), goes in a column beside, against the same PyTorch eager figures.

Usage:
    gpu-bundle/bin/models_bench --benchmark_out=models_bench.json --benchmark_out_format=json
    python3 bench/torch/speed.py --tandem models_bench.json        # the same cases, with ratios
    python3 bench/torch/speed.py --tandem models_bench.json --bf16 # and PyTorch's bf16 autocast beside
    python3 bench/torch/speed.py --tandem models_bench.json --tandem-graph graphed.json   # and Tandem's graphs
    python3 bench/torch/speed.py --models resnet18 --sizes 32 --batch 256   # PyTorch alone
    tools/tandem bench-cpu        # side by side on the CPU: --tandem-bin runs each model's cases in Tandem
                                  # right before PyTorch's, batches 8 and 64 at 32x32 and 64x64
    tools/tandem bench-cpu --precision bf16   # Tandem's bf16 beside PyTorch's bf16 autocast
With --out PREFIX the results also go to PREFIX.json and PREFIX.csv (one row per case).
"""
import argparse
import csv
import json
import os
import platform
import subprocess
import tempfile
import time

import torch
import torch.nn.functional as F
import torchvision


def parse_tandem(path):
    """Tandem's cases and images/s from Google Benchmark JSON: names 'model/size/mode/...'."""
    with open(path) as f:
        data = json.load(f)
    ctx = data.get("context", {})
    cases = []
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        model, size, mode = b["name"].split("/")[:3]
        cases.append({"model": model, "size": int(size), "mode": mode, "batch": int(b["batch"]),
                      "tandem": float(b["images_per_s"])})
    device = ctx.get("tandem_device", "cuda:0")
    for b in cases:
        b["precision"] = ctx.get("tandem_dtype", "f32")
    for b in cases:
        b["cudnn_benchmark"] = ctx.get("tandem_cudnn_benchmark", "0") == "1"
    return cases, device, ctx.get("tandem_tf32", "1") == "1", ctx.get("tandem_channels_last", "1") == "1", ctx


def run_tandem(binary, model, size, batch, modes, device, min_time, threads, precision="f32",
               cudnn_benchmark=False):
    """Runs models_bench on one model, size and batch; returns its cases (parse_tandem) and JSON context."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "tandem.json")
        cmd = [binary, "--device=" + device, "--batch=%d" % batch, "--sizes=%d" % size, "--models=" + model,
               "--modes=" + ",".join(modes), "--min-time=%g" % min_time, "--precision=" + precision,
               "--benchmark_out=" + out, "--benchmark_out_format=json"] + (
                   ["--cudnn-benchmark"] if cudnn_benchmark else [])
        env = dict(os.environ, TANDEM_NUM_THREADS=str(threads))
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise SystemExit("speed.py: %s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stdout))
        cases, _, _, _, ctx = parse_tandem(out)
        return cases, ctx


def make_step(model_name, size, batch, mode, device, channels_last, bf16=False):
    """One case's step as a function: the model and inputs made, nothing run (profile_step.py profiles it)."""
    torch.manual_seed(1)
    model = getattr(torchvision.models, model_name)(num_classes=1000).to(device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x = torch.randn(batch, 3, size, size, device=device).to(memory_format=fmt)
    y = torch.randint(0, 1000, (batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    model.train(mode != "fwd")
    cuda = device.startswith("cuda")
    autocast = torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=bf16)

    def run():
        if mode == "fwd":
            with torch.no_grad(), autocast:
                model(x)
            return
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        if mode == "step":
            opt.step()

    return run


def time_case(model_name, size, batch, mode, device, channels_last, min_time=1.0, bf16=False):
    run = make_step(model_name, size, batch, mode, device, channels_last, bf16)
    cuda = device.startswith("cuda")
    for _ in range(3):
        run()
    if cuda:
        torch.cuda.synchronize()
    iters, total = 0, 0.0
    while total < min_time or iters < 3:  # at least Tandem's timed span, and 3 iterations
        if cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            stop.synchronize()
            total += start.elapsed_time(stop) / 1e3
        else:
            t0 = time.perf_counter()
            run()
            total += time.perf_counter() - t0
        iters += 1
    return iters * batch / total


def try_time_case(model_name, size, batch, mode, *args, bf16=False):
    """time_case, or None, said on stdout, when this PyTorch cannot run the case (PyTorch 1.13's CPU has no bf16
    backward for MobileNetV2's ReLU6)."""
    try:
        return time_case(model_name, size, batch, mode, *args, bf16=bf16)
    except RuntimeError as e:
        print("PyTorch%s cannot run %s %dx%d batch %d %s: %s" % (" bf16 autocast" if bf16 else "", model_name, size,
                                                               size, batch, mode, str(e).splitlines()[0]))
        return None


def cell(value, fmt="%.1f"):
    return fmt % value if value else "-"


def ratio_tables(rows, peer="pytorch", title="PyTorch", mine="tandem", who="Tandem"):
    """The results as the issue's tables: per batch and size, a row per model, 'Tandem / peer = ratio' per
    mode (images/s); `peer` is the rows' key of PyTorch's figure (pytorch, or pytorch_bf16 for autocast), `mine`
    Tandem's (tandem, or tandem_graph for its steps replayed from a CUDA graph)."""
    lines = []
    modes = [m for m in ("fwd", "fwd_bwd", "step") if any(r["mode"] == m and r.get(mine) for r in rows)]
    for batch in sorted({r["batch"] for r in rows}):
        for size in sorted({r["size"] for r in rows}):
            group = [r for r in rows if r["batch"] == batch and r["size"] == size and r.get(mine)]
            if not group:
                continue
            lines += ["", "batch %d at %dx%d, images/s, %s / %s:" % (batch, size, size, who, title), "",
                      "| model | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
            for model in dict.fromkeys(r["model"] for r in group):
                cells = []
                for mode in modes:
                    r = next((r for r in group if r["model"] == model and r["mode"] == mode), None)
                    cells.append("%.0f / %.0f = %.2f" % (r[mine], r[peer], r[mine] / r[peer])
                                 if r and r.get(mine) and r[peer] else "-")
                lines.append("| %s | %s |" % (model, " | ".join(cells)))
    return "\n".join(lines)


def write_results(prefix, rows, context):
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    fields = ["model", "size", "batch", "mode", "tandem_images_per_s", "pytorch_images_per_s", "ratio"]
    table = [{"model": r["model"], "size": r["size"], "batch": r["batch"], "mode": r["mode"],
              "tandem_images_per_s": r["tandem"], "pytorch_images_per_s": r["pytorch"],
              "ratio": r["tandem"] / r["pytorch"] if r["tandem"] and r["pytorch"] else None} for r in rows]
    if any("pytorch_bf16" in r for r in rows):
        fields += ["pytorch_bf16_images_per_s", "ratio_bf16"]
        for t, r in zip(table, rows):
            t["pytorch_bf16_images_per_s"] = r["pytorch_bf16"]
            t["ratio_bf16"] = r["tandem"] / r["pytorch_bf16"] if r["tandem"] and r["pytorch_bf16"] else None
    if any("tandem_graph" in r for r in rows):
        fields += ["tandem_graph_images_per_s", "ratio_graph"]
        for t, r in zip(table, rows):
            t["tandem_graph_images_per_s"] = r.get("tandem_graph")
            t["ratio_graph"] = r["tandem_graph"] / r["pytorch"] if r.get("tandem_graph") and r["pytorch"] else None
    with open(prefix + ".json", "w") as f:
        json.dump({"context": context, "results": table}, f, indent=1)
    with open(prefix + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(table)
    print("wrote %s.json and %s.csv" % (prefix, prefix))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", action="append", default=[],
                    help="models_bench JSON (--benchmark_out); its cases and device are timed (may repeat)")
    ap.add_argument("--tandem-graph", metavar="FILE",
                    help="models_bench JSON of a run with --cuda-graph on a GPU (tandem_cuda_graph 1): its cases go in "
                         "a column beside, against the same PyTorch eager figures (cases it lacks: a dash)")
    ap.add_argument("--tandem-bin", help="the models_bench binary: each model's cases run in Tandem right before "
                    "they run in PyTorch, at --batches, --sizes, --models, --modes, --device")
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    ap.add_argument("--sizes", default="32,224")
    ap.add_argument("--modes", default="fwd,fwd_bwd,step")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", help="comma list of batches (default: --batch)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--nchw", action="store_true", help="NCHW instead of channels-last on the GPU")
    ap.add_argument("--no-tf32", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="also time PyTorch under bf16 autocast, in a column beside")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="cuDNN's algorithms by timing them all, on both sides (default: its heuristics, both "
                         "runtimes' default); with --tandem, as the JSON's run chose")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="Tandem's precision (--tandem-bin runs it so; a --tandem JSON must have been run so) and "
                         "PyTorch's beside it: f32, or bf16 autocast")
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads of both (default: those of Tandem's run in its JSON, else the core count)")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed iterations per case")
    ap.add_argument("--out", help="PREFIX: also write the results to PREFIX.json and PREFIX.csv")
    args = ap.parse_args()
    if args.tandem and args.tandem_bin:
        ap.error("--tandem and --tandem-bin exclude each other")
    if args.tandem_graph and not args.tandem:
        ap.error("--tandem-graph goes with --tandem (the eager run whose cases PyTorch times)")
    if args.bf16 and args.precision == "bf16":
        ap.error("--bf16 adds a PyTorch bf16 column beside f32; with --precision bf16 the PyTorch column is bf16")

    batches = [int(b) for b in (args.batches or str(args.batch)).split(",")]
    models, sizes, modes = args.models.split(","), [int(s) for s in args.sizes.split(",")], args.modes.split(",")
    threads = args.threads
    if args.tandem:
        cases, ctx = [], {}
        for path in args.tandem:
            c, device, tf32, channels_last, ctx = parse_tandem(path)
            if any(x["precision"] != args.precision for x in c):
                raise SystemExit("speed.py: %s was run in %s (tandem_dtype), not --precision %s" % (
                    path, c[0]["precision"], args.precision))
            cases += c
        searched = {c["cudnn_benchmark"] for c in cases}
        if len(searched) > 1:
            raise SystemExit("speed.py: the --tandem files differ in tandem_cudnn_benchmark; give them one at a time")
        if searched:
            tandem_searched = searched.pop()
            if args.cudnn_benchmark and not tandem_searched:
                raise SystemExit("speed.py: --cudnn-benchmark, but the --tandem run took cuDNN's heuristics "
                                 "(run models_bench --cudnn-benchmark)")
            args.cudnn_benchmark = tandem_searched
        threads = threads or int(ctx.get("tandem_threads", 0))
        if args.tandem_graph:
            graphed, _, _, _, gctx = parse_tandem(args.tandem_graph)
            if gctx.get("tandem_cuda_graph") != "1":
                raise SystemExit("speed.py: %s is not a run whose steps replayed a CUDA graph (tandem_cuda_graph is "
                                 "%s; run models_bench --cuda-graph on a GPU)" % (args.tandem_graph,
                                                                                gctx.get("tandem_cuda_graph")))
            for c in cases:
                g = next((g for g in graphed if all(g[k] == c[k] for k in ("model", "size", "mode", "batch"))), None)
                if g:
                    c["tandem_graph"] = g["tandem"]
    else:
        cases = [{"model": m, "size": s, "mode": mode, "batch": b, "tandem": None}
                 for b in batches for s in sizes for m in models for mode in modes]
        device, tf32, channels_last = args.device, not args.no_tf32, not args.nchw
    threads = threads or os.cpu_count()
    torch.set_num_threads(threads)
    channels_last = channels_last and device.startswith("cuda")
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    context = {"pytorch": torch.__version__, "torchvision": torchvision.__version__, "device": device,
               "gpu": gpu, "cpu": platform.processor() or platform.machine(), "threads": threads,
               "tf32": tf32, "layout": "channels-last" if channels_last else "NCHW",
               "dtype": "bf16 (PyTorch: autocast)" if args.precision == "bf16" else
                        "f32" + (", and bf16 autocast" if args.bf16 else ""),
               "min_time_s": args.min_time,
               "cudnn_algorithms": "timed search (benchmark), both" if args.cudnn_benchmark else "heuristics, both",
               "mkldnn": torch.backends.mkldnn.is_available(),
               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default")}
    print("PyTorch %s, torchvision %s, %s (%s), %d CPU threads, OMP_WAIT_POLICY %s, tf32 %s, %s, %s%s" % (
        torch.__version__, torchvision.__version__, device, gpu, threads, context["omp_wait_policy"],
        ("on" if tf32 else "off") if gpu != "cpu" else "n/a", "channels-last" if channels_last else "NCHW",
        context["dtype"], ", cuDNN algorithms: " + context["cudnn_algorithms"] if gpu != "cpu" else ""),
        flush=True)
    bf16_head = " %14s %10s" % ("PT bf16 img/s", "Tandem/bf16") if args.bf16 else ""
    graph_head = " %14s %10s" % ("graph img/s", "graph/PT") if args.tandem_graph else ""
    print("%-14s %5s %6s %-8s %14s %14s %10s%s%s" % ("model", "size", "batch", "mode", "Tandem img/s",
                                                    "PyTorch img/s", "Tandem/PT", bf16_head, graph_head), flush=True)
    rows = []
    # With --tandem-bin, one model, size and batch at a time: Tandem's cases, then PyTorch's, so that both
    # meet the same load on a shared machine.
    groups = {}
    for c in cases:
        groups.setdefault((c["batch"], c["size"], c["model"]), []).append(c)
    for (batch, size, model), group in groups.items():
        if args.tandem_bin:
            measured, ctx = run_tandem(args.tandem_bin, model, size, batch, [c["mode"] for c in group], device,
                                       args.min_time, threads, args.precision, args.cudnn_benchmark)
            if int(ctx.get("tandem_threads", threads)) != threads:
                raise SystemExit("speed.py: Tandem ran %s threads, not %d" % (ctx.get("tandem_threads"), threads))
            for c in group:
                c["tandem"] = next(m["tandem"] for m in measured if m["mode"] == c["mode"])
        for c in group:
            pt = try_time_case(c["model"], c["size"], c["batch"], c["mode"], device, channels_last, args.min_time,
                               bf16=args.precision == "bf16")
            tandem = c["tandem"]
            row = dict(c, pytorch=pt)
            bf16_cells = ""
            if args.bf16:
                row["pytorch_bf16"] = try_time_case(c["model"], c["size"], c["batch"], c["mode"], device,
                                                    channels_last, args.min_time, bf16=True)
                bf16_cells = " %14s %10s" % (cell(row["pytorch_bf16"]),
                                             cell(tandem and row["pytorch_bf16"] and tandem / row["pytorch_bf16"],
                                                  "%.2f"))
            graph_cells = ""
            if args.tandem_graph:
                g = c.get("tandem_graph")
                graph_cells = " %14s %10s" % (cell(g), cell(g and pt and g / pt, "%.2f"))
            print("%-14s %5d %6d %-8s %14s %14s %10s%s%s" % (
                c["model"], c["size"], c["batch"], c["mode"], cell(tandem), cell(pt),
                cell(tandem and pt and tandem / pt, "%.2f"), bf16_cells, graph_cells), flush=True)
            rows.append(row)
    if any(r["tandem"] for r in rows):
        print(ratio_tables(rows, title="PyTorch bf16 autocast (Tandem bf16)" if args.precision == "bf16"
                           else "PyTorch"))
        if args.bf16:
            print(ratio_tables(rows, "pytorch_bf16", "PyTorch bf16 autocast"))
        if args.tandem_graph:
            print(ratio_tables(rows, title="PyTorch eager", mine="tandem_graph", who="Tandem replaying a CUDA graph"))
    if args.out:
        write_results(args.out, rows, context)


if __name__ == "__main__":
    main()
