#!/usr/bin/env python3
"""apps/scripts/session_summary.py: the short report of a gpu_session.sh run, from its raw folder.

Reads what gpu_session.sh left in RAW (steps.tsv, *.log, tandem_*.json, torch_*[_compile].json,
bench_ops.json, bench_allreduce_*.json, enc_tandem_*.json, enc_torch_*[_compile].json, info.log,
sanitize_summary.txt, kernel_profile_*/profile.md) and prints Markdown: the machine, the step
statuses, ctest pass/fail/skip counts, tandem vs PyTorch eager and torch.compile images/s per
config and precision, tandem vs PyTorch tokens/s and MFU per encoder config, the kernel profile,
bench_ops median ratios and all-reduce bandwidth. --json FILE also writes the same numbers as JSON.
Anything missing (a step that did not run yet, a run killed by its time limit) shows as "-": the
summary is rewritten after every step and must never fail on partial results. Standard library only.

Conventions: a ratio is tandem / reference for times (bench_ops: < 1 means tandem is faster) and
tandem / PyTorch for images/s and tokens/s (> 1 means tandem is faster). Training images/s on both sides is the
steady-window mean (steps after the warm-up x batch / wall time, synchronised at both ends); the
PyTorch median-step rate is shown next to it.
MFU: every side's tokens/s times the same model FLOPs per token - tandem's count
(apps/encoder/flops.h), which tandem's metrics carry and pytorch_peer.py computes by the same
formula (a mismatch is flagged) - over the same peak, tandem's: the dense peak of the dtype the
matmuls run in, with its source.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def steps_table(raw):
    """Last entry per step name (a step re-run in a later call replaces the earlier one), in order."""
    rows = {}
    for line in read(os.path.join(raw, "steps.tsv")).splitlines():
        f = line.split("\t")
        if len(f) >= 4:
            rows.pop(f[0], None)
            rows[f[0]] = {"status": f[1], "rc": f[2], "seconds": f[3], "note": f[4] if len(f) > 4 else ""}
    return rows


# ctest's per-test line: "  3/7 Test  #3: gpu_data .......   Passed    0.52 sec" (or ***Failed,
# ***Skipped, ***Not Run, ***Timeout, ***Exception: SegFault, ...).
CTEST_LINE = re.compile(r"Test\s+#\d+:\s+(\S+)\s+\.*\s*\**([A-Za-z][A-Za-z ]*?)(?::.*?)?\s+[\d.]+\s+sec")


def cuda_graphs(raw):
    """train_imagenet with and without --cuda-graph (cudagraph_<tag>_off/_on.json): host and step time."""
    rows = []
    tags = sorted({os.path.basename(f)[len("cudagraph_"):].rsplit("_", 1)[0]
                   for f in glob.glob(os.path.join(raw, "cudagraph_*_o*.json"))})
    for tag in tags:
        for mode in ("off", "on"):
            t = load(os.path.join(raw, f"cudagraph_{tag}_{mode}.json"))
            if not t:
                continue
            ips = t.get("images_per_s") or None
            last = t.get("last_interval_ms_per_step", {})
            cap = t.get("cuda_graph_capture") or {}
            rows.append({"config": tag, "graph": mode, "ips": ips, "ms": 1e3 * t["batch_per_rank"] / ips if ips else None,
                         "host_ms": last.get("host"), "nodes": cap.get("nodes"), "capture_ms": cap.get("capture_ms")})
    return rows


def conv_bn_fusion(raw):
    """train_imagenet --conv-bn-fusion on (convbn_<tag>_on.json) beside the same run off (tandem_<tag>.json)."""
    rows = []
    for f in sorted(glob.glob(os.path.join(raw, "convbn_*_on.json"))):
        tag = os.path.basename(f)[len("convbn_"):-len("_on.json")]
        for mode, t in (("off", load(os.path.join(raw, f"tandem_{tag}.json"))), ("on", load(f))):
            if not t:
                continue
            cb = t.get("conv_bn_fusion") or {}
            rows.append({"config": tag, "fusion": mode, "ips": t.get("images_per_s") or None,
                         "graphs": cb.get("graph_calls"), "fallbacks": cb.get("fallbacks")})
    return rows


# The ops' fused-path counters each tandem run writes into its metrics (gpu_paths, apps/trainer/
# report_json.h): one row per run, "fused / fallback" per path; and the CPU check of every cuDNN
# graph (tests/cpu_cudnn_graphs.cpp: its summary lines, from cudnn_graphs.log when the step ran).
GPU_PATHS = ("attention_sdpa", "gemm_bias", "gemm_bgradb", "conv_bias", "conv_bias_relu_graph", "conv_bn_graph")


def fused_paths(raw):
    rows = []
    for f in sorted(glob.glob(os.path.join(raw, "*.json"))):
        m = load(f)
        if not isinstance(m, dict) or not isinstance(m.get("gpu_paths"), dict):
            continue
        g = m["gpu_paths"]
        row = {"run": os.path.basename(f)[:-5]}
        for k in GPU_PATHS:
            v = dict(g.get(k) or {})
            fused = v.pop("fused", None)  # the other key is the fallback's name (separate, reference, ...)
            row[k] = f"{fused} / {list(v.values())[0]}" if fused is not None and len(v) == 1 else "-"
        bn = g.get("batchnorm_cudnn") or {}
        row["batchnorm_cudnn"] = (f"{bn.get('bn', 0)} / {bn.get('bn_relu', 0)} / {bn.get('bn_add_relu', 0)} / "
                                  f"{bn.get('fallbacks', 0)}")
        rows.append(row)
    text = read(os.path.join(raw, "cudnn_graphs.log")) or ""
    graphs = [l.strip() for l in text.splitlines() if l.startswith(("validate ", "support ", "deviceless ", "SKIPPED"))]
    return {"runs": rows, "cudnn_graphs": graphs}


def ctest_counts(log):
    tests = {}
    for m in CTEST_LINE.finditer(read(log)):
        word = m.group(2).strip()
        # "Not Run" is a missing executable (a build failure), so it counts as failed, unlike "Skipped"
        # (exit code 77: no GPU visible to the test).
        tests[m.group(1)] = {"Passed": "passed", "Skipped": "skipped"}.get(word, "failed")
    c = {k: sum(1 for s in tests.values() if s == k) for k in ("passed", "failed", "skipped")}
    c["failed_names"] = sorted(n for n, s in tests.items() if s == "failed")
    return c if tests else None


def split_tag(tag, suffixes=("_compile", "_cudnnbench")):
    """'resnet50_b256_bf16_compile' -> ('resnet50_b256_bf16', '_compile')."""
    for suf in suffixes:
        if tag.endswith(suf):
            return tag[:-len(suf)], suf
    return tag, ""


def training(raw):
    """One row per config and precision: tandem, PyTorch eager, torch.compile (and cudnn.benchmark)."""
    rows = []
    # A config shows when any side left its JSON (another side may have failed).
    tags = {split_tag(os.path.basename(f).split("_", 1)[1][:-len(".json")])[0]
            for f in glob.glob(os.path.join(raw, "tandem_*.json")) + glob.glob(os.path.join(raw, "torch_*.json"))}
    for tag in sorted(tags):
        t, p = load(os.path.join(raw, f"tandem_{tag}.json")), load(os.path.join(raw, f"torch_{tag}.json"))
        c = load(os.path.join(raw, f"torch_{tag}_compile.json"))
        r = {"config": tag}
        if t:
            ips = t.get("images_per_s") or None
            r.update(tandem_ips=ips, tandem_ms=1e3 * t["batch_per_rank"] / ips if ips else None,
                     tandem_peak_mib=t.get("memory", {}).get("peak_bytes", 0) / 2**20, tandem_params=t.get("parameters"),
                     tandem_loss=t.get("final", {}).get("train_loss"), amp=t.get("amp"))
            # VGG/AlexNet: biased convs that fell back from cuDNN's fused conv + bias graph (core/ops/conv/conv.h).
            cbf = t.get("conv_bias_fusion") or {}
            if cbf.get("unfused_calls"):
                r["note"] = (f"conv bias fusion {cbf.get('setting')}: {cbf['unfused_calls']} biased conv calls fell back "
                             f"to conv + add, {cbf.get('fused_calls', 0)} ran fused")
            if t.get("final", {}).get("train_loss") is not None and not math.isfinite(t["final"]["train_loss"]):
                r["warning"] = "tandem's final loss is not finite (diverged: check the learning rate)"
        if p:
            r.update(torch_ips=p.get("images_per_s"), torch_median_ips=p.get("images_per_s_median"),
                     torch_ms=p.get("ms_per_step_median"), torch_params=p.get("parameters"),
                     torch_peak_mib=(p.get("peak_mem_bytes") or 0) / 2**20 or None)
            r.setdefault("amp", p.get("amp"))
        if c:
            r.update(torch_compile_ips=c.get("images_per_s"), torch_compile_ms=c.get("ms_per_step_median"))
            r.setdefault("torch_params", c.get("parameters"))
        b = load(os.path.join(raw, f"torch_{tag}_cudnnbench.json"))
        if b:
            r["torch_cudnnbench_ips"] = b.get("images_per_s")
        if r.get("tandem_ips") and r.get("torch_ips"):
            r["ratio"] = r["tandem_ips"] / r["torch_ips"]
        if r.get("tandem_ips") and r.get("torch_compile_ips"):
            r["ratio_compile"] = r["tandem_ips"] / r["torch_compile_ips"]
        if r.get("tandem_params") and r.get("torch_params") and r["tandem_params"] != r["torch_params"]:
            r["warning"] = f"parameter counts differ: tandem {r['tandem_params']}, torch {r['torch_params']}"
        rows.append(r)
    return rows


def encoder(raw):
    """train_encoder vs pytorch_peer.py --encoder, eager and compiled (enc_tandem_<tag>.json,
    enc_torch_<tag>[_compile].json). Every MFU is tokens/s x the same FLOPs per token over the same
    peak (see the file comment), so the MFUs differ exactly as the tokens/s do."""
    rows = []
    tags = {split_tag(os.path.basename(f)[:-len(".json")].split("_", 2)[2])[0]
            for f in glob.glob(os.path.join(raw, "enc_tandem_*.json")) + glob.glob(os.path.join(raw, "enc_torch_*.json"))}
    for tag in sorted(tags):
        t = load(os.path.join(raw, f"enc_tandem_{tag}.json"))
        p, c = load(os.path.join(raw, f"enc_torch_{tag}.json")), load(os.path.join(raw, f"enc_torch_{tag}_compile.json"))
        r = {"config": tag}
        if t:
            r.update(seq=t.get("seq_len"), amp=t.get("amp"), tandem_tok_s=t.get("tokens_per_s") or None,
                     tandem_seq_s=t.get("sequences_per_s") or None,
                     tandem_params=t.get("parameters"), tandem_loss=t.get("final", {}).get("train_loss"),
                     tandem_peak_mib=t.get("memory", {}).get("peak_bytes", 0) / 2**20 or None,
                     flops_per_token=t.get("flops_per_token"), peak_flops=t.get("peak_flops_per_rank"),
                     peak_source=t.get("peak_source"))
        for side, j in (("torch", p), ("torch_compile", c)):
            if not j:
                continue
            r.update({f"{side}_tok_s": j.get("tokens_per_s"), f"{side}_seq_s": j.get("sequences_per_s"),
                      f"{side}_ms": j.get("ms_per_step_median"), f"{side}_loss": j.get("final_loss"),
                      f"{side}_peak_mib": (j.get("peak_mem_bytes") or 0) / 2**20 or None})
            r.setdefault("torch_params", j.get("parameters"))
            r.setdefault("torch_source", j.get("model_source"))
            r.setdefault("seq", j.get("seq"))
            # The peer's own count of the same formula: the fallback when tandem left no metrics, and a
            # check that both sides count alike.
            pf = j.get("flops_per_token")
            if pf and r.get("flops_per_token") and abs(pf - r["flops_per_token"]) > 1e-9 * pf:
                r["warning"] = (f"FLOPs per token differ: tandem {r['flops_per_token']:.6g}, PyTorch {pf:.6g} "
                                "(different models?)")
            r.setdefault("flops_per_token", pf)
        flops, peak = r.get("flops_per_token"), r.get("peak_flops")
        for side in ("tandem", "torch", "torch_compile"):
            if r.get(f"{side}_tok_s") and flops and peak:
                r[f"{side}_mfu"] = r[f"{side}_tok_s"] * flops / peak
        for side, key in (("torch", "ratio"), ("torch_compile", "ratio_compile")):
            if r.get("tandem_tok_s") and r.get(f"{side}_tok_s"):
                r[key] = r["tandem_tok_s"] / r[f"{side}_tok_s"]
        if r.get("tandem_params") and r.get("torch_params") and r["tandem_params"] != r["torch_params"]:
            r["warning"] = f"parameter counts differ: tandem {r['tandem_params']}, torch {r['torch_params']}"
        rows.append(r)
    return rows


def kernel_profiles(raw):
    """kernel_profile.sh's tables, as written (kernel_profile_<tag>/profile.md)."""
    out = []
    for path in sorted(glob.glob(os.path.join(raw, "kernel_profile_*", "profile.md"))):
        out.append({"run": os.path.basename(os.path.dirname(path)), "markdown": read(path).strip()})
    return out


