#!/usr/bin/env python3
"""PyTorch's side of bench/bf16_accuracy.py's demo case: the same narrow ResNet-18 (CIFAR stem, width 8, one input
channel) trained on 2048 Fashion-MNIST images per epoch for 3 epochs (batch 32, SGD lr 0.05, Nesterov momentum 0.9,
weight decay 5e-4, cosine per step), in float32 and under CPU autocast to bfloat16, over several seeds: how much
PyTorch's own mixed precision moves the test accuracy (the data pipeline is this script's, not Tandem's).

Usage (Debian: python3-torch, python3-torchvision, dataset-fashion-mnist):
    /usr/bin/python3 bench/torch/bf16_accuracy.py [--seeds 5] [--data /usr/share/datasets/fashion-mnist]
"""
import argparse
import gzip
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity import NarrowResNet  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's training-set pixel statistics


def idx(path):
    data = gzip.open(path).read()
    if data[2:4] == b"\x08\x03":
        return np.frombuffer(data, np.uint8, offset=16).reshape(-1, 28, 28)
    return np.frombuffer(data, np.uint8, offset=8)


def normalized(images):
    return (torch.tensor(images, dtype=torch.float32)[:, None] / 255 - MEAN) / STD


def test_accuracy(data, seed, bf16, steps=64, epochs=3, batch=32):
    xtr, ytr, xte, yte = data
    torch.manual_seed(seed)
    model = NarrowResNet(BasicBlock, [2, 2, 2, 2], 8, 10, True)
    model.conv1 = nn.Conv2d(1, 8, 3, 1, 1, bias=False)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    total = steps * epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / total)))
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(ytr), generator=gen)[: steps * batch].numpy()
        for i in range(steps):
            pick = order[i * batch:(i + 1) * batch]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(normalized(xtr[pick])), torch.tensor(ytr[pick], dtype=torch.long))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, len(yte), 500):
            logits = model(normalized(xte[i:i + 500]))
            correct += (logits.argmax(1).numpy() == yte[i:i + 500]).sum()
    return 100.0 * correct / len(yte)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = [idx(os.path.join(a.data, f)) for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                                   "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")]
    for bf16 in (False, True):
        acc = [test_accuracy(data, seed, bf16) for seed in range(a.seeds)]
        print("%s: %s; mean %.2f%%, spread %.2f points" % ("bf16 autocast" if bf16 else "f32",
              ", ".join("%.2f" % x for x in acc), np.mean(acc), max(acc) - min(acc)), flush=True)


if __name__ == "__main__":
    main()
