#!/usr/bin/env python3
"""Times the cases of bench/models (ResNet-18, ResNet-50, MobileNetV2) in PyTorch eager and prints
Tandem / PyTorch throughput ratios.

Cases: torchvision's ImageNet architectures (1000 classes), f32 (TF32 for convolutions and matrix products as
Tandem's run had it), channels-last model and inputs on a GPU, in three modes:
    fwd       forward in eval mode under torch.no_grad()
    fwd_bwd   forward in training mode, F.cross_entropy, backward
    step      fwd_bwd plus torch.optim.SGD(lr=0.01, momentum=0.9, weight_decay=5e-4).step()

Usage:
    gpu-bundle/bin/models_bench --benchmark_out=models_bench.json --benchmark_out_format=json
    python3 bench/torch/speed.py --tandem models_bench.json        # the same cases, with ratios
    python3 bench/torch/speed.py --models resnet18 --sizes 32 --batch 256   # PyTorch alone
"""
import argparse
import json
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
    return cases, device, ctx.get("tandem_tf32", "1") == "1", ctx.get("tandem_channels_last", "1") == "1"


def time_case(model_name, size, batch, mode, device, channels_last, min_time=1.0):
    torch.manual_seed(1)
    model = getattr(torchvision.models, model_name)(num_classes=1000).to(device)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x = torch.randn(batch, 3, size, size, device=device).to(memory_format=fmt)
    y = torch.randint(0, 1000, (batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    model.train(mode != "fwd")

    def run():
        if mode == "fwd":
            with torch.no_grad():
                model(x)
            return
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        if mode == "step":
            opt.step()

    cuda = device.startswith("cuda")
    for _ in range(3):
        run()
    if cuda:
        torch.cuda.synchronize()
    iters, total = 0, 0.0
    while total < min_time or iters < 3:
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tandem", help="models_bench JSON (--benchmark_out); its cases and device are timed")
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    ap.add_argument("--sizes", default="32,224")
    ap.add_argument("--modes", default="fwd,fwd_bwd,step")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--nchw", action="store_true", help="NCHW instead of channels-last on the GPU")
    ap.add_argument("--no-tf32", action="store_true")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed iterations per case")
    args = ap.parse_args()

    if args.tandem:
        cases, device, tf32, channels_last = parse_tandem(args.tandem)
    else:
        cases = [{"model": m, "size": int(s), "mode": mode, "batch": args.batch, "tandem": None}
                 for m in args.models.split(",") for s in args.sizes.split(",") for mode in args.modes.split(",")]
        device, tf32, channels_last = args.device, not args.no_tf32, not args.nchw
    channels_last = channels_last and device.startswith("cuda")
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    print("PyTorch %s, torchvision %s, %s (%s), tf32 %s, %s" % (
        torch.__version__, torchvision.__version__, device, gpu, "on" if tf32 else "off",
        "channels-last" if channels_last else "NCHW"))
    print("%-14s %5s %6s %-8s %14s %14s %10s" % ("model", "size", "batch", "mode", "Tandem img/s", "PyTorch img/s",
                                                "Tandem/PT"))
    for c in cases:
        pt = time_case(c["model"], c["size"], c["batch"], c["mode"], device, channels_last, args.min_time)
        tandem = c["tandem"]
        print("%-14s %5d %6d %-8s %14s %14.1f %10s" % (
            c["model"], c["size"], c["batch"], c["mode"], "%.1f" % tandem if tandem else "-", pt,
            "%.2f" % (tandem / pt) if tandem else "-"))


if __name__ == "__main__":
    main()
