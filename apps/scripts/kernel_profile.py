#!/usr/bin/env python3
"""apps/scripts/kernel_profile.py: per-kernel GPU time from Nsight Compute CSV, per kernel and per
category, two programs side by side (kernel_profile.sh runs ncu and then this).

Input: what `ncu --metrics gpu__time_duration.sum --csv --page raw --log-file FILE` writes - "==PROF=="
lines, then a header row ("ID","Process ID",...,"Kernel Name",...,"gpu__time_duration.sum"), a units
row (empty fields, "nsecond"/"usecond"/"msecond" under the metric), and one row per kernel launch.
The long form of `--page details` ("Metric Name","Metric Unit","Metric Value" columns) is read too.
Numbers may carry thousands separators ("135,424").

Names: the demangled name shortened for reading - no "void ", no parameter list, no namespaces
(tandem::kernels::, at::native::, "(anonymous namespace)::"); template arguments stay, since they
tell kernels apart (cast_kernel<float, __nv_bfloat16>, each_element_kernel<MaxForward<float>>).

Categories, decided from the name, first rule that matches (CATEGORY_RULES below, the order
matters: cuDNN's attention kernels say "fprop", its convolutions "implicit_gemm", PyTorch's clipping
"LpNorm"): communication, attention, conv, optimizer (the update, clipping, AMP's unscale and copy
back, the loss scaler), BN, norm (LayerNorm/RMSNorm), softmax (with cross-entropy), pooling, GEMM,
cast, transpose/copy, reduction, elementwise, other (embeddings, graph bookkeeping, the rest).
Triton kernels (torch.compile) are named after the ops they fuse; "convolution" and "mm" in their
names are the extern cuBLAS/cuDNN calls' neighbours, not GEMMs, so those words are ignored there.
PyTorch's dtype conversions run as copy kernels (direct_copy_kernel_cuda): they count as
transpose/copy, not cast.

Per step = the profiled total / --steps: the whole process is profiled (kernel_profile.sh says what
is in it), so one-time kernels (weight init, first-use casts) are spread over the steps.
Standard library only.
"""
import argparse
import csv
import json
import re
import sys

CATEGORY_RULES = [
    ("communication", r"nccl"),
    ("other", r"embedding|index_?select|scatter_add_kernel|gather_kernel"),
    ("attention", r"flash|fmha|sdpa|attention|attn|(^|_)mha"),
    ("conv", r"conv(?!ert)|fprop|dgrad|wgrad|winograd|implicit_convolve"),
    ("optimizer", r"adam|lamb(?!da)|sgd|momentum|optimizer|unscale|scaler_update|copy_back_kernel|advance_counts"
                  r"|lpnorm|l2norm|sum_squares|clip_coefficient|multi_tensor_apply"),
    ("BN", r"batch_?norm|bn_fw|bn_bw|bn_add|(^|::)(partial_stats|finalize_stats|eval_stats|partial_grad"
           r"|finalize_grad|apply|dx)_kernel"),
    ("norm", r"layer_?norm|rms_?norm|group_?norm|ln_fwd|ln_bwd"),
    ("softmax", r"softmax|sms_fwd|sms_bwd|(^|::)ce_(rows|bwd|shard)|cross_entropy|nll_loss"),
    ("pooling", r"pool|maxforward|avgforward|gatherbackward"),
    ("GEMM", r"gemm|gemv|cublas|cutlass|nvjet|matmul|xmma|magma|splitkreduce|dot_kernel"),
    ("cast", r"(?<!no)(?<!broad)cast|convert|float2half|to_bf16"),  # not gpu_kernel_impl_nocast, broadcast
    ("transpose/copy", r"transpose|permute|copy|memcpy|nchwtonhwc|nhwctonchw|cat_?array"),
    ("reduction", r"reduce|sum|mean|column|argmax|topk|triton_red|triton_per|count_nonfinite"),
    ("elementwise", r"elementwise|each_element|map1|map2|bias_map|map_kernel|relu|gelu|silu|tanh|sigmoid"
                    r"|add|mul|div|dropout|fill|where|pointwise|triton_poi|threshold|scale|broadcast"),
]
CATEGORIES = [c for c, _ in CATEGORY_RULES if c != "other"] + ["other"]
_COMPILED = [(c, re.compile(r, re.IGNORECASE)) for c, r in CATEGORY_RULES]
UNIT_NS = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
METRIC = "gpu__time_duration.sum"


