#!/usr/bin/env python3
"""Writes the PyTorch golden files of Tandem's parity test (tests/models/parity_test.cc).

For fixed seeds it builds torchvision models, draws an input batch and labels, runs one training-mode
forward (batch-norm batch statistics), the cross-entropy loss and its backward, in float64 on the CPU
(weights and inputs are drawn in float32, so Tandem's float32 copies hold exactly the same values), and saves
per model one safetensors file:

    <torchvision state_dict keys>      the weights and buffers before the step (float32; counters int64)
    parity.input      [2, 3, 32, 32]   the batch (float32)
    parity.labels     [2]              int64 labels in [0, 10)
    parity.logits     [2, 10]          training-mode output (float64)
    parity.loss       []               F.cross_entropy(logits, labels) (float64)
    parity.grad.input                  d loss / d input (float64)
    parity.grad.<key>                  d loss / d parameter for selected parameters (float64)
    parity.after.<key>                 selected running statistics after the forward (float64)
    metadata: model (a Tandem model spec), torch and torchvision versions, seed

Models (small, so the files stay small): torchvision's ResNet-18 layout (BasicBlock, [2, 2, 2, 2], ImageNet
stem) at base width 8 instead of 64, and torchvision's mobilenet_v2(width_mult=0.25) with dropout 0; both with
10 classes on 32x32 inputs.

Usage (needs torch and torchvision; uses the safetensors package when installed, else writes the format itself;
no GPU is needed: the reference runs in float64 on the CPU):
    python3 bench/torch/parity.py [--out tests/data]
then commit the two parity_*.safetensors files of tests/data/.
"""
import argparse
import os

import json
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock, ResNet

try:
    from safetensors.torch import save_file
except ImportError:  # the format written by hand (same bytes, tensors in key order)
    _DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}

    def save_file(tensors, path, metadata=None):
        header, blobs, offset = {}, [], 0
        if metadata:
            header["__metadata__"] = metadata
        for k in sorted(tensors):
            t = tensors[k].detach().cpu().contiguous()
            data = t.numpy().tobytes()
            header[k] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
            blobs.append(data)
            offset += len(data)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(path + ".tmp", "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
        os.replace(path + ".tmp", path)

SEED = 20240229
BATCH, SIZE = 16, 32


class NarrowResNet(ResNet):
    """torchvision's ResNet with base width `width` instead of 64: the same modules, key names and forward
    (torchvision's own _make_layer and _forward_impl), only narrower."""

    def __init__(self, layers, width, num_classes):
        nn.Module.__init__(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes = width
        self.dilation = 1
        self.groups = 1
        self.base_width = 64
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(BasicBlock, width, layers[0])
        self.layer2 = self._make_layer(BasicBlock, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(BasicBlock, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(BasicBlock, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


def randomize_bn(model):
    """Random BN affine parameters and running statistics (not torchvision's 1/0/0/1): a stricter check."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.8, 1.2)


def golden(name, spec, model, grads, stats, out_dir):
    torch.manual_seed(SEED + 1)
    x32 = torch.randn(BATCH, 3, SIZE, SIZE)
    labels = torch.randint(0, 10, (BATCH,))
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    model = model.double().train()
    x = x32.double().requires_grad_(True)
    logits = model(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    tensors = dict(state)
    tensors["parity.input"] = x32.contiguous()
    tensors["parity.labels"] = labels.contiguous()
    tensors["parity.logits"] = logits.detach().contiguous()
    tensors["parity.loss"] = loss.detach().reshape(())
    tensors["parity.grad.input"] = x.grad.detach().contiguous()
    for k in grads:
        tensors["parity.grad." + k] = params[k].grad.detach().contiguous()
    for k in stats:
        tensors["parity.after." + k] = buffers[k].detach().contiguous()
    meta = {"model": spec, "torch": torch.__version__, "torchvision": torchvision.__version__, "seed": str(SEED)}
    path = os.path.join(out_dir, "parity_%s.safetensors" % name)
    save_file(tensors, path, metadata=meta)
    print("%s: loss %.6f, %d tensors, %d bytes" % (path, loss.item(), len(tensors), os.path.getsize(path)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    torch.manual_seed(SEED)
    resnet = NarrowResNet([2, 2, 2, 2], width=8, num_classes=10)
    randomize_bn(resnet)
    golden("resnet18", "resnet18:width=8,classes=10", resnet,
           ["conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
            "layer3.1.bn2.weight", "layer4.1.conv2.weight", "fc.weight", "fc.bias"],
           ["bn1.running_mean", "bn1.running_var", "layer4.1.bn2.running_var"], args.out)

    torch.manual_seed(SEED)
    mnv2 = torchvision.models.mobilenet_v2(width_mult=0.25, num_classes=10, dropout=0.0)
    randomize_bn(mnv2)
    golden("mobilenet_v2", "mobilenet_v2:width_mult=0.25,classes=10,dropout=0", mnv2,
           ["features.0.0.weight", "features.0.1.weight", "features.1.conv.0.0.weight", "features.2.conv.1.0.weight",
            "features.17.conv.2.weight", "features.18.0.weight", "features.18.1.bias", "classifier.1.weight",
            "classifier.1.bias"],
           ["features.0.1.running_mean", "features.0.1.running_var", "features.17.conv.3.running_var"], args.out)


if __name__ == "__main__":
    main()
