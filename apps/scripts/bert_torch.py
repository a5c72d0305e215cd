#!/usr/bin/env python3
"""apps/scripts/bert_torch.py: BERT for masked-LM in plain torch.nn, the encoder peer of pytorch_peer.py.

Why not transformers' BertForMaskedLM: the GPU node has python3 + PyTorch (+ torchvision) and no
package registry, so the peer must need nothing else. This is the same network as tandem's
layers/models/bert.h (and HF's), module for module:
  - embeddings: word + position + token-type, LayerNorm (eps 1e-12), dropout 0.1;
  - per layer (post-LN): q/k/v Linear, torch.nn.functional.scaled_dot_product_attention (the padding
    mask on keys, as tandem's core/ops/attention/attention.h; dropout 0.1 on the probabilities), output dense +
    dropout + residual + LayerNorm; intermediate dense + GELU (erf) + output dense + dropout +
    residual + LayerNorm;
  - MLM head: transform dense + GELU + LayerNorm, decoder = the word embeddings (tied) + a bias.
Parameter names are exactly HF's named_parameters() (bert.embeddings.*, bert.encoder.layer.<i>.*,
cls.predictions.*), so HF state dicts, and the bert.*/cls.* tensors of tandem's checkpoints (checked
with a bert_tiny checkpoint_step2.safetensors: all 42, exact), load with load_hf_state_dict(). The
tied decoder weight is counted once: 109,514,298 for bert_base, 335,174,458 for bert_large (vocab
30522), tandem's `train_encoder --describe` figures.
Work per step follows tandem rather than HF where they differ (both are standard practice):
  - q/k/v: one [3H, H] GEMM on the three weights concatenated per forward, as tandem's
    layers/transformer.h does (HF runs three GEMMs); the parameters stay three Linears;
  - mlm_loss sends only the predicted positions (labels != -100) through the head, as tandem's
    BertForMaskedLM::mlm_loss does (HF runs the [tokens, vocab] decoder on every token). The indices
    come in precomputed (synthetic_batch), so no device-to-host sync happens inside a step.
Init is HF's _init_weights (N(0, 0.02) weights, zero biases, LayerNorm 1/0, padding row 0).

`python3 bert_torch.py --check-against-hf` loads this model's state dict into transformers'
BertForMaskedLM (when installed) and compares eval-mode logits (tolerance 1e-5), plus the parameter
counts of the named sizes; see check_against_hf().
"""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

BERT_SIZES = {  # name: (layers, hidden, heads), tandem's layers/models/bert.h
    "bert_tiny": (2, 128, 2), "bert_mini": (4, 256, 4), "bert_small": (4, 512, 8),
    "bert_medium": (8, 512, 8), "bert_base": (12, 768, 12), "bert_large": (24, 1024, 16),
}
# tandem's `train_encoder --synthetic --model NAME --describe` (vocab 30522), checked by --check-against-hf.
TANDEM_PARAMETERS = {"bert_base": 109514298, "bert_large": 335174458}
EPS = 1e-12  # BERT's LayerNorm eps (HF's BertConfig default, tandem's BertConfig)
DROPOUT = 0.1  # hidden and attention-probability dropout (BERT)
# tandem's synthetic vocabulary layout (apps/encoder/setup.cpp): [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4.
PAD, CLS, SEP, MASK, FIRST_WORD = 0, 2, 3, 4, 5


class Embeddings(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(512, hidden)  # BERT's 512 positions
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=EPS)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, ids, token_type):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(token_type)
        return self.dropout(self.LayerNorm(x))


class DenseLN(nn.Module):
    """HF's BertSelfOutput / BertOutput: LayerNorm(residual + dropout(dense(x)))."""

    def __init__(self, inp, hidden):
        super().__init__()
        self.dense = nn.Linear(inp, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=EPS)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x, residual):
        return self.LayerNorm(residual + self.dropout(self.dense(x)))


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x, keep):
        b, s, h = x.shape
        # One GEMM for q, k and v (tandem's fused QKV; see the header).
        w = torch.cat([self.query.weight, self.key.weight, self.value.weight])
        bias = torch.cat([self.query.bias, self.key.bias, self.value.bias])
        q, k, v = F.linear(x, w, bias).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        # keep: [B, 1, 1, S] bool (True = a real key) or None; dropout only while training.
        o = sdpa(q, k, v, keep, DROPOUT if self.training else 0.0)
        return o.transpose(1, 2).reshape(b, s, h)


