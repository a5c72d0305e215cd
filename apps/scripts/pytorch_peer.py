#!/usr/bin/env python3
"""apps/scripts/pytorch_peer.py: the PyTorch run that tandem's train_imagenet --synthetic is compared with.

Same GPU, same run (apps/scripts/gpu_session.sh calls both back to back), same work per step:
  - model: torchvision's resnet18/resnet50/vgg16/alexnet (weights=None, 1000 classes), or a built-in copy of
    the same architecture when torchvision is missing (the GPU node ships PyTorch, not necessarily
    torchvision); resnet_tiny is tandem's small ResNet (layers/models/resnet.h) for CPU smoke runs.
    The parameter count is printed and written so a mismatch with tandem's metrics shows;
  - data: one synthetic batch made once and kept on the device (tandem's LoaderOptions::resident),
    so no input pipeline is measured;
  - layout: channels_last (NHWC), tandem's only activation layout;
  - precision "tf32" (default): f32 storage, TF32 tensor cores for matmul AND convolution. That is
    tandem's default: BackendConfig::allow_tf32 is on (core/backend.h) and governs cuBLASLt
    (CUBLAS_COMPUTE_32F_FAST_TF32, core/ops/matmul/cuda.cpp) and cuDNN engine choice
    (core/ops/conv/cuda.cpp). PyTorch's own default differs (matmul TF32 off), hence the explicit
    switches. "f32" turns TF32 off on both sides' equivalent switches (tandem: allow_tf32 = false);
  - cuDNN algorithms: heuristics by default (cudnn.benchmark=False), as tandem picks the first engine
    of cuDNN's heuristics without timing; --cudnn-benchmark shows what autotuning would add;
  - optimizer: SGD momentum 0.9, weight decay 1e-4 (PyTorch's default foreach implementation), loss
    cross-entropy; the learning rate is a constant --lr (default 0.1; give VGG and AlexNet 0.01, as
    gpu_session.sh does for both sides: torchvision's recipe - 0.1 diverges; tandem's schedule
    changes the value, not the work);
  - --amp bf16: torch.autocast(cuda, bfloat16) around forward and loss, f32 weights and SGD, the
    model and input channels_last (tandem's --amp bf16: 16-bit convs and GEMMs, f32 BatchNorm and
    masters); default off (f32 with TF32 as above);
  - timing: the first --warmup steps are left out (tandem: --bench-warmup, default min(10, steps/4)).
    images_per_s is tandem's definition (steady steps x batch / wall time of those steps, synchronised
    at both ends); ms_per_step_median comes from a CUDA-event pair around every step (host clock on
    the CPU), and images_per_s_median = batch / that median.
  - --compile: torch.compile in its default mode (Inductor: Triton kernels for the fused pointwise
    and normalisation work, cuBLAS/cuDNN for GEMMs and convs), of the model (images) or the
    forward-and-loss function (encoder); backward through AOTAutograd, the optimizer eager (its
    fused/foreach kernels). The first call compiles: keep --warmup >= 1 for timings.
Leaves out: DDP (one process, one device).

--encoder NAME runs the encoder peer instead (tandem's train_encoder --synthetic, issue 10):
  - model: bert_torch.py's BertForMaskedLM, plain torch.nn (the GPU node has no transformers): HF's
    names and parameter counts, tandem's sizes, vocab --vocab 30522, dropout 0.1, attention through
    torch.nn.functional.scaled_dot_product_attention with the padding mask (PyTorch's SDPA: with a
    mask, its memory-efficient or cuDNN kernel on an H100; --no-attn-mask lets it pick flash).
    --encoder-impl hf runs transformers' BertForMaskedLM (sdpa) instead, where it is installed;
  - precision: --amp bf16 (the encoder's default) = torch.autocast(bfloat16) over f32 master
    weights, as tandem's --amp bf16;
  - data: tandem's synthetic batch, made once and kept on the device (bert_torch.synthetic_batch):
    --seq 128 tokens, [CLS] ... [SEP], no padding, exactly round(0.15 x 126) = 19 predicted positions
    per sequence (80/10/10 [MASK]/random/kept); the loss runs the head on those rows only (tandem's
    mlm_loss; the hf path runs HF's full-vocabulary head on every token);
  - optimizer: AdamW (fused=True on CUDA), weight decay 0.01 except biases and LayerNorm, gradient
    norm clipped at 1.0 (tandem's defaults; a constant lr 1e-4: the schedule changes values, not work).
Reports tokens_per_s and sequences_per_s (steady window, batch x seq per step, tandem's definition)
alongside the image run's timing fields (images_per_s there is sequences per second), and
flops_per_token by tandem's count (apps/encoder/flops.h: 6 x parameters + 12 x layers x hidden x
seq), so session_summary.py divides both sides' tokens/s by the same number.
--check-cpu is a seconds-long smoke test on the CPU (tiny model, tiny images, then bert_tiny) that
also checks its own output; the GPU session's --cpu-smoke mode uses --device cpu the same way.
"""
import argparse
import inspect
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn

