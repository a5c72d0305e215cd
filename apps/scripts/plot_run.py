#!/usr/bin/env python3
"""apps/scripts/plot_run.py: training curves from the trainers' JSON-lines run logs, as one PNG.

  python3 apps/scripts/plot_run.py runs/a/log.jsonl [runs/b/log.jsonl ...] [--out curves.png]
          [--x auto|step|samples|time] [--smooth 0.6] [--title TEXT]

Panels, one line per log: training loss (faint: as logged; solid: smoothed) with validation loss as
markers; validation accuracy (top-1 solid, top-5 dashed; the encoder's masked-token accuracy);
throughput (tokens/s where a run logs them, else items/s); learning rate (and the loss scale, on a
log axis, when a run has one). --x picks the horizontal axis of every panel: step, samples (images
or sequences seen: the axis to compare runs whose global batches differ) or time (elapsed seconds).
auto (the default) plots against step and, when the runs' global batches differ, adds a panel of
loss against samples, since equal steps then mean unequal data.

Log schema (one JSON object per line; "event" decides the kind; unknown keys are ignored, a missing
or null optional key leaves a gap):
  {"event":"start","run_id":..,"program":..,"world_size":..,"model":..,"unit":"images"|"tokens","config":{..}}
  {"event":"step","step":..,"epoch":..,"samples":..,"loss":..,"lr":..,"items_per_s":..,"tokens_per_s":..,
   "ms":{"step","data","compute","exposed_comm","host"},"mem_mib":..,"peak_mib":..,"loss_scale":..,
   "grad_norm":..,"elapsed_s":..,"eta_s":..}   (eta_s: training seconds left, as the progress line's
   ETA; the trainers also write top1 (the interval's last batch), overlap, skipped_steps, mfu)
  {"event":"val","step":..,"epoch":..,"samples":..,"top1":..,"top5":..,"loss":..}   (or "masked_acc")
The trainers write it with --log-file (apps/trainer/run/run_log.h; default <checkpoint-dir>/log_<run-id>.jsonl).
  {"event":"checkpoint","step":..,"path":..}   {"event":"end","summary":{..}}
A resumed run appends a second "start" to the same log: records from before it whose step is at or
past the resumed run's first step are dropped (the run rewound to its checkpoint; TensorBoard's purge
does the same), a dotted line marks the resume, and elapsed_s - seconds since the process started,
so it restarts with each process - continues from the last kept record: --x time shows the time
spent on the steps that count.
A line that is not JSON (a log read while it is written) is skipped with a warning.
One huge loss (a spike far off the runs' trend) does not stretch the loss panel: it is drawn as a
triangle on the panel's edge, named in the legend and printed (see robust_range below for the rule).
A log is labelled by its file name (the trainers' default log_<run-id>: by program, model and run
id); when two share a name, by run_id (or parent folder).
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import math
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_run: matplotlib is missing; install python3-matplotlib (apt) or matplotlib (pip)")


class Run:
    """One log: its step and val records in step order, after resume purges."""

    def __init__(self, path):
        self.path = path
        self.run_id, self.unit, self.program, self.model = None, None, None, None
        self.steps, self.vals, self.resumes = [], [], []
        self.skipped_lines = 0
        self.time_offset = 0.0  # elapsed_s restarts with each process: a resumed run adds this
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    self.skipped_lines += 1
                    continue
                if not isinstance(rec, dict):
                    self.skipped_lines += 1
                    continue
                kind = rec.get("event")
                if kind == "start":
                    self.run_id = self.run_id or rec.get("run_id")
                    self.unit = self.unit or rec.get("unit")
                    self.program = self.program or rec.get("program")
                    self.model = self.model or rec.get("model")
                    if self.steps or self.vals:
                        self.resumes.append(len(self.steps))  # resolved to a step below
                elif kind in ("step", "val") and isinstance(rec.get("step"), (int, float)):
                    self._add(kind, rec)
        self.steps.sort(key=lambda r: r["step"])
        self.vals.sort(key=lambda r: r["step"])
        if self.skipped_lines:
            print(f"plot_run: {path}: skipped {self.skipped_lines} line(s) that are not JSON objects", file=sys.stderr)

    def _add(self, kind, rec):
        target = self.steps if kind == "step" else self.vals
        if self.resumes and self.resumes[-1] == len(self.steps) and kind == "step":
            # The first step after a resume: drop what the crashed run logged past its checkpoint.
            first = rec["step"]
            self.steps[:] = [r for r in self.steps if r["step"] < first]
            self.vals[:] = [r for r in self.vals if r["step"] < first]
            self.resumes[-1] = -first  # resolved: a negative marks "resumed at step -value"
            kept = [r["elapsed_s"] for r in self.steps if value(r, "elapsed_s") is not None]
            self.time_offset = kept[-1] if kept else 0.0  # the clock of the work that was kept
            target = self.steps
        if kind == "step" and value(rec, "elapsed_s") is not None and self.time_offset:
            rec = dict(rec, elapsed_s=rec["elapsed_s"] + self.time_offset)
        target.append(rec)

    @property
    def resume_steps(self):
        return [-r for r in self.resumes if r < 0]

    def samples_per_step(self):
        """Global batch: the median of samples/step over the steps that log both."""
        ratios = sorted(r["samples"] / r["step"] for r in self.steps
                        if isinstance(r.get("samples"), (int, float)) and r["step"] > 0)
        return ratios[len(ratios) // 2] if ratios else None


def value(rec, key):
    v = rec.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def xy(records, xkey, ykey):
    """Points with both values present; None where y is missing, so matplotlib leaves a gap."""
    xs, ys = [], []
    for r in records:
        x = value(r, xkey)
        if x is None:
            continue
        xs.append(x)
        ys.append(value(r, ykey))
    return xs, [math.nan if y is None else y for y in ys]


def smooth(ys, weight):
    """TensorBoard's debiased exponential moving average; gaps stay gaps."""
    out, avg, n = [], 0.0, 0
    for y in ys:
        if math.isnan(y):
            out.append(math.nan)
            continue
        avg = weight * avg + (1 - weight) * y
        n += 1
        out.append(avg / (1 - weight ** n) if weight > 0 else y)
    return out


