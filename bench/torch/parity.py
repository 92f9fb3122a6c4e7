#!/usr/bin/env python3
"""Writes the PyTorch golden files of Tandem's parity test (tests/models/parity_test.cc).

For a model spec, a batch size, an image size and a seed it builds the torchvision model, draws an input batch
and labels, and runs one training-mode forward (batch-norm batch statistics), the cross-entropy loss and its
backward three times on the CPU: in float64 (the reference), in float32 (PyTorch's own float32 error, which sets
the float32 tolerance of the test) and in float32 under PyTorch's CPU autocast to bfloat16 (its mixed-precision
error, which sets the test's bound on Tandem's bf16 policy). Weights and inputs are drawn in float32, so both runs and Tandem's copies
start from exactly the same values. One safetensors file per model:

    <torchvision state_dict keys>   the weights and buffers before the step (float32; counters int64)
    parity.input                    [batch, 3, size, size] the input (float32)
    parity.labels                   [batch] int64 labels in [0, classes)
    parity.logits                   [batch, classes] training-mode output (float64)
    parity.loss                     [] F.cross_entropy(logits, labels) (float64)
    parity.grad.input               d loss / d input (float64)
    parity.grad.<key>               d loss / d parameter, for every parameter (float64)
    parity.after.<key>              every buffer after the forward: running statistics (float64), counters
    parity.f32.<key>                for each parity.<key> above but input and labels: the float32 run's value
    parity.bf16.<key>               the same for the bfloat16 autocast run (float32; logits were bfloat16)
    metadata: model (a Tandem model spec), batch, size, seed, torch, torchvision, threads

The test runs every parity_*.safetensors of its folder and builds the model from this metadata alone, so a
file written here for any model and options the script knows joins the test without a code change.

Default files (narrow, so that each stays under 2.5 MB with every gradient three times; batch 16 at 32x32 but
ResNet-50's 4): ResNet-18 (torchvision's BasicBlock layout with base width 4 instead of 64), ResNet-50
(Bottleneck, base width 4), MobileNetV2 (width_mult 0.05: 8 to 16 channels per stage, its 1280-wide last
convolution, dropout 0) and VGG-16-BN (the zoo's CIFAR head: global average
pool and hidden layers 8 x width wide, width 4, dropout 0); 10 classes. BatchNorm weights, biases and running
statistics are drawn at random (not torchvision's 1/0/0/1): a stricter check.

A float32 run can validly fall on the other side of a ReLU or max-pool decision whose float64 input lies within
roundoff of the kink; when Tandem's run flips one that PyTorch's did not, the test fails in float32 only (seen
on VGG-16-BN with the 7x7 head at 224x224, batch 2, seed 5): draw such a file again with another --seed.

Usage (Debian: apt-get install python3-torch python3-torchvision, then run it with /usr/bin/python3; uses the
safetensors package when installed, else writes the format itself; no GPU is needed):
    python3 bench/torch/parity.py [--out tests/data]                  # the default files, then commit them
    python3 bench/torch/parity.py --model resnet34:width=4,classes=10 --batch 4 --seed 7 --out /tmp/golden
    TANDEM_PARITY_DIR=/tmp/golden bazel test //tests/models:parity_test
"""
import argparse
import copy
import json
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet
from torchvision.models.vgg import VGG, make_layers

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
# name: (model spec, batch, image size)
DEFAULTS = {
    "resnet18": ("resnet18:width=4,classes=10", 16, 32),
    "resnet50": ("resnet50:width=4,classes=10", 4, 32),
    "mobilenet_v2": ("mobilenet_v2:width_mult=0.05,classes=10,dropout=0", 16, 32),
    "vgg16_bn": ("vgg16_bn:cifar,width=4,classes=10,dropout=0", 16, 32),
}