from bert_torch import BERT_SIZES, BertForMaskedLM, synthetic_batch  # the script's own folder is on sys.path


# clip_grad_norm_'s foreach= (one multi-tensor kernel) exists from PyTorch 2.0; 1.13 (Debian's, the CPU peer)
# clips tensor by tensor, which gives the same result.
CLIP_FOREACH = {"foreach": True} if "foreach" in inspect.signature(torch.nn.utils.clip_grad_norm_).parameters else {}


# ---- the built-in architectures (torchvision's, used when torchvision is absent) ----
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inp, planes, stride, down):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = down

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4  # ResNet v1.5: the stride sits on the 3x3 conv, as in torchvision and tandem

    def __init__(self, inp, planes, stride, down):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = down

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, block, layers, widths=(64, 128, 256, 512), stem=64, num_classes=1000):
        super().__init__()
        self.inp = stem
        self.conv1 = nn.Conv2d(3, stem, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = [self._layer(block, w, n, 1 if i == 0 else 2) for i, (w, n) in enumerate(zip(widths, layers))]
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(self.inp, num_classes)

    def _layer(self, block, planes, blocks, stride):
        down = None
        if stride != 1 or self.inp != planes * block.expansion:
            down = nn.Sequential(nn.Conv2d(self.inp, planes * block.expansion, 1, stride, bias=False),
                                 nn.BatchNorm2d(planes * block.expansion))
        mods = [block(self.inp, planes, stride, down)]
        self.inp = planes * block.expansion
        mods += [block(self.inp, planes, 1, None) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def vgg16(num_classes):
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    feats, c = [], 3
    for v in cfg:
        if v == "M":
            feats.append(nn.MaxPool2d(2, 2))
        else:
            feats += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
            c = v
    return nn.Sequential(nn.Sequential(*feats), nn.AdaptiveAvgPool2d(7), nn.Flatten(),
                         nn.Linear(512 * 49, 4096), nn.ReLU(True), nn.Dropout(0.5),
                         nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(4096, num_classes))


def alexnet(num_classes):
    """torchvision's AlexNet (61,100,840 parameters with 1000 classes, tandem's count)."""
    feats = nn.Sequential(nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(True), nn.MaxPool2d(3, 2),
                          nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(True), nn.MaxPool2d(3, 2),
                          nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(True), nn.Conv2d(384, 256, 3, padding=1),
                          nn.ReLU(True), nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(True), nn.MaxPool2d(3, 2))
    return nn.Sequential(feats, nn.AdaptiveAvgPool2d(6), nn.Flatten(), nn.Dropout(0.5), nn.Linear(256 * 36, 4096),
                         nn.ReLU(True), nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(True),
                         nn.Linear(4096, num_classes))


BUILTIN = {
    "resnet18": lambda nc: ResNet(BasicBlock, [2, 2, 2, 2], num_classes=nc),
    "resnet50": lambda nc: ResNet(Bottleneck, [3, 4, 6, 3], num_classes=nc),
    "vgg16": vgg16,
    "alexnet": alexnet,
    # tandem's resnet_tiny: BasicBlocks [1,1,1,1], widths 16..128, stem 16 (layers/models/resnet.h)
    "resnet_tiny": lambda nc: ResNet(BasicBlock, [1, 1, 1, 1], (16, 32, 64, 128), 16, nc),
}


def make_model(name, num_classes):
    if name != "resnet_tiny":
        try:
            import torchvision
            if hasattr(torchvision.models, name):
                return getattr(torchvision.models, name)(weights=None, num_classes=num_classes), "torchvision"
        except ImportError:
            pass
    if name not in BUILTIN:
        sys.exit(f"pytorch_peer: unknown model '{name}': give a torchvision model name (built in, for when torchvision is missing: {', '.join(sorted(BUILTIN))})")
    return BUILTIN[name](num_classes), "builtin"


def make_hf_encoder(a):
    try:
        from transformers import BertConfig, BertForMaskedLM
    except ImportError:
        sys.exit("pytorch_peer --encoder-impl hf: needs the transformers package (the default, --encoder-impl torch, does not)")
    layers, hidden, heads = BERT_SIZES[a.encoder]
    cfg = BertConfig(vocab_size=a.vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=4 * hidden, max_position_embeddings=512, type_vocab_size=2,
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12)
    try:
        return BertForMaskedLM._from_config(cfg, attn_implementation="sdpa")
    except TypeError:  # transformers older than 4.36: SDPA is not selectable, report the eager path
        return BertForMaskedLM(cfg)


def encoder_setup(a, dev):
    """The model, its optimizer and one training step (see the header)."""
    ids, mask, labels, idx = (t.to(dev) for t in synthetic_batch(a.batch, a.seq, a.vocab))
    if a.encoder_impl == "hf":
        model = make_hf_encoder(a).to(dev).train()
        source = "transformers:" + getattr(model.config, "_attn_implementation", "eager")
        loss_fn = lambda: model(input_ids=ids, attention_mask=mask, labels=labels).loss
    else:
        model = BertForMaskedLM(a.encoder, a.vocab).to(dev).train()
        sdpa_name = "sdpa" if hasattr(torch.nn.functional, "scaled_dot_product_attention") else "math attention"
        source = "torch.nn:" + sdpa_name + ("" if a.attn_mask else ", no mask")
        keep = mask if a.attn_mask else None
        loss_fn = lambda: model.mlm_loss(ids, keep, labels, idx)
    if a.compile:  # forward and loss as one compiled function; backward through AOTAutograd
        loss_fn = torch.compile(loss_fn)
    # BERT's groups: no weight decay on biases and LayerNorm (tandem's --wd 0.01 likewise).
    named = list(model.named_parameters())
    no_wd = [p for n, p in named if n.endswith("bias") or "LayerNorm" in n]
    wd = [p for n, p in named if not (n.endswith("bias") or "LayerNorm" in n)]
    # fused=: PyTorch 2.0+, CUDA only (Debian's 1.13 on the CPU has no such argument).
    fused = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": wd, "weight_decay": 0.01}, {"params": no_wd, "weight_decay": 0.0}],
                            lr=1e-4, **fused)
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.amp == "bf16")
    source += ", torch.compile" if a.compile else ""

    def step():
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, **CLIP_FOREACH)  # tandem's --clip 1.0; no host sync
        opt.step()
        return loss
    return model, source, step