def labels(runs):
    names = []
    for r in runs:
        name = os.path.splitext(os.path.basename(r.path))[0]
        # The trainers' default name, log_<run-id>, says nothing a reader can use: name the program
        # and model instead, with the run id's first 8 characters.
        if r.run_id and name == f"log_{r.run_id}" and r.program:
            name = f"{r.program} {r.model or ''} (run {r.run_id[:8]})".replace("  ", " ")
        names.append(name)
    out = []
    for name, r in zip(names, runs):
        if names.count(name) > 1:
            name = r.run_id or os.path.basename(os.path.dirname(os.path.abspath(r.path))) or name
        out.append(name)
    return out


XKEYS = {"step": ("step", "step"), "samples": ("samples", "samples seen"), "time": ("elapsed_s", "elapsed time (s)")}


def draw(runs, xmode, weight, title):
    batches = {r.samples_per_step() for r in runs} - {None}
    by_samples = xmode == "auto" and len(batches) > 1
    xkey, xlabel = XKEYS["step" if xmode == "auto" else xmode]
    panels = ["loss", "accuracy", "throughput", "lr"] + (["loss_samples"] if by_samples else [])
    cols = 2 if len(panels) <= 4 else 3
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.0 * rows), squeeze=False)
    ax = dict(zip(panels, axes.flat))
    for extra in list(axes.flat)[len(panels):]:
        extra.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = labels(runs)
    units, lrs, has_acc, has_scale = {}, [], False, False  # units: unit -> the axis it is drawn on
    loss_fence = robust_range([xy(r.steps, "step", "loss")[1] for r in runs])
    for i, (run, name) in enumerate(zip(runs, names)):
        c = colors[i % len(colors)]
        # Loss: as logged (faint) and smoothed; validation loss as markers.
        for panel, key in [("loss", xkey)] + ([("loss_samples", "samples")] if by_samples else []):
            x, y = xy(run.steps, key, "loss")
            a = ax[panel]
            label = name
            if panel == "loss_samples" and run.samples_per_step():
                label = f"{name} ({run.samples_per_step():.0f} samples/step)"
            if len(x) > 10 and weight > 0:
                a.plot(x, y, color=c, alpha=0.25, lw=0.8, gid="raw")
                # The smoothed line skips the points off the scale (they are marked instead): one spike
                # of 1e4 would otherwise pull the moving average off the panel for dozens of records.
                kept = [v if loss_fence[0] <= v <= loss_fence[1] or math.isnan(v) else math.nan for v in y]
                a.plot(x, smooth(kept, weight), color=c, lw=1.6, label=label, gid="smoothed")
            else:
                a.plot(x, y, color=c, lw=1.6, label=label, marker="." if len(x) < 30 else None, gid="raw")
            vx, vy = xy(run.vals, key if key != "elapsed_s" else "step", "loss")
            if key == "elapsed_s":  # a val record has no clock: place it at its step's time
                vx, vy = val_times(run, "loss")
            a.plot(vx, vy, ls="none", marker="o", ms=4, mfc="white", color=c, gid="val")
        # Accuracy: top-1 solid, top-5 dashed; the encoder's masked-token accuracy solid.
        for key, ls in (("top1", "-"), ("top5", "--"), ("masked_acc", "-")):
            if any(value(r, key) is not None for r in run.vals):
                has_acc = True
                x, y = val_times(run, key) if xkey == "elapsed_s" else xy(run.vals, xkey, key)
                ax["accuracy"].plot(x, [100 * v for v in y], color=c, ls=ls, marker="o", ms=3,
                                    label=f"{name} {key.replace('masked_acc', 'masked-token')}")
        # Throughput in the run's own unit; a second unit (tokens next to images) gets its own axis.
        key = "tokens_per_s" if any(value(r, "tokens_per_s") for r in run.steps) else "items_per_s"
        unit = "tokens" if key == "tokens_per_s" else (run.unit or "items")
        if unit not in units:
            units[unit] = ax["throughput"] if not units else ax["throughput"].twinx()
            units[unit].set_ylabel(f"{unit}/s" + (" (right axis)" if len(units) > 1 else ""))
            units[unit].set_ylim(bottom=0, auto=True)
        x, y = xy(run.steps, xkey, key)
        units[unit].plot(x, y, color=c, lw=1.2, label=f"{name} ({unit}/s)")
        lrs.append(max([v for v in (value(r, "lr") for r in run.steps) if v] or [0]))
        # LR, and the loss scale on its own axis.
        x, y = xy(run.steps, xkey, "lr")
        ax["lr"].plot(x, y, color=c, lw=1.2, label=name)
        if any(value(r, "loss_scale") for r in run.steps):
            has_scale = True
            if not hasattr(ax["lr"], "_scale_axis"):
                ax["lr"]._scale_axis = ax["lr"].twinx()
                ax["lr"]._scale_axis.set_yscale("log", base=2)
                ax["lr"]._scale_axis.set_ylabel("loss scale (dotted)")
            x, y = xy(run.steps, xkey, "loss_scale")
            ax["lr"]._scale_axis.plot(x, y, color=c, ls=":", lw=1.4, drawstyle="steps-post")
        for s in run.resume_steps:
            xs = resume_x(run, s, xkey)
            for p in panels:
                if p != "loss_samples" and xs is not None:
                    ax[p].axvline(xs, color=c, ls=":", lw=0.9, alpha=0.8)
    clipped = {p: clip_to(ax[p], loss_fence, runs, colors) for p in ("loss", "loss_samples") if p in ax}
    ax["loss"].set_title("training loss (faint: as logged; line: smoothed; o: validation)")
    ax["loss"].set_ylabel("loss")
    ax["accuracy"].set_title("validation accuracy")
    ax["accuracy"].set_ylabel("%")
    if not has_acc:
        ax["accuracy"].text(0.5, 0.5, "no validation records", ha="center", va="center",
                            transform=ax["accuracy"].transAxes, color="0.4")
    ax["throughput"].set_title("throughput")
    for a in units.values():
        a.set_ylim(bottom=0)
    if len(units) > 1:  # one legend for both axes
        h = [l for a in units.values() for l in a.get_legend_handles_labels()[0]]
        ax["throughput"].legend(h, [l.get_label() for l in h], fontsize=7)
    ax["lr"].set_title("learning rate" + (" and loss scale (dotted, right axis)" if has_scale else ""))
    ax["lr"].set_ylabel("lr")
    peaks = [v for v in lrs if v > 0]
    if peaks and max(peaks) > 20 * min(peaks):  # runs whose LRs differ by orders: a log axis shows both
        ax["lr"].set_yscale("log")
        ax["lr"].set_ylabel("lr (log)")
    if by_samples:
        ax["loss_samples"].set_title("training loss against samples seen (the global batches differ)")
        ax["loss_samples"].set_xlabel("samples seen")
        ax["loss_samples"].set_ylabel("loss")
    for p in panels:
        if p != "loss_samples":
            ax[p].set_xlabel(xlabel)
        ax[p].grid(alpha=0.3)
        handles, _ = ax[p].get_legend_handles_labels()
        if handles and not (p == "throughput" and len(units) > 1):
            ax[p].legend(fontsize=7)
    if any(r.resume_steps for r in runs):
        fig.text(0.01, 0.005, "dotted vertical line: the run resumed from a checkpoint there", fontsize=7, color="0.35")
    fig.suptitle(title or ", ".join(names), fontsize=11)
    fig.tight_layout()
    fig.clipped_loss = clipped["loss"]  # for main's note and the tests
    return fig


