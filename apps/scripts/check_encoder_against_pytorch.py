#!/usr/bin/env python3
"""apps/scripts/check_encoder_against_pytorch.py: tandem's BertForMaskedLM against Hugging Face's.

1. Random weights: builds transformers' BertForMaskedLM at tandem's sizes (bert_tiny, bert_mini, ...)
   with a random init (LayerNorm weights/biases and the MLM bias randomised too, so they are not
   no-ops), saves its state_dict() with safetensors - HF's alias entries cls.predictions.decoder.weight
   and .bias included - runs tandem's build/apps/encoder_forward_check on the same weights and on
   inputs with padding (attention_mask 0 at the ends of some rows) and two token types, and compares
   the MLM logits in eval mode: max |tandem - torch| / max |torch| must be below 1e-4.
2. Trained checkpoint (--checkpoint, default: the newest in runs/encoder_default/): loads tandem's
   training checkpoint into transformers' BertForMaskedLM (optimizer.* entries dropped; only HF's
   alias/buffer names may be missing, nothing unexpected), and compares HF's logits with tandem's on
   the same weights, to the same bound. Skipped with a note when there is no checkpoint.

Needs torch, transformers and safetensors (pip); CPU is enough. Not part of ctest (CI machines have
no PyTorch); its output is kept in apps/results/. Written without torch on the development machine:
run it where torch and transformers are installed.

    python3 apps/scripts/check_encoder_against_pytorch.py [--build build] [--models bert_tiny,bert_mini]
        [--checkpoint runs/encoder_default/checkpoint_stepN.safetensors] | tee apps/results/<dir>/check_encoder_against_pytorch.md
"""
import argparse, glob, os, re, subprocess, sys, tempfile

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file, load_file

# tandem's sizes (layers/models/bert.h): (layers, hidden, heads); intermediate = 4 * hidden.
SIZES = {"bert_tiny": (2, 128, 2), "bert_mini": (4, 256, 4), "bert_small": (4, 512, 8),
         "bert_medium": (8, 512, 8), "bert_base": (12, 768, 12), "bert_large": (24, 1024, 16)}
# f32 sums in different orders (OpenBLAS vs MKL/oneDNN GEMMs, fused vs separate attention
# softmax): ~1e-6 relative per layer; 1e-4 leaves room for depth and still catches any real
# mismatch (a wrong mask, scale, LayerNorm eps or GELU form moves logits by 1e-2 or more).
TOL = 1e-4

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--build", default=os.environ.get("TANDEM_BUILD_DIR", "build"))
p.add_argument("--models", default="bert_tiny,bert_mini")
p.add_argument("--vocab", type=int, default=1000, help="vocabulary of the random-weight models")
p.add_argument("--batch", type=int, default=3)
p.add_argument("--seq", type=int, default=24)
p.add_argument("--checkpoint", default="", help="train_encoder checkpoint (default: newest in runs/encoder_default)")
a = p.parse_args()
exe = os.path.join(a.build, "apps", "encoder_forward_check")
if not os.access(exe, os.X_OK):
    sys.exit(f"check_encoder_against_pytorch: {exe} is missing: build tandem first (bash apps/scripts/setup.sh)")


def hf_model(name, vocab):
    layers, hidden, heads = SIZES[name]
    cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=4 * hidden,
                                  max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12,
                                  hidden_act="gelu", attn_implementation="eager")
    return transformers.BertForMaskedLM(cfg).eval()