def sdpa(q, k, v, keep, dropout_p):
    """PyTorch's fused SDPA where it exists (2.0+); on 1.13 (Debian's python3-torch, the CPU peer) the
    same math written out: softmax(q k^T / sqrt(d), masked) with dropout, times v."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    return F.dropout(scores.softmax(-1), dropout_p) @ v


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        setattr(self, "self", SelfAttention(hidden, heads))  # HF's name: attention.self.*
        self.output = DenseLN(hidden, hidden)

    def forward(self, x, keep):
        return self.output(getattr(self, "self")(x, keep), x)


class Intermediate(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, 4 * hidden)  # intermediate = 4 * hidden in every BERT size

    def forward(self, x):
        return F.gelu(self.dense(x))  # erf GELU, BERT's "gelu"


class Layer(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.attention = Attention(hidden, heads)
        self.intermediate = Intermediate(hidden)
        self.output = DenseLN(4 * hidden, hidden)

    def forward(self, x, keep):
        a = self.attention(x, keep)
        return self.output(self.intermediate(a), a)


class Encoder(nn.Module):
    def __init__(self, layers, hidden, heads):
        super().__init__()
        self.layer = nn.ModuleList(Layer(hidden, heads) for _ in range(layers))

    def forward(self, x, keep):
        for m in self.layer:
            x = m(x, keep)
        return x


class Bert(nn.Module):
    def __init__(self, vocab, layers, hidden, heads):
        super().__init__()
        self.embeddings = Embeddings(vocab, hidden)
        self.encoder = Encoder(layers, hidden, heads)


class Transform(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=EPS)

    def forward(self, x):
        return self.LayerNorm(F.gelu(self.dense(x)))


class Predictions(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.transform = Transform(hidden)
        self.bias = nn.Parameter(torch.zeros(vocab))


class Cls(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.predictions = Predictions(vocab, hidden)


class BertForMaskedLM(nn.Module):
    def __init__(self, name, vocab=30522):
        super().__init__()
        if name not in BERT_SIZES:
            sys.exit(f"bert_torch: unknown size '{name}': one of {', '.join(BERT_SIZES)}")
        layers, hidden, heads = BERT_SIZES[name]
        self.bert = Bert(vocab, layers, hidden, heads)
        self.cls = Cls(vocab, hidden)
        self.apply(self._init)

    @staticmethod
    def _init(m):  # HF's BertPreTrainedModel._init_weights (initializer_range 0.02)
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.Embedding) and m.num_embeddings > 512:  # the word embeddings: [PAD]'s row is 0
            with torch.no_grad():
                m.weight[PAD].zero_()
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def hidden_states(self, ids, attention_mask=None, token_type=None):
        token_type = torch.zeros_like(ids) if token_type is None else token_type
        # SDPA's boolean mask: True = attend. Broadcast over heads and query rows (keys only, as tandem).
        keep = None if attention_mask is None else (attention_mask != 0)[:, None, None, :]
        return self.bert.encoder(self.bert.embeddings(ids, token_type), keep)

    def head(self, h):
        p = self.cls.predictions
        return F.linear(p.transform(h), self.bert.embeddings.word_embeddings.weight, p.bias)  # tied decoder

    def forward(self, ids, attention_mask=None, token_type=None):
        """Logits [B, S, vocab] (every position, as HF's BertForMaskedLM)."""
        return self.head(self.hidden_states(ids, attention_mask, token_type))

    def mlm_loss(self, ids, attention_mask, labels, predict_idx):
        """Mean cross-entropy over the predicted positions; predict_idx = flat indices where labels != -100."""
        h = self.hidden_states(ids, attention_mask)
        h = h.reshape(-1, h.shape[-1]).index_select(0, predict_idx)
        return F.cross_entropy(self.head(h).float(), labels.reshape(-1).index_select(0, predict_idx))


def load_hf_state_dict(model, sd):
    """Loads HF-named tensors (transformers' state_dict, or a tandem checkpoint's). The decoder keys
    are the tied word embeddings and predictions.bias again; position_ids is HF's buffer."""
    skip = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "bert.embeddings.position_ids")
    model.load_state_dict({k: v for k, v in sd.items() if k not in skip}, strict=True)