def bench_ops(raw):
    j = load(os.path.join(raw, "bench_ops.json"))
    if not j:
        return None
    groups = {}
    for row in j.get("rows", []):
        if row.get("ratio"):
            groups.setdefault((row["part"], row["dtype"]), []).append(row["ratio"])
    return {"gpu": j.get("gpu"), "groups": [{"part": k[0], "dtype": k[1], "rows": len(v), "median_ratio": statistics.median(v),
                                              "worst_ratio": max(v)} for k, v in groups.items()]}


def allreduce(raw):
    out = []
    for path in sorted(glob.glob(os.path.join(raw, "bench_allreduce_*.json"))):
        rows = load(path) or []
        for backend in sorted({r["backend"] for r in rows}):
            rs = [r for r in rows if r["backend"] == backend]
            small, big = min(rs, key=lambda r: r["bytes"]), max(rs, key=lambda r: r["bytes"])
            out.append({"run": os.path.basename(path)[:-5], "backend": backend, "ranks": big["ranks"],
                        "small_bytes": small["bytes"], "small_us": small["time_us"], "big_bytes": big["bytes"],
                        "big_busbw_GBps": big["busbw_GBps"], "big_algbw_GBps": big["algbw_GBps"]})
    return out


def machine(raw):
    text = read(os.path.join(raw, "info.log"))
    m = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("name, driver_version") and i + 1 < len(lines):
            m["gpu"] = lines[i + 1]
        if "release" in line and "nvcc" not in m and "Cuda compilation tools" in line:
            m["nvcc"] = line.strip()
        if line.startswith("torch "):
            m["torch"] = line.strip()
        if "cudnn_version.h:" in line and "cudnn_header" not in m:
            m["cudnn_header"] = line.split(": ", 1)[-1]
        if "nccl.h:" in line and "nccl_header" not in m:
            m["nccl_header"] = line.split(": ", 1)[-1]
    return m


