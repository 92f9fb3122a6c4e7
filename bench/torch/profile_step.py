#!/usr/bin/env python3
"""PyTorch's profiler tables of one step of a bench/models case, for the GPU bundle to print beside Tandem's
(models_bench --profile) for the same step.

The case is speed.py's (torchvision's architecture, f32 with TF32 on a GPU, channels-last there, SGD with
momentum for mode step; cuDNN's algorithms by its heuristics unless --cudnn-benchmark). After --warmup untimed steps, --steps steps run under torch.profiler; the tables give
per step:
    per kernel   each GPU kernel's launches and total time, and its share of the step's kernel time
    per op       each operator's self time on the device (the CPU for a CPU run) and its share
A CPU run (--device cpu) has no kernels: its op table is of CPU time, which tests the script without a GPU.

Usage:
    python3 bench/torch/profile_step.py                                   # ResNet-50, 224x224, batch 256, fwd_bwd
    python3 bench/torch/profile_step.py --device cpu --model resnet18 --size 32 --batch 2 --steps 1
"""
import argparse

import torch
import torchvision
from torch.autograd import DeviceType

from speed import make_step


def device_time_us(avg):
    """An averaged op's self time on the device, in microseconds, under the attribute this PyTorch names it."""
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(avg, attr):
            return getattr(avg, attr)
    return 0.0


def kernel_times(events):
    """(kernel name, microseconds) of every GPU kernel: device events where PyTorch records them as such (2.x),
    else the kernels attached to the ops that launched them (1.x)."""
    device = [e for e in events if getattr(e, "device_type", DeviceType.CPU) == DeviceType.CUDA]
    if device:
        return [(e.name, e.time_range.elapsed_us()) for e in device]
    return [(k.name, k.duration) for e in events for k in getattr(e, "kernels", [])]


def table(title, rows, steps, top, unit_total):
    """rows: (name, count, microseconds) over all profiled steps; printed per step, largest first."""
    rows = sorted(rows, key=lambda r: -r[2])
    total = sum(r[2] for r in rows) or 1.0
    print("%s (top %d of %d; per step: %.2f ms in all%s)" % (title, min(top, len(rows)), len(rows),
                                                              total / steps / 1e3, unit_total))
    print("%-80s %7s %10s %7s" % ("name", "count", "total ms", "share"))
    for name, count, us in rows[:top]:
        short = name if len(name) <= 80 else name[:77] + "..."
        print("%-80s %7d %10.3f %6.1f%%" % (short, count / steps, us / steps / 1e3, 100.0 * us / total))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--mode", default="fwd_bwd", choices=["fwd", "fwd_bwd", "step"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--nchw", action="store_true", help="NCHW instead of channels-last on the GPU")
    ap.add_argument("--no-tf32", action="store_true")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="cuDNN's algorithms by timing them all (cudnn.benchmark; default: its heuristics, as "
                         "models_bench's default)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before the profiled ones")
    ap.add_argument("--steps", type=int, default=1, help="profiled steps (the tables are per step)")
    ap.add_argument("--top", type=int, default=30, help="rows per table")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.top < 1:
        ap.error("--steps and --top must be at least 1, --warmup at least 0")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit("profile_step.py: --device %s, but this PyTorch sees no GPU" % args.device)
    channels_last = cuda and not args.nchw
    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    torch.backends.cuda.matmul.allow_tf32 = not args.no_tf32
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    run = make_step(args.model, args.size, args.batch, args.mode, args.device, channels_last)
    for _ in range(args.warmup):
        run()
    if cuda:
        torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            run()
        if cuda:
            torch.cuda.synchronize()
    gpu = torch.cuda.get_device_name(0) if cuda else "cpu"
    print("profile: PyTorch %s, torchvision %s, %s (%s), %s %dx%d batch %d %s, %s, TF32 %s, cuDNN %s; %d step(s) "
          "after %d warm-up" % (torch.__version__, torchvision.__version__, args.device, gpu, args.model, args.size,
                                args.size, args.batch, args.mode, "channels-last" if channels_last else "NCHW",
                                "off" if args.no_tf32 or not cuda else "on",
                                "benchmark" if args.cudnn_benchmark else "heuristics", args.steps, args.warmup))
    ops = [a for a in prof.key_averages() if getattr(a, "device_type", DeviceType.CPU) == DeviceType.CPU]
    if cuda:
        kernels = {}
        for name, us in kernel_times(prof.events()):
            count, total = kernels.get(name, (0, 0.0))
            kernels[name] = (count + 1, total + us)
        table("per kernel", [(n, c, t) for n, (c, t) in kernels.items()], args.steps, args.top, " of kernel time")
        print()
        table("per op, self time on the GPU", [(a.key, a.count, device_time_us(a)) for a in ops if device_time_us(a)],
              args.steps, args.top, "")
    else:
        table("per op, self CPU time", [(a.key, a.count, a.self_cpu_time_total) for a in ops], args.steps, args.top,
              "")


if __name__ == "__main__":
    main()