def synthetic_batch(batch, seq, vocab, mask_prob=0.15, seed=0):
    """tandem's train_encoder --synthetic batch (apps/encoder/setup.cpp, data/text_dataset.h): every
    sequence is [CLS] + seq-2 uniform ids from [5, vocab) + [SEP] (packed, so no padding: the mask is
    all ones but is still passed, as tandem does); exactly max(1, round(mask_prob * (seq-2))) of the
    non-special positions are predicted, each replaced by [MASK] with p 0.8, a random word with p 0.1,
    kept with p 0.1. Returns ids, attention_mask, labels (-100 where not predicted), predict_idx."""
    g = torch.Generator().manual_seed(seed)
    n = seq - 2
    words = torch.randint(FIRST_WORD, vocab, (batch, n), generator=g)
    ids = torch.cat([torch.full((batch, 1), CLS), words, torch.full((batch, 1), SEP)], 1)
    k = min(n, max(1, math.floor(mask_prob * n + 0.5)))  # std::llround (halves away from 0), not Python's round
    chosen = torch.rand(batch, n, generator=g).argsort(1)[:, :k] + 1  # k distinct positions per row, past [CLS]
    labels = torch.full_like(ids, -100)
    labels.scatter_(1, chosen, ids.gather(1, chosen))
    u = torch.rand(batch, k, generator=g)
    replaced = torch.where(u < 0.8, torch.full_like(chosen, MASK),
                           torch.where(u < 0.9, torch.randint(FIRST_WORD, vocab, (batch, k), generator=g), ids.gather(1, chosen)))
    ids = ids.scatter(1, chosen, replaced)
    mask = torch.ones(batch, seq, dtype=torch.long)
    predict_idx = (labels.reshape(-1) != -100).nonzero().squeeze(1)
    return ids, mask, labels, predict_idx


def check_against_hf(names=("bert_tiny", "bert_mini"), tol=1e-5):
    """Our logits vs transformers' BertForMaskedLM with the same weights (eval mode, f32, CPU), with
    a padded batch so the mask path counts; then the parameter counts of bert_base and bert_large.
    1e-5: both run the same f32 ops in a different association (fused vs separate q/k/v GEMMs,
    SDPA vs HF's attention), so they differ by rounding only. Returns True when everything agrees."""
    ok = True
    for name, want in TANDEM_PARAMETERS.items():
        got = sum(p.numel() for p in BertForMaskedLM(name).parameters())
        print(f"{name}: {got:,} parameters (tandem --describe: {want:,}) {'ok' if got == want else 'MISMATCH'}")
        ok &= got == want
    try:
        from transformers import BertConfig
        from transformers import BertForMaskedLM as HfBert
    except ImportError:
        print("transformers is not installed: logits not compared")
        return ok
    torch.manual_seed(0)
    for name in names:
        layers, hidden, heads = BERT_SIZES[name]
        ours = BertForMaskedLM(name).eval()
        cfg = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=4 * hidden, layer_norm_eps=EPS)
        for impl in ("eager", "sdpa"):
            cfg._attn_implementation = impl
            hf = HfBert(cfg).eval()
            missing, unexpected = hf.load_state_dict(ours.state_dict(), strict=False)
            # Only the tied decoder (and HF's buffers) may be absent from our state dict.
            bad = [k for k in missing if not k.startswith("cls.predictions.decoder") and "position_ids" not in k]
            if bad or unexpected:
                print(f"{name}: state dict names differ: missing {bad}, unexpected {list(unexpected)}")
                ok = False
                continue
            ids, mask, _, _ = synthetic_batch(3, 24, 30522, seed=1)
            mask[1, 18:] = 0  # a padded row: keys past 18 are masked out
            mask[2, 9:] = 0
            tt = torch.zeros_like(ids)
            tt[:, 12:] = 1  # a second segment: token_type_embeddings row 1 is used too
            with torch.no_grad():
                a = ours(ids, mask, tt)
                b = hf(input_ids=ids, attention_mask=mask, token_type_ids=tt).logits
                back = BertForMaskedLM(name).eval()
                load_hf_state_dict(back, hf.state_dict())  # and HF's names load back into ours
                c = back(ids, mask, tt)
            d = (a - b).abs().max().item()
            d_back = (c - b).abs().max().item()
            print(f"{name} vs transformers BertForMaskedLM ({impl}): max |logit diff| {d:.2e}, after loading HF's "
                  f"state dict back {d_back:.2e}, logits scale {b.abs().max().item():.2f} (tolerance {tol:g})")
            ok &= d <= tol and d_back <= tol
        # mlm_loss (head on the predicted rows only) must equal the cross-entropy of the full logits.
        ids, mask, labels, idx = synthetic_batch(4, 32, 30522, seed=2)
        with torch.no_grad():
            l_rows = ours.mlm_loss(ids, mask, labels, idx).item()
            l_full = F.cross_entropy(ours(ids, mask).reshape(-1, 30522), labels.reshape(-1)).item()
        print(f"{name}: mlm_loss {l_rows:.6f}, cross-entropy of the full logits {l_full:.6f}")
        ok &= abs(l_rows - l_full) <= tol * max(1.0, abs(l_full))
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check-against-hf", action="store_true", help="compare with transformers (see check_against_hf)")
    a = p.parse_args()
    if not a.check_against_hf:
        p.print_help()
        return 0
    ok = check_against_hf()
    print("bert_torch --check-against-hf:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
