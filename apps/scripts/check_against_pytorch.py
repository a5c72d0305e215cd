#!/usr/bin/env python3
"""apps/scripts/check_against_pytorch.py: tandem's models against torchvision's, output for output.

For each model: build torchvision's version with random weights (and random BatchNorm running
statistics, so eval mode is not a no-op), save its state dict with safetensors, run tandem's
build/apps/forward_check on the same weights and input, and compare the logits, in eval mode and
in train mode (batch statistics). A match means the names, the OIHW->OHWI conversion, padding,
strides, pooling rounding, BatchNorm, the classifier flattening order and the layer order all agree.
Needs torch, torchvision and safetensors (pip); CPU is enough. Not part of ctest, because CI
machines do not have PyTorch: its output is kept in apps/results/.

    python3 apps/scripts/check_against_pytorch.py [--build build] [--models resnet18,resnet50,...]
"""
import argparse, os, subprocess, sys, tempfile

import torch
import torchvision
from safetensors.torch import save_file, load_file

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--build", default=os.environ.get("TANDEM_BUILD_DIR", "build"))
p.add_argument("--models", default="resnet18,resnet50,vgg11_bn,alexnet")
p.add_argument("--batch", type=int, default=2)
a = p.parse_args()
exe = os.path.join(a.build, "apps", "forward_check")
if not os.access(exe, os.X_OK):
    sys.exit(f"check_against_pytorch: {exe} is missing: build tandem first (bash apps/scripts/setup.sh)")

torch.manual_seed(0)
# Smallest input each model accepts quickly on a CPU. AlexNet needs 63+ px to survive its pools.
size = {"alexnet": 127}
worst = 0.0
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
print("| model | mode | input | max |tandem - torch| | max |logit| | relative | verdict |")
print("|---|---|---|---|---|---|---|")
with tempfile.TemporaryDirectory() as tmp:
    for name in a.models.split(","):
        m = getattr(torchvision.models, name)(weights=None)
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.2, 0.2)
        sd = {k: v.contiguous() for k, v in m.state_dict().items()}
        save_file(sd, os.path.join(tmp, "w.safetensors"))
        s = size.get(name, 64)
        x = torch.randn(a.batch, 3, s, s)
        save_file({"input": x}, os.path.join(tmp, "x.safetensors"))
        for mode in ("eval", "train"):
            m.train(mode == "train")
            if mode == "train":  # dropout would make the outputs random: compare the deterministic part
                for mod in m.modules():
                    if isinstance(mod, torch.nn.Dropout):
                        mod.p = 0.0
            with torch.no_grad():
                ref = m(x)
            cmd = [exe, "--model", name, "--weights", os.path.join(tmp, "w.safetensors"), "--input",
                   os.path.join(tmp, "x.safetensors"), "--output", os.path.join(tmp, "y.safetensors"), "--mode", mode]
            if mode == "train" and name.startswith(("vgg", "alexnet")):
                print(f"| {name} | train | - | - | - | - | skipped: tandem's dropout draws its own mask |")
                continue
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            got = load_file(os.path.join(tmp, "y.safetensors"))["logits"]
            diff = (got - ref).abs().max().item()
            scale = ref.abs().max().item()
            rel = diff / max(scale, 1e-12)
            worst = max(worst, rel)
            # f32 sums of a few thousand terms in different orders (im2col GEMM vs oneDNN): ~1e-6
            # relative per layer, compounding over depth.
            verdict = "ok" if rel < 1e-4 else "MISMATCH"
            print(f"| {name} | {mode} | {a.batch}x3x{s}x{s} | {diff:.2e} | {scale:.3g} | {rel:.1e} | {verdict} |")
print(f"\nworst relative difference: {worst:.1e}")
sys.exit(0 if worst < 1e-4 else 1)
