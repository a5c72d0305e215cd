"""apps/scripts/study/report.py: study.md - the study's tables and plots, readable without the code.

It also says where a figure should not be trusted, next to the figure: oversubscribed cells (ranks >
usable cores), noisy baselines (spread > run.NOISY_SPREAD), efficiencies above 100 %, speedups that
differ from the ratio of the median images/s, and what-if rows whose exposed communication is off.
"""

OVER, NOISY, ABOVE = "‡", "†", "!"  # not "*": markdown would read it as emphasis or a list bullet
RATIO_GAP = 0.05  # speedup vs ratio of median images/s: a larger gap gets a note under its table


def fmt(s, f="{:.1f}", pct=False):
    """median (min-max) of a summary; '-' when absent."""
    if not s:
        return "-"
    k = 100.0 if pct else 1.0
    u = "%" if pct else ""
    if abs(s["max"] - s["min"]) * k < 1e-9:
        return f.format(s["median"] * k) + u
    return f"{f.format(s['median'] * k)}{u} ({f.format(s['min'] * k)}-{f.format(s['max'] * k)})"


def mark(text, *marks):
    m = " ".join(x for x in marks if x)
    return f"{text} {m}" if m else text


def verdict(r):
    if r["within_target"] is None:
        return "-"
    if r["within_target"]:
        return "yes"
    why = [w for w, ok in (("step", r["step_ok"]), ("exposed", r["exposed_ok"])) if not ok]
    return f"no ({', '.join(why)})"


def table_notes(cs, cores):
    """Per-table notes: which cells carry which mark, and speedups that differ from the images/s ratio."""
    notes = []
    base = next((c for c in cs if c["ranks"] == 1), None)
    if base and base["noisy"]:
        b = base["images_per_s"]
        notes.append(f"{NOISY} The 1-rank baseline is noisy: {b['min']:.0f}-{b['max']:.0f} images/s over "
                     f"{base['repeats']} repeats, a spread of {100 * base['spread']:.0f} % of its median. Every speedup "
                     "and efficiency below is a ratio against it; read them to about that precision.")
    over = sorted({c["ranks"] for c in cs if c["oversubscribed"]})
    if over:
        notes.append(f"{OVER} Oversubscribed: {', '.join(map(str, over))} ranks on {cores} usable cores. The ranks take "
                     "turns on the cores, so compute per step grows by about ranks/cores and the speedup measures the "
                     "machine's time-slicing, not the strategy.")
    above = [c for c in cs if c["ranks"] > 1 and c["efficiency"] and c["efficiency"]["max"] > 1.0]
    if above:
        notes.append(f"{ABOVE} Efficiency above 100 % in " + ", ".join(f"{c['strategy']} at {c['ranks']} ranks"
                                                                      for c in above) +
                     ": N ranks cannot do more than N times one rank's work on the same cores; the repeat it comes "
                     "from was divided by a slow baseline repeat. It is noise, not a superlinear effect.")
    for c in cs:
        r = c.get("images_ratio")
        if c["ranks"] > 1 and r and c["speedup"] and abs(c["speedup"]["median"] - r) > RATIO_GAP * r:
            notes.append(f"{c['strategy']} at {c['ranks']} ranks: speedup {c['speedup']['median']:.2f} is the median of "
                         f"the per-repeat ratios; the ratio of the median images/s is {r:.2f}. The gap is the repeats' "
                         "disagreement (see the min-max ranges), not an error in either.")
    return [f"- {n}" for n in notes]