def short_name(name):
    """The demangled kernel name without "void ", parameter list and namespaces (see the header)."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    # Drop the trailing parameter list: the last top-level "(...)" (template arguments may hold
    # parentheses of their own, e.g. "(anonymous namespace)").
    if n.endswith(")"):
        depth = 0
        for i in range(len(n) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(n[i], 0)
            if depth == 0:
                if not n[:i].rstrip().endswith("namespace"):
                    n = n[:i].rstrip()
                break
    n = n.replace("(anonymous namespace)::", "")
    n = re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*::", "", n)  # namespaces and enclosing classes
    return n


def category(name):
    """The first rule in CATEGORY_RULES matching the short name or the full one."""
    key = short_name(name) + " " + name
    if re.search(r"(^|::|\s)triton_", key):
        key = re.sub(r"convolution(_backward)?|_?(add|b)?mm(?=_|\d|\s|$)", "", key)
    for cat, rx in _COMPILED:
        if rx.search(key):
            return cat
    return "other"


def _number(s):
    return float(s.replace(",", "").strip())


def read_ncu_csv(path):
    """[(kernel name, duration ns)] in launch order, from either ncu CSV layout."""
    with open(path, newline="", errors="replace") as f:
        lines = [l for l in f if not l.startswith("==")]
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\"): is it `ncu --csv` output?")
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    if "Kernel Name" not in header:
        raise ValueError(f"{path}: the header has no \"Kernel Name\" column")
    name_col = header.index("Kernel Name")
    out = []
    if "Metric Name" in header:  # --page details: one row per (kernel, metric)
        mn, mu, mv = header.index("Metric Name"), header.index("Metric Unit"), header.index("Metric Value")
        for r in rows[1:]:
            if len(r) > mv and r[mn] == METRIC:
                out.append((r[name_col], _number(r[mv]) * UNIT_NS.get(r[mu].strip(), 1)))
        return out
    if METRIC not in header:
        raise ValueError(f"{path}: no {METRIC} column: profile with --metrics {METRIC}")
    col = header.index(METRIC)
    scale = 1.0
    for r in rows[1:]:
        if len(r) <= col:
            continue
        if r[0].strip() == "":  # the units row
            scale = UNIT_NS.get(r[col].strip(), 1.0)
            continue
        out.append((r[name_col], _number(r[col]) * scale))
    return out


def aggregate(launches, steps):
    """Per kernel and per category: ms per step, launches per step, share of the total."""
    total = sum(ns for _, ns in launches)
    kernels, cats = {}, {c: {"ns": 0.0, "launches": 0} for c in CATEGORIES}
    for name, ns in launches:
        short = short_name(name)
        k = kernels.setdefault(short, {"name": short, "category": category(name), "ns": 0.0, "launches": 0})
        k["ns"] += ns
        k["launches"] += 1
        cats[k["category"]]["ns"] += ns
        cats[k["category"]]["launches"] += 1

    def row(d):
        return {"ms_per_step": d["ns"] / 1e6 / steps, "launches_per_step": d["launches"] / steps,
                "share": d["ns"] / total if total else 0.0}
    return {"steps": steps, "total_ms_per_step": total / 1e6 / steps, "launches_per_step": len(launches) / steps,
            "categories": {c: row(d) for c, d in cats.items()},
            "kernels": sorted(({"name": k["name"], "category": k["category"], **row(k)} for k in kernels.values()),
                              key=lambda k: -k["ms_per_step"])}


def markdown(sides, top):
    """The side-by-side category table, then each side's top kernels."""
    names = list(sides)
    head = "| category | " + " | ".join(f"{n} ms/step | {n} % | {n} launches/step" for n in names) + " |"
    out = [head, "|---|" + "---|" * (3 * len(names))]
    fmt_ms = lambda v: f"{v:.2f}" if v else "-"
    for c in CATEGORIES:
        cells = []
        for n in names:
            r = sides[n]["categories"][c]
            cells += [fmt_ms(r["ms_per_step"]), f"{100 * r['share']:.1f}" if r["launches_per_step"] else "-",
                      f"{r['launches_per_step']:.4g}" if r["launches_per_step"] else "-"]
        if any(sides[n]["categories"][c]["launches_per_step"] for n in names):
            out.append(f"| {c} | " + " | ".join(cells) + " |")
    out.append("| **all** | " + " | ".join(f"**{sides[n]['total_ms_per_step']:.2f}** | 100 | "
                                          f"{sides[n]['launches_per_step']:.4g}" for n in names) + " |")
    for n in names:
        out += ["", f"Top {top} kernels, {n} (ms per step, % of its step, launches per step):", "",
                "| kernel | category | ms/step | % | launches/step |", "|---|---|---|---|---|"]
        for k in sides[n]["kernels"][:top]:
            name = k["name"] if len(k["name"]) <= 90 else k["name"][:87] + "..."
            out.append(f"| `{name}` | {k['category']} | {k['ms_per_step']:.3f} | {100 * k['share']:.1f} "
                       f"| {k['launches_per_step']:g} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", action="append", required=True, metavar="NAME=CSV",
                    help="a program's ncu CSV under a column name (repeat: the table puts them side by side)")
    ap.add_argument("--steps", type=int, required=True, help="training steps each profiled run made")
    ap.add_argument("--top", type=int, default=15, help="kernels listed per side")
    ap.add_argument("--md", help="write the markdown here (default: stdout)")
    ap.add_argument("--json", help="also write the numbers as JSON")
    a = ap.parse_args(argv)
    if a.steps < 1:
        ap.error("--steps must be at least 1")
    sides = {}
    for s in a.side:
        name, sep, path = s.partition("=")
        if not sep:
            ap.error(f"--side {s}: use NAME=CSV")
        launches = read_ncu_csv(path)
        if not launches:
            raise SystemExit(f"kernel_profile: {path} holds no kernel rows (did the program run on the GPU?)")
        sides[name] = aggregate(launches, a.steps)
    text = markdown(sides, a.top)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(sides, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