def main():
    ap = argparse.ArgumentParser(description="summarise a gpu_session.sh raw folder")
    ap.add_argument("raw")
    ap.add_argument("--json")
    a = ap.parse_args()
    s = {"machine": machine(a.raw), "steps": steps_table(a.raw),
         "ctest": {k: ctest_counts(os.path.join(a.raw, f"ctest_{k}.log")) for k in ("gpu", "rest")},
         "training": training(a.raw), "encoder": encoder(a.raw), "bench_ops": bench_ops(a.raw), "allreduce": allreduce(a.raw),
         "train_np2_staged": load(os.path.join(a.raw, "train_np2_staged.json")), "cuda_graphs": cuda_graphs(a.raw),
         "conv_bn_fusion": conv_bn_fusion(a.raw),
         "kernel_profiles": kernel_profiles(a.raw), "fused_paths": fused_paths(a.raw)}
    out = ["# tandem GPU session", ""]
    for k, v in s["machine"].items():
        out.append(f"- {k}: {v}")
    st = s["steps"]
    n = {x: sum(1 for r in st.values() if r["status"] == x) for x in ("ok", "fail", "timeout", "skipped")}
    out += ["", f"## Steps: {n['ok']} ok, {n['fail']} failed, {n['timeout']} timed out, {n['skipped']} skipped", "",
            "| step | status | rc | s | why skipped |", "|---|---|---|---|---|"]
    # A skipped step's note is its reason (no GPU, torch missing, no time left); others' is the command.
    out += [f"| {k} | {r['status']} | {r['rc']} | {r['seconds']} | {r['note'] if r['status'] == 'skipped' and r['rc'] == '-' else ''} |"
            for k, r in st.items()]
    fp = s["fused_paths"]
    if fp["runs"] or fp["cudnn_graphs"]:
        out += ["", "## Fused paths and fallbacks (calls over each whole run: fused / fallback; batchnorm_cudnn: "
                "BN / BN+ReLU / BN+add+ReLU calls / fallbacks)", "",
                "| run | " + " | ".join(GPU_PATHS) + " | batchnorm_cudnn |", "|---" * (len(GPU_PATHS) + 2) + "|"]
        out += ["| " + " | ".join([r["run"]] + [r[k] for k in GPU_PATHS] + [r["batchnorm_cudnn"]]) + " |"
                for r in fp["runs"]]
        out += [f"- cuDNN graphs (tests/cpu_cudnn_graphs.cpp): {l}" for l in fp["cudnn_graphs"]]
    out += ["", "## ctest", "", "| set | passed | failed | skipped | failing |", "|---|---|---|---|---|"]
    for k, c in s["ctest"].items():
        if c:
            out.append(f"| {k} | {c['passed']} | {c['failed']} | {c['skipped']} | {' '.join(c['failed_names'][:12])} |")
        else:
            out.append(f"| {k} | - | - | - | (no ctest output) |")
    g = s["ctest"]["gpu"]
    if g and g["skipped"] and not g["passed"] and not g["failed"]:
        out.append("- every GPU test skipped: no GPU was visible to tandem (expected only in --cpu-smoke runs)")
    out += ["", "## Training, synthetic data (config: model, batch, precision - tf32: f32 with TF32, bf16: autocast; "
            "images/s: steady-window mean; ratios = tandem / PyTorch eager, tandem / torch.compile)", "",
            "| config | tandem img/s | PyTorch eager img/s | torch.compile img/s | tandem / eager | tandem / compile "
            "| PyTorch median-step img/s | PyTorch cudnn.benchmark img/s | tandem ms/step | PyTorch median ms "
            "| tandem peak MiB | PyTorch peak MiB |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["training"]:
        out.append(f"| {r['config']} | {fmt(r.get('tandem_ips'))} | {fmt(r.get('torch_ips'))} | {fmt(r.get('torch_compile_ips'))} "
                   f"| {fmt(r.get('ratio'), '.2f')} | {fmt(r.get('ratio_compile'), '.2f')} "
                   f"| {fmt(r.get('torch_median_ips'))} | {fmt(r.get('torch_cudnnbench_ips'))} | {fmt(r.get('tandem_ms'), '.2f')} "
                   f"| {fmt(r.get('torch_ms'), '.2f')} | {fmt(r.get('tandem_peak_mib'), '.0f')} | {fmt(r.get('torch_peak_mib'), '.0f')} |")
    out += [f"- warning ({r['config']}): {r['warning']}" for r in s["training"] if "warning" in r]
    out += [f"- note ({r['config']}): {r['note']}" for r in s["training"] if "note" in r]
    if s["cuda_graphs"]:
        out += ["", "## CUDA graphs (train_imagenet --cuda-graph vs eager, both --on-nonfinite off; host = issuing time "
                "per step in the last progress interval)", "",
                "| config | cuda graph | img/s | ms/step | host ms/step | graph nodes | capture ms |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r['config']} | {r['graph']} | {fmt(r['ips'])} | {fmt(r['ms'], '.2f')} | {fmt(r['host_ms'], '.2f')} "
                f"| {r['nodes'] if r['nodes'] is not None else '-'} | {fmt(r['capture_ms'], '.0f')} |" for r in s["cuda_graphs"]]
    if s["conv_bn_fusion"]:
        out += ["", "## Conv-BN fusion (train_imagenet --conv-bn-fusion on vs off; make it the default where it is faster)", "",
                "| config | conv-BN fusion | img/s | graph calls | fallbacks |", "|---|---|---|---|---|"]
        out += [f"| {r['config']} | {r['fusion']} | {fmt(r['ips'])} | {r['graphs'] if r['graphs'] is not None else '-'} "
                f"| {r['fallbacks'] if r['fallbacks'] is not None else '-'} |" for r in s["conv_bn_fusion"]]
    t2 = s["train_np2_staged"]
    if t2:
        out.append(f"- 2 ranks, host-staged ({t2.get('backend')}, {t2.get('model')}): {fmt(t2.get('images_per_s'))} img/s, "
                   f"final train loss {fmt(t2.get('final', {}).get('train_loss'), '.4f')}")
    if s["encoder"]:
        out += ["", "## Encoder, BERT masked-LM, synthetic data, bf16 autocast (config: model, batch, sequence length; "
                "tokens/s: steady-window mean; ratios = tandem / PyTorch eager, tandem / torch.compile; MFU: the same "
                "FLOPs per token and peak for every side)", "",
                "| config | tandem tok/s | PyTorch eager tok/s | torch.compile tok/s | tandem / eager | tandem / compile "
                "| tandem MFU | eager MFU | compile MFU | PyTorch median ms | tandem peak MiB | PyTorch peak MiB | PyTorch model |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
        out += [f"| {r['config']} | {fmt(r.get('tandem_tok_s'), '.0f')} | {fmt(r.get('torch_tok_s'), '.0f')} "
                f"| {fmt(r.get('torch_compile_tok_s'), '.0f')} | {fmt(r.get('ratio'), '.2f')} | {fmt(r.get('ratio_compile'), '.2f')} "
                f"| {pct(r.get('tandem_mfu'))} | {pct(r.get('torch_mfu'))} | {pct(r.get('torch_compile_mfu'))} "
                f"| {fmt(r.get('torch_ms'), '.2f')} | {fmt(r.get('tandem_peak_mib'), '.0f')} | {fmt(r.get('torch_peak_mib'), '.0f')} "
                f"| {r.get('torch_source') or '-'} |" for r in s["encoder"]]
        peaks = sorted({(r.get("peak_flops"), r.get("peak_source")) for r in s["encoder"] if r.get("peak_source")},
                       key=lambda x: str(x))
        out += [f"- MFU's peak: {p / 1e12:.4g} TFLOP/s per rank ({src})" if p else f"- MFU's peak: unknown ({src})"
                for p, src in peaks]
        out += [f"- FLOPs per token ({r['config']}): {r['flops_per_token'] / 1e9:.4g} G" for r in s["encoder"]
                if r.get("flops_per_token")]
        out += [f"- warning ({r['config']}): {r['warning']}" for r in s["encoder"] if "warning" in r]
    for k in s["kernel_profiles"]:
        body = k["markdown"].splitlines()
        if body and body[0].startswith("# "):
            body[0] = "## " + body[0][2:]  # one level down inside the summary
        out += ["", *body]
    b = s["bench_ops"]
    if b:
        out += ["", f"## bench_ops (ratio = tandem time / direct library time; GPU part: {b['gpu']})", "",
                "| part | dtype | rows | median ratio | worst ratio |", "|---|---|---|---|---|"]
        out += [f"| {g['part']} | {g['dtype']} | {g['rows']} | {g['median_ratio']:.2f} | {g['worst_ratio']:.2f} |"
                for g in b["groups"]]
    if s["allreduce"]:
        out += ["", "## bench_allreduce", "", "| run | backend | ranks | smallest: bytes, us | largest: bytes, busbw GB/s |",
                "|---|---|---|---|---|"]
        out += [f"| {r['run']} | {r['backend']} | {r['ranks']} | {r['small_bytes']}, {r['small_us']:.1f} "
                f"| {r['big_bytes']}, {r['big_busbw_GBps']:.2f} |" for r in s["allreduce"]]
    san = read(os.path.join(a.raw, "sanitize_summary.txt")).splitlines()
    if san:  # gpu_session.sh's sanitize phase: compute-sanitizer memcheck, one line per run
        out += ["", "## compute-sanitizer memcheck", ""] + [f"- {l}" for l in san]
    # What went wrong, readable without unpacking the tarball: compiler errors for the build, the
    # log's tail otherwise.
    bad = [k for k, r in st.items() if r["status"] in ("fail", "timeout")]
    if bad:
        out += ["", "## Failures (log excerpts)"]
    for k in bad:
        lines = read(os.path.join(a.raw, f"{k}.log")).splitlines()
        if k == "build":
            lines = [l for l in lines if re.search(r"error|FAILED", l)][:15] or lines[-10:]
        else:
            lines = lines[-10:]
        out += ["", f"### {k}", "```"] + [l[:240] for l in lines] + ["```"]
    print("\n".join(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