def write(study, path):
    g = study["grid"]
    cores = study["cores"]
    judged = not study.get("hostfile")
    L = [f"# Scaling study ({study['created'][:10]})", "",
         f"Command: `apps/scripts/study.sh {study['command']}` at commit {study['commit']}, on {study['host']} "
         f"({cores} usable cores by its {study.get('cores_how', 'core count')}, of {study.get('machine_cores', cores)} "
         f"on the machine; {study['cpu']}, device {study['device']}). Load average (1/5/15 min) "
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
         "- **Speedup is not the ratio of the two images/s columns**: it is the median over repeats of each repeat's "
         "N-rank images/s divided by *that repeat's* 1-rank images/s (so load drift between repeats cancels), while each "
         "images/s column is its own median; the two agree when the repeats agree, and a note under the table gives "
         f"both where they differ by more than {100 * RATIO_GAP:.0f} %.",
         "- **efficiency** = steady speedup / N.",
         "- **ms/step** splits into **data** (waiting for the loader), **exposed comm** (communication that backward did "
         "not hide, including waiting for a slower rank) and **compute** (the rest). **overlap** = the fraction of "
         "communication time hidden behind backward.",
         "- **peak tensors** is rank 0's tensor allocator peak; **peak RSS** the largest resident set of any rank. "
         "**ledger MiB/rank**: the memory ledger's prediction per rank (model state + transient gradient buffers) / "
         "the model state it measured (apps/trainer/run/memory.h) - what ZeRO and TP divide.",
         "- Encoder workloads (bert_*) count sequences where image workloads count images; `tp<T>` cells run T ranks "
         "per tensor-parallel group, so N ranks train N/T batches per step, not N. Their **exposed comm** is the "
         "data-parallel gradient collectives only (the step's timeline); TP's per-layer activation all-reduces run "
         "inside the model and show up as compute, while the what-if model counts them as exposed communication - "
         "compare tp rows by their step time.",
         f"- **Marks** next to a cell, explained again under each table: **{OVER}** *oversubscribed* - more ranks than "
         f"the {cores} usable cores, so ranks time-slice and compute per step grows with N (such a cell measures "
         f"the machine, not the strategy); **{NOISY}** *noisy baseline* - the 1-rank images/s spread (max - min over "
         f"median) is above {100 * study.get('noisy_spread', 0.2):.0f} %, and every speedup and efficiency of that "
         f"table is a ratio against it; **{ABOVE}** *efficiency above 100 %* - impossible for weak scaling on the same "
         "cores, so it is noise from a slow baseline repeat." +
         ("" if judged else " With --hostfile the other hosts' cores are unknown here, so no cell is marked "
          "oversubscribed."), ""]
    if study["unavailable"]:
        L += ["Strategies or cells skipped (not in this build, or no such layout):", ""]
        L += [f"- `{s}`: {why}" for s, why in study["unavailable"].items()] + [""]
    keys = sorted({(c["model"], c["batch_per_rank"]) for c in study["cells"]})
    for model, batch in keys:
        cs = [c for c in study["cells"] if c["model"] == model and c["batch_per_rank"] == batch]
        L += [f"## {model}, batch {batch}/rank ({cs[0]['parameters'] / 1e6:.2f} M parameters, backend {cs[-1]['backend']})",
              "", "| strategy | ranks | images/s | per rank | speedup (steady) | speedup (wall) | efficiency | ms/step | "
              "data | compute | exposed comm | overlap | init s | train s | peak tensors MiB | peak RSS MiB | "
              "ledger MiB/rank (predicted / measured) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in cs:
            over = OVER if c["oversubscribed"] else ""
            noisy_base = NOISY if c["baseline_noisy"] else ""
            base_row = c["ranks"] == 1
            above = ABOVE if c["ranks"] > 1 and c["efficiency"] and c["efficiency"]["max"] > 1.0 else ""
            L.append(f"| {c['strategy']} | {mark(c['ranks'], over)} | "
                     f"{mark(fmt(c['images_per_s'], '{:.0f}'), noisy_base if base_row else '')} | "
                     f"{fmt(c['images_per_s_per_rank'], '{:.0f}')} | "
                     f"{mark(fmt(c['speedup'], '{:.2f}'), '' if base_row else noisy_base)} | "
                     f"{fmt(c['speedup_wall'], '{:.2f}')} | "
                     f"{mark(fmt(c['efficiency'], '{:.0f}', True), '' if base_row else noisy_base, above)} | "
                     f"{fmt(c['ms_per_step'])} | {fmt(c['data_ms'])} | {mark(fmt(c['compute_ms']), over)} | "
                     f"{fmt(c['exposed_ms'])} | "
                     f"{fmt(c['overlap'], '{:.0f}', True) if c['ranks'] > 1 else '-'} | {fmt(c['init_s'], '{:.2f}')} | "
                     f"{fmt(c['train_s'], '{:.2f}')} | {fmt(c['peak_tensor_mib'], '{:.0f}')} | "
                     f"{fmt(c['rss_mib_max_rank'], '{:.0f}')} | "
                     f"{fmt(c.get('ledger_predicted_mib'))} / {fmt(c.get('ledger_measured_mib'))} |")
        L.append("")
        notes = table_notes(cs, cores)
        if notes:
            L += notes + [""]
        for p in study.get("plots", []):
            if p.get("model") == model and p.get("batch") == batch:
                L += [f"**{p['title']}** - {p['caption']}", "", f"![{p['title']}]({p['png']})", ""]
    w = study.get("whatif") or {}
    if w.get("rows"):
        net = w["rows"][0]["network"]
        judged_rows = [r for r in w["rows"] if r["within_target"] is not None]
        ok = sum(1 for r in judged_rows if r["within_target"])
        exposed_only = sum(1 for r in judged_rows if r["step_ok"] and not r["exposed_ok"])
        L += ["## What-if model vs this machine", "",
              "`apps/whatif` predicts each cell's step time from the traced 1-rank baseline (its per-bucket ready "
              "times, rescaled to the baseline's median ms/step) and the network fitted to `bench_allreduce` at 2 "
              f"ranks (alpha {net['alpha_us']:.1f} us, bandwidth {net['bandwidth_GBps']:.2f} GB/s), with the ranks "
              f"sharing {cores} cores. The parameter server is predicted with tandem's own whole-tensor partitions "
              "(the busiest server's load), as `dist/extras/parameter_server.h` assigns them.", "",
              f"**Within target** needs both: the predicted step time within {100 * w['target']:.0f} % of the measured "
              "median, and the predicted exposed communication - the model's exposed time plus its wait for the slowest "
              "rank, since tandem's timeline counts that wait as exposed too - within max("
              f"{100 * w['exposed_target']:.0f} % of the measured exposed time, {100 * w['exposed_floor']:.0f} % of the "
              "measured step). A step time that matches while the communication is missed is not an agreement "
              "(`apps/whatif/model.h`, `Target`, gives the reasons for the bound). "
              f"Measured cells within target: {ok} of {len(judged_rows)}"
              + (f"; cells whose step time is within {100 * w['target']:.0f} % but whose exposed communication is "
                 f"off: {exposed_only}" if exposed_only else "") + ".", "",
              "| model | batch | strategy | ranks | predicted ms/step | measured ms/step | step error | predicted exposed "
              "+ wait | measured exposed | exposed bound | within target |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in w["rows"]:
            meas = "-" if r["measured_ms"] is None else f"{r['measured_ms']:.1f}"
            err = "-" if r["error"] is None else f"{100 * r['error']:+.0f}%"
            mex = "-" if r["measured_exposed_ms"] is None else f"{r['measured_exposed_ms']:.1f}"
            bound = "-" if r.get("exposed_bound_ms") is None else f"±{r['exposed_bound_ms']:.1f}"
            pex = f"{r['predicted_exposed_ms']:.1f} + {r.get('predicted_wait_ms', 0.0):.1f}"
            L.append(f"| {r['model']} | {r['batch_per_rank']} | {r['strategy']} | "
                     f"{mark(r['ranks'], OVER if r.get('oversubscribed') else '')} | {r['predicted_ms']:.1f} "
                     f"| {meas} | {err} | {pex} | {mex} | {bound} | {verdict(r)} |")
        if any(r.get("oversubscribed") for r in w["rows"]):
            L += ["", f"{OVER} oversubscribed cells: the model stretches compute by ranks/cores; on a shared machine the "
                  "ranks may get more or less than that share, so these rows test the machine's scheduler as much as "
                  "the model."]
        L += ["", "Predicted N = 1..1024 (every rank with cores of its own, this machine's network; ps with a server "
              "on every rank, each holding whole tensors): " +
              ", ".join(f"[{k.replace('|', ' batch ')}]({v})" for k, v in w["tables"].items()), ""]
        for p in study.get("plots", []):
            if p.get("model") is None:
                L += [f"**{p['title']}** - {p['caption']}", "", f"![{p['title']}]({p['png']})", ""]
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