def encoder_flops_per_token(name, parameters, seq):
    """Model FLOPs per token of a training step, tandem's count (apps/encoder/flops.h): 6 N + 12 L H S."""
    layers, hidden, _ = BERT_SIZES[name]
    return 6.0 * parameters + 12.0 * layers * hidden * seq


def run(a):
    dev = torch.device(a.device)
    torch.manual_seed(0)
    # TF32 switches (see the header): both on for "tf32", both off for "f32".
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    cuda = dev.type == "cuda"
    if a.encoder:
        model, source, step = encoder_setup(a, dev)
        # parameters() lists the tied decoder weight once: tandem's --describe count
        params = sum(p.numel() for p in model.parameters())
    else:
        model, source = make_model(a.model, a.num_classes)
        fmt = torch.channels_last if a.channels_last else torch.contiguous_format
        model = model.to(dev, memory_format=fmt).train()
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
        loss_fn = nn.CrossEntropyLoss()
        x = torch.randn(a.batch, 3, a.image_size, a.image_size, device=dev).contiguous(memory_format=fmt)
        y = torch.randint(0, a.num_classes, (a.batch,), device=dev)
        run_model = torch.compile(model) if a.compile else model  # the same parameters either way
        source += ", torch.compile" if a.compile else ""
        amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.amp == "bf16")

        def step():
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = loss_fn(run_model(x), y)
            loss.backward()
            opt.step()
            return loss
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)

    warm = a.warmup if a.warmup >= 0 else min(10, a.steps // 4)  # tandem's --bench-warmup default
    t_init = time.perf_counter()
    for _ in range(warm):
        step()
    sync()
    warm_s = time.perf_counter() - t_init
    timed = a.steps - warm
    if timed < 1:
        sys.exit(f"pytorch_peer: --steps {a.steps} leaves no timed step after {warm} warm-up steps: raise --steps")
    ms, events = [], []
    t0 = time.perf_counter()
    for _ in range(timed):
        if cuda:  # an event pair per step: no host sync inside the timed window
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            loss = step()
            e1.record()
            events.append((e0, e1))
        else:
            s0 = time.perf_counter()
            loss = step()
            ms.append((time.perf_counter() - s0) * 1e3)
    sync()
    wall = time.perf_counter() - t0
    if cuda:
        ms = [e0.elapsed_time(e1) for e0, e1 in events]
    med = statistics.median(ms)
    final_loss = float(loss.detach())
    r = {
        "app": "pytorch_peer", "model": a.model, "model_source": source, "parameters": params,
        "batch": a.batch, "image_size": a.image_size, "precision": a.precision,
        "channels_last": a.channels_last, "cudnn_benchmark": a.cudnn_benchmark,
        # read back, not assumed: what PyTorch actually ran with
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "steps": a.steps, "warmup_steps": warm, "warmup_s": warm_s,
        "images_per_s": timed * a.batch / wall,
        "images_per_s_median": a.batch / (med / 1e3),
        "ms_per_step_median": med, "ms_per_step_min": min(ms), "ms_per_step_max": max(ms),
        "peak_mem_bytes": torch.cuda.max_memory_allocated(dev) if cuda else None,
        "final_loss": final_loss,
        "encoder": a.encoder, "seq": a.seq if a.encoder else None, "amp": a.amp, "compile": a.compile,
        "lr": None if a.encoder else a.lr,
        # tandem's count (apps/encoder/flops.h), for the summary's MFU of this side
        "flops_per_token": encoder_flops_per_token(a.encoder, params, a.seq) if a.encoder else None,
        "tokens_per_s": timed * a.batch * a.seq / wall if a.encoder else None,
        "sequences_per_s": timed * a.batch / wall if a.encoder else None,
        "encoder_impl": a.encoder_impl if a.encoder else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpu": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "device": str(dev),
    }
    peak = f"{r['peak_mem_bytes'] / 2**20:.0f} MiB" if cuda else "n/a"
    if a.encoder:
        r["model"] = a.encoder
        print(f"pytorch_peer: {a.encoder} ({source}, {params / 1e6:.2f} M params) batch {a.batch} seq {a.seq} "
              f"amp {a.amp} on {r['gpu']}: {r['tokens_per_s']:.0f} tokens/s, {r['sequences_per_s']:.1f} seq/s (window), median {med:.2f} ms/step, "
              f"peak {peak}, loss {final_loss:.4f}")
    else:
        print(f"pytorch_peer: {a.model} ({source}, {params / 1e6:.2f} M params) batch {a.batch} {a.precision} amp {a.amp} "
              f"on {r['gpu']}: {r['images_per_s']:.1f} img/s (window), median {med:.2f} ms/step "
              f"({r['images_per_s_median']:.1f} img/s), peak {peak}, loss {final_loss:.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="resnet50",
                   help=f"a torchvision model name; without torchvision one of {', '.join(sorted(BUILTIN))}")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--steps", type=int, default=60, help="steps in total, warm-up included")
    p.add_argument("--warmup", type=int, default=-1, help="untimed steps first (-1: min(10, steps/4), as tandem)")
    p.add_argument("--precision", default="tf32", choices=["tf32", "f32"])
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    p.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN time algorithms (tandem does not)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--check-cpu", action="store_true", help="seconds-long CPU smoke test of this script")
    p.add_argument("--encoder", choices=sorted(BERT_SIZES), help="run the BERT masked-LM peer (e.g. bert_large)")
    p.add_argument("--seq", type=int, default=128, help="encoder sequence length")
    p.add_argument("--vocab", type=int, default=30522, help="encoder vocabulary size")
    p.add_argument("--amp", choices=["bf16", "off"],
                   help="autocast dtype (default: bf16 for --encoder, off for the image models)")
    p.add_argument("--compile", action="store_true", help="torch.compile (default mode) of the model / loss")
    p.add_argument("--lr", type=float, default=0.1, help="image models' SGD learning rate (VGG, AlexNet: 0.01)")
    p.add_argument("--encoder-impl", default="torch", choices=["torch", "hf"],
                   help="torch: bert_torch.py (plain PyTorch); hf: transformers' BertForMaskedLM")
    p.add_argument("--no-attn-mask", dest="attn_mask", action="store_false",
                   help="encoder: no padding mask to SDPA (there is no padding; lets it use flash attention)")
    a = p.parse_args()
    if a.check_cpu:
        a.device, a.model, a.batch, a.image_size, a.num_classes, a.steps, a.warmup = "cpu", "resnet_tiny", 4, 32, 10, 4, 1
        a.encoder, a.amp = None, None  # the image path first (f32, then bf16), then bert_tiny below
    if a.amp is None:
        a.amp = "bf16" if a.encoder else "off"
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("pytorch_peer: no CUDA device visible to PyTorch: run on the GPU node or pass --device cpu")
    r = run(a)
    if a.check_cpu:
        # A self-check: the numbers must be real, and resnet_tiny must have tandem's parameter count
        # (310746 with 10 classes: `train_imagenet --synthetic --model resnet_tiny --num-classes 10 --describe`).
        ok = math.isfinite(r["final_loss"]) and r["images_per_s"] > 0 and r["ms_per_step_median"] > 0
        ok = ok and r["parameters"] == 310746
        # The image path under bf16 autocast (--amp bf16), the same model and parameter count.
        a.amp = "bf16"
        r = run(a)
        ok = ok and math.isfinite(r["final_loss"]) and r["parameters"] == 310746 and r["amp"] == "bf16"
        # Then the encoder: bert_tiny, 4 sequences of 32 tokens. 4,416,698 parameters = tandem's
        # `train_encoder --synthetic --model bert_tiny --describe` (vocab 30522).
        a.encoder, a.batch, a.seq, a.encoder_impl = "bert_tiny", 4, 32, "torch"
        r = run(a)
        ok = ok and math.isfinite(r["final_loss"]) and r["tokens_per_s"] > 0 and r["parameters"] == 4416698
        ok = ok and r["flops_per_token"] == 6.0 * 4416698 + 12.0 * 2 * 128 * 32  # bert_tiny: L 2, H 128, seq 32
        print("pytorch_peer --check-cpu:", "ok" if ok else "FAILED")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
