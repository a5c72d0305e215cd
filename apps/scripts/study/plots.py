"""apps/scripts/study/plots.py: the study's pictures, each as PNG and SVG.

  scaling_<model>_b<batch>   images/s and scaling efficiency vs ranks, one line per strategy
  split_<model>_b<batch>     ms/step per cell, stacked: data wait, compute, exposed communication
  timeline_<model>_b<batch>  one steady step of the traced N-rank ddp run, per rank: forward,
                             backward and optimizer on the compute row, each bucket's all-reduce
                             (launch to finish) on the comm row - dist/README.md's drawing, from data
  whatif_vs_measured         predicted vs measured ms/step, with the 15 % band; a hollow marker is a
                             cell whose exposed communication missed its bound (not within target)
Oversubscribed rank counts (ranks > usable cores) are shaded and labelled on the scaling plot and
marked on the split plot; a noisy baseline is named in the scaling plot's title (run.py's marks).
"""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def save(fig, out, name):
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out, f"{name}.{ext}"), dpi=110)
    plt.close(fig)
    return {"png": f"{name}.png", "svg": f"{name}.svg"}


def med(c, k):
    return c[k]["median"] if c.get(k) else 0.0


def scaling(cells, model, batch, out):
    base = next(c for c in cells if c["ranks"] == 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    strategies = sorted({c["strategy"] for c in cells if c["ranks"] > 1})
    nmax = max(c["ranks"] for c in cells)
    ax1.plot([1, nmax], [med(base, "images_per_s"), nmax * med(base, "images_per_s")], "k:", label="ideal (N x 1 rank)")
    ax2.axhline(100, color="k", ls=":", label="ideal")
    for i, s in enumerate(strategies):
        cs = [base] + sorted([c for c in cells if c["strategy"] == s], key=lambda c: c["ranks"])
        x = [c["ranks"] for c in cs]
        y = [med(c, "images_per_s") for c in cs]
        lo = [y[k] - c["images_per_s"]["min"] for k, c in enumerate(cs)]
        hi = [c["images_per_s"]["max"] - y[k] for k, c in enumerate(cs)]
        ax1.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, color=COLORS[i % 10], label=s)
        e = [100.0] + [100 * med(c, "efficiency") for c in cs[1:]]
        elo = [0] + [100 * (med(c, "efficiency") - c["efficiency"]["min"]) for c in cs[1:]]
        ehi = [0] + [100 * (c["efficiency"]["max"] - med(c, "efficiency")) for c in cs[1:]]
        ax2.errorbar(x, e, yerr=[elo, ehi], marker="o", capsize=3, color=COLORS[i % 10], label=s)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({c["ranks"] for c in cells}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("ranks")
        ax.grid(alpha=0.3)
    ax1.set_ylabel("images/s (all ranks; median, bars min-max)")
    ax1.set_title(f"{model}, batch {batch}/rank: throughput")
    over = sorted({c["ranks"] for c in cells if c.get("oversubscribed")})
    for ax in (ax1, ax2):  # ranks > usable cores: the cores time-slice, the curve measures the machine
        if over:
            lim = ax.get_xlim()
            ax.axvspan(min(over) / 2 ** 0.5, max(over) * 2 ** 0.5, color="0.9", zorder=0)
            ax.set_xlim(lim)
    if over:
        ax2.text(min(over), 5, "oversubscribed\n(ranks > cores)", fontsize=7, color="0.35", ha="center")
    emax = max([100 * c["efficiency"]["max"] for c in cells if c["ranks"] > 1 and c.get("efficiency")] + [100])
    ax2.set_ylabel("scaling efficiency (%)")
    ax2.set_ylim(0, max(115, emax + 10))  # never clip an efficiency above 100 %: it is a warning sign
    ax2.set_title("efficiency = speedup / ranks")
    if base.get("baseline_noisy"):
        ax1.set_title(f"{model}, batch {batch}/rank: throughput\n(noisy 1-rank baseline: spread "
                      f"{100 * base['spread']:.0f} %; ratios inherit it)", fontsize=9)
    ax1.legend(fontsize=8)
    return save(fig, out, f"scaling_{model}_b{batch}")


def split(cells, model, batch, out):
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(cells) + 2), 4.2))
    labels = [("1 rank" if c["ranks"] == 1 else f"{c['strategy']}\n{c['ranks']} ranks") +
              ("\n(oversub.)" if c.get("oversubscribed") else "") for c in cells]
    x = range(len(cells))
    bottom = [0.0] * len(cells)
    for k, name, col in [("data_ms", "data wait", "#bbbbbb"), ("compute_ms", "compute", COLORS[0]),
                         ("exposed_ms", "exposed comm", COLORS[3])]:
        v = [med(c, k) for c in cells]
        ax.bar(x, v, bottom=bottom, label=name, color=col)
        bottom = [b + y for b, y in zip(bottom, v)]
    for i, c in enumerate(cells):
        if c["ranks"] > 1 and c.get("overlap"):
            ax.text(i, bottom[i], f"{100 * c['overlap']['median']:.0f}% hidden", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("ms per step (median)")
    ax.set_title(f"{model}, batch {batch}/rank: where a step's time goes (label: share of comm hidden by backward)")
    ax.legend(fontsize=8)
    return save(fig, out, f"split_{model}_b{batch}")


def timeline(trace_path, model, batch, out):
    with open(trace_path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    ranks = sorted({e["pid"] for e in ev})
    fwd0 = sorted(e["ts"] for e in ev if e["pid"] == 0 and e["name"] == "forward")
    if len(fwd0) < 4:
        return None
    # A steady step: the median-length one among the later half.
    steps = [(fwd0[i + 1] - fwd0[i], i) for i in range(len(fwd0) // 2, len(fwd0) - 1)]
    _, i = sorted(steps)[len(steps) // 2]
    t0, t1 = fwd0[i], fwd0[i + 1]
    fig, ax = plt.subplots(figsize=(11, 1.2 + 1.1 * len(ranks)))
    yt, yl = [], []
    for r in ranks:
        base = 2 * (len(ranks) - 1 - r)
        mine = [e for e in ev if e["pid"] == r and t0 - 5e3 <= e["ts"] < t1]
        starts = sorted(e["ts"] for e in mine if e["name"] == "forward")
        o = min(starts, key=lambda s: abs(s - t0)) if starts else t0  # this rank's step start
        mine = [e for e in mine if e["ts"] >= o]
        for name, col in [("forward", COLORS[2]), ("backward", COLORS[0]), ("optimizer.step", COLORS[4])]:
            for e in mine:
                if e["name"] == name and e["ts"] - o < (t1 - t0):
                    ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (base + 1.1, 0.7), color=col,
                                   label=name if r == 0 else None)
        b = sorted([e for e in mine if e["name"].startswith("allreduce bucket") and e["ts"] - o < (t1 - t0)],
                   key=lambda e: e["ts"])
        for e in b:
            k = int(e["name"].split()[-1])
            ax.broken_barh([((e["ts"] - t0) / 1e3, max(e["dur"], 1) / 1e3)], (base + 0.15, 0.7),
                           color=("#d62728", "#ff7f0e", "#e377c2", "#bcbd22")[k % 4], edgecolor="k", lw=0.3)
            ax.text((e["ts"] - t0 + e["dur"] / 2) / 1e3, base + 0.5, str(k), ha="center", va="center", fontsize=6)
            ax.plot([(e["ts"] - t0) / 1e3], [base + 0.9], "kv", ms=3, label="launch" if r == 0 and k == 0 else None)
            ax.plot([(e["ts"] + e["dur"] - t0) / 1e3], [base + 0.1], "r^", ms=3,
                    label="finish" if r == 0 and k == 0 else None)
        for e in mine:  # per-bucket ready marks, when the trace has them ("bucket <i> ready")
            if e["name"].startswith("bucket ") and e["name"].endswith(" ready"):
                ax.plot([(e["ts"] - t0) / 1e3], [base + 1.45], "g|", ms=10,
                        label="ready" if r == 0 and e["name"] == "bucket 0 ready" else None)
        yt += [base + 0.5, base + 1.45]
        yl += [f"rank {r} comm", f"rank {r} compute"]
    ax.set_yticks(yt)
    ax.set_yticklabels(yl, fontsize=8)
    ax.set_xlabel("ms since rank 0's forward started (one steady step)")
    ax.set_title(f"{model}, batch {batch}/rank, {len(ranks)} ranks (ddp): buckets' all-reduces (numbered, launch v to "
                 "finish ^) against forward/backward", fontsize=9)
    # Outside the axes, right of them: every row holds data at some x (forward starts at 0 on the top row,
    # the optimizer ends at the right), so no place inside covers nothing; tight_layout makes room.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, out, f"timeline_{model}_b{batch}")


def whatif_vs_measured(rows, target, out):
    """Hollow markers: the step time may sit in the band, but the exposed communication missed its bound."""
    rows = [r for r in rows if r["measured_ms"]]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 5))
    hi = 1.1 * max(max(r["measured_ms"], r["predicted_ms"]) for r in rows)
    ax.plot([0, hi], [0, hi], "k-", lw=0.8, label="prediction = measurement")
    ax.fill_between([0, hi], [0, hi * (1 - target)], [0, hi * (1 + target)], color="0.85",
                    label=f"within {100 * target:.0f} %")
    strategies = sorted({r["strategy"] for r in rows})
    for i, s in enumerate(strategies):
        rs = [r for r in rows if r["strategy"] == s]
        for hollow in (False, True):
            sel = [r for r in rs if (r.get("exposed_ok") is False) == hollow]
            if sel:
                ax.scatter([r["measured_ms"] for r in sel], [r["predicted_ms"] for r in sel], marker="os^Dv<>"[i % 7],
                           label=s + (" (exposed comm off)" if hollow else ""),
                           facecolors="none" if hollow else COLORS[i % 10], edgecolors=COLORS[i % 10])
        for r in rs:
            ax.annotate(f"N={r['ranks']}", (r["measured_ms"], r["predicted_ms"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xlim(0, hi)
    ax.set_ylim(0, hi)
    ax.set_xlabel("measured ms/step (median)")
    ax.set_ylabel("predicted ms/step (apps/whatif)")
    ax.set_title("What-if model vs this machine")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save(fig, out, "whatif_vs_measured")


def draw_all(study, out):
    made = []
    for model, batch in sorted({(c["model"], c["batch_per_rank"]) for c in study["cells"]}):
        cs = [c for c in study["cells"] if c["model"] == model and c["batch_per_rank"] == batch]
        if any(c["ranks"] > 1 for c in cs):
            made.append(dict(scaling(cs, model, batch, out), model=model, batch=batch, title="Scaling",
                             caption="throughput and efficiency against ranks, one line per strategy"))
        made.append(dict(split(cs, model, batch, out), model=model, batch=batch, title="ms/step split",
                         caption="data wait, compute and exposed communication per cell (medians)"))
        for key, t in study["traces"].items():
            m, b, s, n = key.split("|")
            if m == model and int(b) == batch and s == "ddp":
                p = timeline(os.path.join(out, t["trace"]), model, batch, out)
                if p:
                    made.append(dict(p, model=model, batch=batch, title="One step, per bucket",
                                     caption=f"a steady step of the traced {n}-rank ddp run, from its Chrome trace "
                                     f"({t['trace']}, opens in Perfetto)"))
    w = study.get("whatif") or {}
    p = whatif_vs_measured(w.get("rows", []), w.get("target") or 0.15, out)
    if p:
        made.append(dict(p, model=None, batch=None, title="What-if vs measured",
                         caption="each point a (strategy, ranks) cell; hollow: its exposed communication missed "
                                 "the bound, so it is not within target even inside the band"))
    return made