# Loss outliers. A single huge loss (a bad batch, an overflow the scaler caught a step late) sets the
# y range on its own and flattens every curve into a line at the bottom. A log axis does not cure
# that: the curve (0.3 to 2.3, under a decade) would still take a fifth of a panel spanning 0.3 to
# 1e4, and a log axis hides the differences between runs that a linear one shows. So the panel keeps
# its linear axis and clips to the range of the *trend*: a running median over TREND_WINDOW records
# drops spikes of up to two records but follows a sustained rise (a divergence is data, not an
# outlier, and stays on the scale), and so does the curve's steep start, which the median of a
# window keeps within the margin. Points past the margin are drawn as triangles on the panel's edge,
# the legend gives their count and extreme value, and main prints them.
TREND_WINDOW = 5  # odd; a spike of up to (5 - 1) / 2 = 2 consecutive records is not part of the trend
TREND_MARGIN = 1.0  # the scale reaches one trend-range past the trend: ordinary noise is never clipped


def running_median(ys, window):
    """The median of each record's window (centred; shorter at the ends), gaps skipped."""
    ys = [y for y in ys if not math.isnan(y)]
    h = window // 2
    windows = (sorted(ys[max(0, i - h):i + h + 1]) for i in range(len(ys)))
    return [w[len(w) // 2] for w in windows]


def robust_range(series):
    """(lo, hi): the loss values the panel shows, from each run's trend; (-inf, inf) for too few records."""
    trend = [v for ys in series if sum(not math.isnan(y) for y in ys) >= TREND_WINDOW
             for v in running_median(ys, TREND_WINDOW)]
    if not trend:
        return -math.inf, math.inf
    lo, hi = min(trend), max(trend)
    # A flat trend (range 0) still gets a margin: a tenth of its level (or 1 for a zero loss).
    margin = TREND_MARGIN * max(hi - lo, 0.1 * abs(hi) or 1.0)
    return lo - margin, hi + margin


def clip_to(a, fence, runs, colors):
    """Limits the loss panel to fence when a point lies outside it; marks those points. Returns them."""
    lo, hi = fence
    off = []  # (run index, x, y) of every plotted point outside the fence
    inside = []
    for line in a.get_lines():
        if line.get_gid() not in ("raw", "val", "smoothed"):  # not the resume lines (axes coordinates)
            continue
        for x, y in zip(line.get_xdata(), line.get_ydata()):
            if not isinstance(y, (int, float)) or math.isnan(y):
                continue
            if lo <= y <= hi:
                inside.append(y)
            elif line.get_gid() != "smoothed":  # raw points and val markers; the smoothed line skips them
                off.append((line.get_color(), x, y))
    off = sorted(set(off), key=lambda p: p[1])
    if not off or not inside:
        return []
    pad = 0.05 * (max(inside) - min(inside) or 1.0)
    bottom, top = min(inside) - pad, max(inside) + pad
    a.set_ylim(bottom, top)
    worst = max(off, key=lambda p: abs(p[2]))[2]
    for i, (color, x, y) in enumerate(off):  # the legend (drawn later) names them: no text over the curves
        a.plot([x], [top if y > hi else bottom], ls="none", marker="^" if y > hi else "v", ms=7, color=color,
               clip_on=False, zorder=5, gid="off",
               label=f"off the scale, at the edge: {len(off)} point{'s' if len(off) > 1 else ''} "
                     f"(extreme {worst:.4g})" if i == 0 else None)
    return [(x, y) for _, x, y in off]


def val_times(run, key):
    """A val record's elapsed time: that of the step record at or just before its step."""
    xs, ys = [], []
    for v in run.vals:
        before = [s for s in run.steps if s["step"] <= v["step"] and value(s, "elapsed_s") is not None]
        if before and value(v, key) is not None:
            xs.append(before[-1]["elapsed_s"])
            ys.append(v[key])
    return xs, ys


def resume_x(run, step, xkey):
    if xkey == "step":
        return step
    rec = next((r for r in run.steps if r["step"] >= step and value(r, xkey) is not None), None)
    return value(rec, xkey) if rec else None


def main(argv=None):
    ap = argparse.ArgumentParser(description="Training curves (loss, accuracy, throughput, LR) from JSON-lines "
                                 "run logs, as one PNG (see the file's header for the schema).")
    ap.add_argument("logs", nargs="+", help="JSON-lines logs written by train_imagenet/train_encoder --log-file")
    ap.add_argument("--out", help="PNG to write (default: the first log's path with .png)")
    ap.add_argument("--x", default="auto", choices=["auto", "step", "samples", "time"],
                    help="horizontal axis (auto: step, plus loss vs samples when the global batches differ)")
    ap.add_argument("--smooth", type=float, default=0.6,
                    help="loss smoothing weight in [0, 1) (TensorBoard's; 0: none)")
    ap.add_argument("--title", default=None)
    a = ap.parse_args(argv)
    if not 0 <= a.smooth < 1:
        ap.error("--smooth must be in [0, 1)")
    runs = []
    for path in a.logs:
        if not os.path.isfile(path):
            ap.error(f"{path}: no such file (give the --log-file a trainer wrote)")
        run = Run(path)
        if not run.steps and not run.vals:
            ap.error(f"{path}: no step or val records; is it a trainer's --log-file (JSON lines)?")
        runs.append(run)
    out = a.out or os.path.splitext(a.logs[0])[0] + ".png"
    fig = draw(runs, a.x, a.smooth, a.title)
    if fig.clipped_loss:
        shown = fig.clipped_loss[:5]  # enough to find them in the log; the count says how many more
        xs = ", ".join(f"{x:g} ({y:.4g})" for x, y in shown) + (" ..." if len(fig.clipped_loss) > 5 else "")
        print(f"plot_run: {len(fig.clipped_loss)} loss value(s) far off the runs' trend, drawn on the loss "
              f"panel's edge instead of stretching it: at x = {xs}")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"plot_run: wrote {out} ({len(runs)} run{'s' if len(runs) > 1 else ''}, x = {a.x})")


if __name__ == "__main__":
    main()
