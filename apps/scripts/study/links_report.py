"""apps/scripts/study/links_report.py: links.md (the table) and the plots of the emulated-link study.

  links.md                  per cell: link rate, compute-only ms/step (1 rank, measured right before),
                            measured ms/step, exposed communication and scaling efficiency, beside the
                            what-if's, with its CPU terms (the collectives' host work, dist/'s own
                            copies) and, for DDP, its range over the all-reduce efficiency's launches;
                            the error and whether it is within the 10 % goal; uptime of the
                            machine before and after, and per cell the load average.
  links_vs_measured.png     predicted vs measured ms/step on log axes, one marker per strategy, one
                            colour per link rate, the 10 % band
  links_<model>.png         per model: measured and predicted ms/step against the link rate, one panel
                            per strategy (bars: compute-only time, the floor of every step)
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from links import GOAL, rate_gbit  # noqa: E402


def write(study, out):
    plots = [vs_measured(study, out)] + [per_model(study, m, out) for m in study["grid"]["models"]]
    lines = [f"# Scaling on emulated links: {study['hosts']} host(s) x {study['ranks_per_host']} rank(s)", "",
             f"Created {study['created']} by `study.sh links {study['command']}`.",
             f"Machine: {study['cores']} cores shared with other jobs; ranks "
             f"{'ARE' if study['oversubscribed'] else 'are not'} oversubscribed (one rank per core).",
             f"uptime before: `{study['uptime_before']}`", f"uptime after: `{study.get('uptime_after', '?')}`", "",
             f"Links: tc tbf at the rate on each host's veth, UCX_TLS=tcp,self; what-if alpha = "
             f"{study['alpha_us']:.1f} us (the veth links' own latency, fitted to bench_allreduce_links.json), "
             "--link-gbit = the tc rate (payload 1448/1514 of it), --allreduce-efficiency per rate (MPI's all-reduce "
             "of 8 MiB on that link, 3 issued at once and run back to back as DDP's buckets are, bench_allreduce_<rate>_x3_<i>.json, busbw "
             "over the payload rate; the median of the launches, each launch's in brackets): "
             + ", ".join(efficiency_text(study, r, e) for r, e in study["allreduce_efficiency_in_flight"].items())
             + (" (one at a time, as measured with the sweep: "
                + ", ".join(efficiency_text(study, r, e, "allreduce_efficiency_runs")
                            for r, e in study["allreduce_efficiency"].items()) + ")"
                if study.get("allreduce_efficiency") else "")
             + f"; --host-GBps per cell, else {study.get('host_GBps') or 0:.3f} (the same bench with the links "
             "unlimited: the CPU's own rate of moving bytes, the median of bench_allreduce_unlimited_<i>.json); "
             "--copy-GBps per cell, else " + copy_text(study) + " (that bench's Tensor::copy_ of 64 MiB: the rate "
             "dist/'s own copies are charged at, apps/whatif/model.h host_copy_bytes). "
             "Grid: " + ", ".join(f"{k} {v}" for k, v in study["grid"].items()) + ".", "",
             "host / copies: the prediction's CPU terms, added to compute: the collectives' bytes at --host-GBps, "
             "dist/'s copies beyond the 1-rank step's at --copy-GBps. DDP range: the predicted step at the fastest "
             "and the slowest all-reduce launch. faults/step: the busiest rank's minor page faults per step beyond the "
             "1-rank run's (fresh buffers the kernel zeroes; measured, not in the model).", "",
             "compute: a 1-rank run of the same model made right before the cell (the what-if's compute time, "
             "and the efficiency's baseline). exposed: communication not hidden under compute (the timeline's). "
             f"Goal: the predicted step within {100 * GOAL:.0f} % of the measured one.", "",
             "| model | strategy | rate | compute ms | measured ms | predicted ms | error | exposed ms meas / pred "
             "| host / copies ms | DDP range ms | efficiency meas / pred | faults/step | load (1 min) | within 10 % |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for c in study["cells"]:
        p, m = c["predicted"], c["measured"]
        lines.append(f"| {c['model']} | {c['strategy']} | {c['rate']} | {c['compute']['ms_per_step']:.0f} | "
                     f"{m['ms_per_step']:.0f} | {p['step_ms']:.0f} | {100 * p['step_error']:+.1f} % | "
                     f"{m['exposed_ms']:.0f} / {p['exposed_ms']:.0f} | "
                     f"{p.get('host_cpu_ms', 0):.0f} / {p.get('copy_ms', 0):.0f} | "
                     + ("{:.0f}-{:.0f}".format(*p["step_range_ms"]) if "step_range_ms" in p else "-") + " | "
                     f"{100 * p['measured_efficiency']:.0f} % / "
                     f"{100 * p['efficiency']:.0f} % | "
                     + (f"{p['extra_faults_per_step']:.0f}" if "extra_faults_per_step" in p else "-") + " | "
                     f"{c['load'][0]} | {'yes' if p['within_goal'] else '**no**'} |")
    lines += [f"Not run: {u}." for u in study.get("unavailable", [])]
    ok = sum(c["predicted"]["within_goal"] for c in study["cells"])
    lines += ["", f"Within {100 * GOAL:.0f} %: {ok} of {len(study['cells'])} cells.", "", "## Error per strategy and link", "",
              "| strategy | " + " | ".join(study["grid"]["rates"]) + " |", "|---|" + "---:|" * len(study["grid"]["rates"])]
    for s in study["grid"]["strategies"]:
        row = []
        for r in study["grid"]["rates"]:
            errs = [c["predicted"]["step_error"] for c in study["cells"] if c["strategy"] == s and c["rate"] == r]
            row.append(", ".join(f"{100 * e:+.0f} %" for e in errs) if errs else "-")
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    lines += ["", "(errors in the order of the models: " + ", ".join(study["grid"]["models"]) + ")", "", "## Plots", ""]
    lines += [f"![{p}]({p})" for p in plots]
    with open(os.path.join(out, "links.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def efficiency_text(study, rate, e, key="allreduce_efficiency_in_flight_runs"):
    runs = study.get(key, {}).get(rate)
    text = f"{rate} {e:.2f}" if e else f"{rate} (bench failed: 1)"
    return text + (" [" + ", ".join(f"{x:.2f}" for x in runs) + "]" if runs else " (one launch)")


def copy_text(study):
    if study.get("copy_GBps"):
        return f"{study['copy_GBps']:.2f}"
    if study.get("copy_per_host"):
        return f"{study['copy_per_host']:.1f} x the cell's --host-GBps (the sweep predates the copy bench)"
    return "0 (not measured: not counted)"


def vs_measured(study, out):
    cells = study["cells"]
    fig, ax = plt.subplots(figsize=(6.5, 6))
    lo = 0.8 * min(min(c["measured"]["ms_per_step"], c["predicted"]["step_ms"]) for c in cells)
    hi = 1.25 * max(max(c["measured"]["ms_per_step"], c["predicted"]["step_ms"]) for c in cells)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.fill_between([lo, hi], [lo * (1 - GOAL), hi * (1 - GOAL)], [lo * (1 + GOAL), hi * (1 + GOAL)], color="0.88",
                    label=f"within {100 * GOAL:.0f} %")
    rates = study["grid"]["rates"]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, s in enumerate(study["grid"]["strategies"]):
        for j, r in enumerate(rates):
            cs = [c for c in cells if c["strategy"] == s and c["rate"] == r]
            ax.scatter([c["measured"]["ms_per_step"] for c in cs], [c["predicted"]["step_ms"] for c in cs],
                       marker="os^Dv<>"[i % 7], color=colors[j % 10], s=40)
        ax.plot([], [], "os^Dv<>"[i % 7], color="k", ls="", label=s)  # legend: the shape is the strategy
    for j, r in enumerate(rates):
        ax.plot([], [], "s", color=colors[j % 10], label=f"link {r}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured ms/step")
    ax.set_ylabel("predicted ms/step (apps/whatif, same rate)")
    ax.set_title(f"What-if vs emulated links ({study['hosts']} hosts x {study['ranks_per_host']} rank)\n"
                 + ", ".join(study["grid"]["models"]), fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "links_vs_measured.png"), dpi=110)
    plt.close(fig)
    return "links_vs_measured.png"


def per_model(study, model, out):
    strategies = study["grid"]["strategies"]
    fig, axes = plt.subplots(1, len(strategies), figsize=(3.3 * len(strategies), 3.6), sharey=True)
    axes = axes if len(strategies) > 1 else [axes]
    for ax, s in zip(axes, strategies):
        cs = sorted([c for c in study["cells"] if c["model"] == model and c["strategy"] == s],
                    key=lambda c: rate_gbit(c["rate"]))
        x = [rate_gbit(c["rate"]) for c in cs]
        ax.plot(x, [c["measured"]["ms_per_step"] for c in cs], "o-", label="measured")
        ax.plot(x, [c["predicted"]["step_ms"] for c in cs], "s--", label="what-if")
        ax.plot(x, [c["compute"]["ms_per_step"] for c in cs], "k:", label="compute only (1 rank)")
        for c in cs:
            ax.annotate(f"{100 * c['predicted']['step_error']:+.0f}%", (rate_gbit(c["rate"]), c["predicted"]["step_ms"]),
                        fontsize=8, xytext=(4, 4), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels([c["rate"] for c in cs])
        ax.set_title(s)
        ax.set_xlabel("link rate")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel(f"{model}: ms/step")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    name = f"links_{model}.png"
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return name
