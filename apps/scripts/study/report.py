"""apps/scripts/study/report.py: study.md - the study's tables and plots, readable without the code."""


def fmt(s, f="{:.1f}", pct=False):
    """median (min-max) of a summary; '-' when absent."""
    if not s:
        return "-"
    k = 100.0 if pct else 1.0
    u = "%" if pct else ""
    if abs(s["max"] - s["min"]) * k < 1e-9:
        return f.format(s["median"] * k) + u
    return f"{f.format(s['median'] * k)}{u} ({f.format(s['min'] * k)}-{f.format(s['max'] * k)})"


def write(study, path):
    g = study["grid"]
    L = [f"# Scaling study ({study['created'][:10]})", "",
         f"Command: `apps/scripts/study.sh {study['command']}` at commit {study['commit']}, on {study['host']} "
         f"({study['cores']} cores, {study['cpu']}, device {study['device']}). Load average (1/5/15 min) "
         f"before: {' '.join(study['load_before'])}, after: {' '.join(study['load_after'])} - the machine is shared, "
         "so absolute rates move from run to run; compare the ratios.", "",
         f"Grid: models {', '.join(g['models'])}; strategies {', '.join(g['strategies'])}; ranks "
         f"{', '.join(map(str, g['ranks']))}; batch per rank {', '.join(map(str, g['batches']))}; {g['steps']} steps "
         f"at {g['image_size']} px on synthetic data; {g['repeats']} repeats per cell.", "",
         "## How to read this", "",
         "- **Weak scaling**: the batch is per rank, so N ranks process N times the images in the same number of steps.",
         "- Every cell shows the **median (min-max)** over its repeats. Each repeat runs the 1-rank baseline and every "
         "cell back to back, and **speedup** is taken against the baseline *of the same repeat*.",
         "- **speedup (steady)** = images/s at N ranks / images/s at 1 rank, over the steady steps (warm-up steps left out). "
         "**speedup (wall)** = N x wall(1 rank) / wall(N ranks), wall from `mpiexec` launch to exit. They disagree "
         "because wall time also holds start-up (MPI, model build, parameter broadcast: the **init** column) and the "
         "warm-up steps, which do not shrink with more ranks; for short runs the wall speedup is the lower one.",
         "- **efficiency** = steady speedup / N.",
         "- **ms/step** splits into **data** (waiting for the loader), **exposed comm** (communication that backward did "
         "not hide) and **compute** (the rest). **overlap** = the fraction of communication time hidden behind backward.",
         "- **peak tensors** is rank 0's tensor allocator peak; **peak RSS** the largest resident set of any rank.", ""]
    if study["unavailable"]:
        L += ["Strategies this build of train_imagenet does not have yet (skipped):", ""]
        L += [f"- `{s}`: {why}" for s, why in study["unavailable"].items()] + [""]
    keys = sorted({(c["model"], c["batch_per_rank"]) for c in study["cells"]})
    for model, batch in keys:
        cs = [c for c in study["cells"] if c["model"] == model and c["batch_per_rank"] == batch]
        L += [f"## {model}, batch {batch}/rank ({cs[0]['parameters'] / 1e6:.2f} M parameters, backend {cs[-1]['backend']})",
              "", "| strategy | ranks | images/s | per rank | speedup (steady) | speedup (wall) | efficiency | ms/step | "
              "data | compute | exposed comm | overlap | init s | train s | peak tensors MiB | peak RSS MiB |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in cs:
            L.append(f"| {c['strategy']} | {c['ranks']} | {fmt(c['images_per_s'], '{:.0f}')} | "
                     f"{fmt(c['images_per_s_per_rank'], '{:.0f}')} | {fmt(c['speedup'], '{:.2f}')} | "
                     f"{fmt(c['speedup_wall'], '{:.2f}')} | {fmt(c['efficiency'], '{:.0f}', True)} | "
                     f"{fmt(c['ms_per_step'])} | {fmt(c['data_ms'])} | {fmt(c['compute_ms'])} | {fmt(c['exposed_ms'])} | "
                     f"{fmt(c['overlap'], '{:.0f}', True) if c['ranks'] > 1 else '-'} | {fmt(c['init_s'], '{:.2f}')} | "
                     f"{fmt(c['train_s'], '{:.2f}')} | {fmt(c['peak_tensor_mib'], '{:.0f}')} | "
                     f"{fmt(c['rss_mib_max_rank'], '{:.0f}')} |")
        L.append("")
        for p in study.get("plots", []):
            if p.get("model") == model and p.get("batch") == batch:
                L += [f"**{p['title']}** - {p['caption']}", "", f"![{p['title']}]({p['png']})", ""]
    w = study.get("whatif") or {}
    if w.get("rows"):
        net = w["rows"][0]["network"]
        L += ["## What-if model vs this machine", "",
              "`apps/whatif` predicts each cell's step time from the traced 1-rank baseline (its per-bucket ready "
              "times, rescaled to the baseline's median ms/step) and the network fitted to `bench_allreduce` at 2 "
              f"ranks (alpha {net['alpha_us']:.1f} us, bandwidth {net['bandwidth_GBps']:.2f} GB/s), with the ranks "
              f"sharing {study['cores']} cores. Target: within {100 * w['target']:.0f} % of the measured median.", "",
              "| model | batch | strategy | ranks | predicted ms/step | measured ms/step | error | predicted exposed | "
              "measured exposed | within target |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in w["rows"]:
            meas = "-" if r["measured_ms"] is None else f"{r['measured_ms']:.1f}"
            err = "-" if r["error"] is None else f"{100 * r['error']:+.0f}%"
            mex = "-" if r["measured_exposed_ms"] is None else f"{r['measured_exposed_ms']:.1f}"
            ok = "-" if r["within_target"] is None else ("yes" if r["within_target"] else "no")
            L.append(f"| {r['model']} | {r['batch_per_rank']} | {r['strategy']} | {r['ranks']} | {r['predicted_ms']:.1f} "
                     f"| {meas} | {err} | {r['predicted_exposed_ms']:.1f} | {mex} | {ok} |")
        L += ["", "Predicted N = 1..1024 (every rank with cores of its own, this machine's network): " +
              ", ".join(f"[{k.replace('|', ' batch ')}]({v})" for k, v in w["tables"].items()), ""]
        for p in study.get("plots", []):
            if p.get("model") is None:
                L += [f"**{p['title']}** - {p['caption']}", "", f"![{p['title']}]({p['png']})", ""]
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