class NarrowResNet(ResNet):
    """torchvision's ResNet with base width `width` instead of 64 (and, for `cifar`, the zoo's 3x3 stride-1 stem
    without max-pool): the same modules, key names and forward (torchvision's own _make_layer and
    _forward_impl), only narrower."""

    def __init__(self, block, layers, width, num_classes, cifar):
        nn.Module.__init__(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes = width
        self.dilation = 1
        self.groups = 1
        self.base_width = 64
        if cifar:
            self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if cifar else nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


def narrow_vgg16_bn(width, num_classes, cifar, dropout):
    """torchvision's VGG (configuration "D" with BatchNorm) with `width` channels in the first stage instead of
    64, and the zoo's heads: the 7x7 pool with hidden layers 64 x width wide, or for `cifar` a global average
    pool with hidden layers 8 x width wide."""
    cfg = [c if c == "M" else c * width // 64 for c in
           [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]]
    model = VGG(make_layers(cfg, batch_norm=True), num_classes=num_classes, dropout=dropout)
    pooled, hidden = (8 * width, 8 * width) if cifar else (8 * width * 49, 64 * width)
    if cifar:
        model.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    model.classifier = nn.Sequential(
        nn.Linear(pooled, hidden), nn.ReLU(True), nn.Dropout(dropout),
        nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(dropout),
        nn.Linear(hidden, num_classes))
    for m in model.classifier.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    return model


def parse_spec(spec):
    """A Tandem model spec "NAME[:KEY[=VALUE],...]" (models/registry.h), for the keys this script builds."""
    name, _, rest = spec.partition(":")
    opts = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        opts[key] = value if eq else "1"
    unknown = set(opts) - {"cifar", "width", "width_mult", "classes", "dropout"}
    if unknown:
        raise SystemExit("spec %r: this script does not build the key(s) %s" % (spec, ", ".join(sorted(unknown))))
    return name, opts


def build(spec):
    """The torchvision model of `spec` (float32) and its class count."""
    name, o = parse_spec(spec)
    classes = int(o.get("classes", 1000))
    cifar = o.get("cifar", "0") in ("1", "true")
    width = int(o.get("width", 64))
    if name in ("mobilenet_v2", "vgg16_bn") and float(o.get("dropout", -1)) != 0:
        raise SystemExit("spec %r: a parity file needs dropout=0 (the two programs draw different masks)" % spec)
    if name in ("resnet18", "resnet34", "resnet50"):
        block = Bottleneck if name == "resnet50" else BasicBlock
        layers = [2, 2, 2, 2] if name == "resnet18" else [3, 4, 6, 3]
        return NarrowResNet(block, layers, width, classes, cifar), classes
    if name == "mobilenet_v2":
        # The zoo's CIFAR variant: stride-1 stem and first 24-channel stage.
        setting = [[1, 16, 1, 1], [6, 24, 2, 1 if cifar else 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
                   [6, 160, 3, 2], [6, 320, 1, 1]]
        model = torchvision.models.mobilenet_v2(width_mult=float(o.get("width_mult", 1.0)), num_classes=classes,
                                                dropout=0.0, inverted_residual_setting=setting)
        if cifar:
            model.features[0][0].stride = (1, 1)
        return model, classes
    if name == "vgg16_bn":
        return narrow_vgg16_bn(width, classes, cifar, 0.0), classes
    raise SystemExit("spec %r: unknown model %r (known: resnet18, resnet34, resnet50, mobilenet_v2, vgg16_bn)"
                     % (spec, name))


def randomize_bn(model):
    """Random BN affine parameters and running statistics (not torchvision's 1/0/0/1): a stricter check."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.8, 1.2)


class Float32ReLU6(nn.Module):
    """ReLU6 clamped in float32 and cast back: the same values as in bfloat16 (a clamp is exact), for PyTorch
    1.13's CPU, which has no bfloat16 backward of ReLU6 (hardtanh)."""

    def forward(self, x):
        return F.relu6(x.float()).to(x.dtype)


def with_float32_relu6(model):
    for m in list(model.modules()):
        for name, child in m.named_children():
            if isinstance(child, nn.ReLU6):
                setattr(m, name, Float32ReLU6())
    return model


def training_step(model, x32, labels, dtype, bf16_autocast=False):
    """One training-mode forward and backward of a copy of `model` in `dtype`: parity.<key> -> result. With
    `bf16_autocast` (and float32), the forward and loss run under PyTorch's CPU autocast to bfloat16, as a user
    of PyTorch's mixed precision trains: convolutions and matrix products in bfloat16, the weights and their
    gradients float32."""
    model = copy.deepcopy(model).to(dtype).train()
    if bf16_autocast:
        with_float32_relu6(model)
    x = x32.to(dtype, copy=True).requires_grad_(True)  # a copy: each run its own input gradient
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16_autocast):
        logits = model(x)
        loss = F.cross_entropy(logits, labels)
    loss.backward()
    out = {"logits": logits, "loss": loss.reshape(()), "grad.input": x.grad}
    for k, p in model.named_parameters():
        out["grad." + k] = p.grad
    for k, b in model.named_buffers():
        out["after." + k] = b
    return {k: v.detach().float().contiguous() if bf16_autocast else v.detach().contiguous() for k, v in out.items()}


def golden(name, spec, batch, size, seed, out_dir):
    torch.manual_seed(seed)
    model, classes = build(spec)
    randomize_bn(model)
    torch.manual_seed(seed + 1)
    x32 = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, classes, (batch,))
    tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    tensors["parity.input"] = x32.contiguous()
    tensors["parity.labels"] = labels.contiguous()
    ref = training_step(model, x32, labels, torch.float64)
    f32 = training_step(model, x32, labels, torch.float32)
    bf16 = training_step(model, x32, labels, torch.float32, bf16_autocast=True)
    for k, v in ref.items():
        tensors["parity." + k] = v
        tensors["parity.f32." + k] = f32[k]
        tensors["parity.bf16." + k] = bf16[k]
    meta = {"model": spec, "batch": str(batch), "size": str(size), "seed": str(seed), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "threads": str(torch.get_num_threads())}
    path = os.path.join(out_dir, "parity_%s.safetensors" % name)
    save_file(tensors, path, metadata=meta)
    # The test's measure: max |f32 - f64| / max |f64|, but relative to the largest gradient element for a
    # mathematically zero gradient (below 1e-10 of it).
    largest = max(v.abs().max().item() for k, v in ref.items() if k.startswith("grad.") and k != "grad.input")
    worst = worst_bf16 = 0.0
    for k, v in ref.items():
        if v.is_floating_point():
            scale = v.abs().max().item()
            if k.startswith("grad.") and k != "grad.input" and scale < 1e-10 * largest:
                scale = largest
            worst = max(worst, (f32[k].double() - v).abs().max().item() / max(scale, 1e-300))
            rms = (bf16[k].double() - v).pow(2).mean().sqrt().item()
            worst_bf16 = max(worst_bf16, rms / max(scale, 1e-300))
    print("%s: loss %.6f, %d tensors, %d bytes; PyTorch's largest float32 error of one result %.2e, its "
          "largest bfloat16 autocast RMS error of one result %.2e"
          % (path, ref["loss"].item(), len(tensors), os.path.getsize(path), worst, worst_bf16))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data"))
    ap.add_argument("--model", help="a model spec (e.g. resnet34:width=4,classes=10) instead of the default files")
    ap.add_argument("--name", help="the file is parity_NAME.safetensors (default: the spec's model name)")
    ap.add_argument("--batch", type=int, default=4, help="batch size with --model (default 4)")
    ap.add_argument("--size", type=int, default=32, help="image height and width with --model (default 32)")
    ap.add_argument("--seed", type=int, default=SEED, help="weights from SEED, inputs from SEED + 1")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    if args.model:
        golden(args.name or parse_spec(args.model)[0], args.model, args.batch, args.size, args.seed, args.out)
        return
    for name, (spec, batch, size) in DEFAULTS.items():
        golden(name, spec, batch, size, args.seed, args.out)


if __name__ == "__main__":
    main()