def inputs(vocab, gen):
    ids = torch.randint(5, vocab, (a.batch, a.seq), generator=gen)
    mask = torch.ones(a.batch, a.seq, dtype=torch.long)
    for r in range(1, a.batch):  # row r ends with 3r padding positions
        mask[r, a.seq - 3 * r:] = 0
        ids[r, a.seq - 3 * r:] = 0  # [PAD]
    types = torch.zeros(a.batch, a.seq, dtype=torch.long)
    types[:, a.seq // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def compare(tag, name, weights_path, m, x, tmp):
    save_file(x, os.path.join(tmp, "x.safetensors"))
    with torch.no_grad():
        ref = m(**x).logits
    subprocess.run([exe, "--model", name, "--weights", weights_path, "--input", os.path.join(tmp, "x.safetensors"),
                    "--output", os.path.join(tmp, "y.safetensors")], check=True, stdout=subprocess.DEVNULL)
    got = load_file(os.path.join(tmp, "y.safetensors"))["logits"]
    assert got.shape == ref.shape, f"{tag}: tandem logits {tuple(got.shape)} vs torch {tuple(ref.shape)}"
    keep = x["attention_mask"].bool()  # the positions a loss would read (padded rows are computed but unused)
    diff = (got - ref).abs()
    scale = ref.abs().max().item()
    rel_all = diff.max().item() / max(scale, 1e-12)
    rel_tok = diff[keep].max().item() / max(scale, 1e-12)
    ok = rel_all < TOL
    print(f"| {tag} | {name} | {tuple(ref.shape)} | {diff.max().item():.2e} | {scale:.3g} | {rel_tok:.1e} | "
          f"{rel_all:.1e} | {'ok' if ok else 'MISMATCH'} |")
    return rel_all


print(f"torch {torch.__version__}, transformers {transformers.__version__}")
print("| what | model | logits | max abs diff | max abs logit | relative (tokens) | relative (all) | verdict |")
print("|---|---|---|---|---|---|---|---|")
worst = 0.0
gen = torch.Generator().manual_seed(0)
torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    # 1. random weights, HF's full state dict (aliases included)
    for name in a.models.split(","):
        m = hf_model(name, a.vocab)
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, torch.nn.LayerNorm):
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.uniform_(-0.2, 0.2)
            m.cls.predictions.bias.uniform_(-0.5, 0.5)
        # clone(): safetensors refuses tensors that share memory (the tied decoder); the copies keep
        # the alias names, which tandem must accept and check.
        sd = {k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}
        wpath = os.path.join(tmp, f"{name}.safetensors")
        save_file(sd, wpath)
        worst = max(worst, compare("random init", name, wpath, m, inputs(a.vocab, gen), tmp))

    # 2. tandem's trained checkpoint, loaded into transformers
    ck = a.checkpoint
    if not ck:
        found = sorted(glob.glob("runs/encoder_default/checkpoint_step*.safetensors"),
                       key=lambda f: int(re.search(r"step(\d+)", f).group(1)))
        ck = found[-1] if found else ""
    if not ck:
        print("\n(no train_encoder checkpoint found: run apps/scripts/train_encoder_default.sh for part 2)")
    else:
        with safe_open(ck, "pt") as f:
            meta = f.metadata() or {}
        name = meta.get("model", "bert_mini")
        sd = {k: v for k, v in load_file(ck).items() if not k.startswith("optimizer.")}
        vocab = sd["bert.embeddings.word_embeddings.weight"].shape[0]
        m = hf_model(name, vocab)
        missing, unexpected = m.load_state_dict(sd, strict=False)
        allowed = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "bert.embeddings.position_ids"}
        assert not unexpected, f"tandem's checkpoint has names HF does not know: {unexpected}"
        assert set(missing) <= allowed, f"HF expected names tandem's checkpoint lacks: {set(missing) - allowed}"
        m.tie_weights()  # the decoder aliases point at the loaded word embeddings and bias
        assert torch.equal(m.cls.predictions.decoder.weight, sd["bert.embeddings.word_embeddings.weight"])
        m.eval()
        print(f"\ncheckpoint {ck} ({name}, step {meta.get('step', '?')}, vocab {vocab}) loaded into "
              f"transformers.BertForMaskedLM: {len(sd)} tensors, missing only {sorted(missing)}")
        worst = max(worst, compare("trained checkpoint", name, ck, m, inputs(vocab, gen), tmp))
print(f"\nworst relative difference: {worst:.1e} (bound {TOL:.0e})")
sys.exit(0 if worst < TOL else 1)
