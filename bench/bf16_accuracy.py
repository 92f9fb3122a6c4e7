#!/usr/bin/env python3
"""Does bf16 mixed precision train to f32's accuracy? Runs tools/train in f32 and in bf16 for several seeds on
two cases and compares the final test accuracies: bf16 passes a case when its mean is at least f32's mean minus
f32's run-to-run spread (the largest minus the smallest accuracy of the f32 seeds).

Cases (small enough to run in minutes on a CPU; 5 seeds, because 3 can understate the spread: the demo case's f32
accuracies were 80.02-80.19% over seeds 0-2 and 80.02-81.40% over seeds 0-4):
    demo    the Pipe-BD demo's teacher (tools/demo): ResNet-18 (CIFAR variant, width 8) on 2048 Fashion-MNIST
            images for 3 epochs, batch 32, lr 0.05; test accuracy on the 10000 test images
    cifar   a CIFAR-sized ResNet-18 (3x32x32 inputs, width 16) on synthetic data with 100 classes and heavy noise
            (synthetic:n=2048,classes=100,noise=255), 8 epochs (where test accuracy levels off, about 94%),
            batch 64, lr 0.05; --width 64 for the full model

Usage:
    bazel build -c opt //tools/train:train
    python3 bench/bf16_accuracy.py [--cases demo,cifar] [--seeds 5] [--device cpu|cuda] [--width 16]
Prints one line per run and a verdict per case; exits 1 when a case fails, 2 when a run fails.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FINAL = re.compile(r"^epoch (\d+)/(\d+): .*test acc ([0-9.]+)%", re.M)


def case_args(name, width):
    if name == "demo":
        return ["--model", "resnet18:cifar,width=8,in_channels=1,classes=10", "--dataset", "fashion-mnist",
                "--epochs", "3", "--batch", "32", "--lr", "0.05", "--steps-per-epoch", "64"]
    if name == "cifar":
        return ["--model", "resnet18:cifar,width=%d" % width, "--dataset", "synthetic:n=2048,classes=100,noise=255",
                "--epochs", "8", "--batch", "64", "--lr", "0.05"]
    raise SystemExit("unknown case %r (known: demo, cifar)" % name)


def final_accuracy(train, args, precision, seed, device):
    cmd = [train] + args + ["--precision", precision, "--seed", str(seed), "--workers", "1", "--log-every", "0"]
    if device:
        cmd += ["--device", device]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    epochs = FINAL.findall(run.stdout)
    if run.returncode != 0 or not epochs or epochs[-1][0] != epochs[-1][1]:
        sys.stderr.write("run failed (exit %d): %s\n%s\n" % (run.returncode, " ".join(cmd), run.stdout[-2000:]))
        sys.exit(2)
    return float(epochs[-1][2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", default=os.path.join(ROOT, "bazel-bin", "tools", "train", "train"))
    ap.add_argument("--cases", default="demo,cifar", help="comma-separated: demo, cifar (default both)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per precision (default 5)")
    ap.add_argument("--device", default="", help="train's --device (default: the best device present)")
    ap.add_argument("--width", type=int, default=16, help="the cifar case's ResNet-18 width (default 16)")
    a = ap.parse_args()
    if a.seeds < 2:
        ap.error("--seeds must be at least 2 (the spread needs two runs)")
    if not os.access(a.train, os.X_OK):
        ap.error("%s is not an executable: build //tools/train:train or pass --train" % a.train)
    failed = False
    for case in a.cases.split(","):
        args = case_args(case, a.width)
        acc = {}
        for precision in ("f32", "bf16"):
            acc[precision] = []
            for seed in range(a.seeds):
                acc[precision].append(final_accuracy(a.train, args, precision, seed, a.device))
                print("%s %s seed %d: test accuracy %.2f%%" % (case, precision, seed, acc[precision][-1]), flush=True)
        f32, bf16 = acc["f32"], acc["bf16"]
        spread = max(f32) - min(f32)
        ok = statistics.mean(bf16) >= statistics.mean(f32) - spread
        failed |= not ok
        print("%s: f32 %.2f%% (%.2f to %.2f), bf16 %.2f%% (%.2f to %.2f); f32's spread %.2f points: %s"
              % (case, statistics.mean(f32), min(f32), max(f32), statistics.mean(bf16), min(bf16), max(bf16), spread,
                 "bf16 reaches f32's accuracy" if ok else "bf16 FALLS SHORT of f32's accuracy"), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
