"""apps/scripts/study/run.py: runs a study grid and writes study.json, study.md and the plots.

Called by apps/scripts/study.sh (see its header for the options). The grid is models x batch sizes
x strategies x rank counts; 1 rank is each (model, batch)'s baseline. Every repeat runs the baseline
and all cells back to back, and speedups are taken against the baseline of the same repeat: on a
shared, noisy machine a ratio of two runs made a minute apart is steadier than either rate.
Weak scaling: --batch is per rank, so N ranks process N times the images in the same steps.

Honesty marks (report.py prints them next to the cells): a cell is *oversubscribed* when its ranks
outnumber the cores this study may use (usable_cores: the CPU affinity mask and a cgroup CPU quota,
not the machine's total), and a (model, batch)'s baseline is *noisy* when its images/s spread
(max - min) / median over the repeats exceeds NOISY_SPREAD. Both are judged on this machine only:
with --hostfile the ranks spread over hosts whose cores this script cannot see, so neither mark is set
for oversubscription.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grid  # noqa: E402
import plots  # noqa: E402
import report  # noqa: E402
import validate  # noqa: E402

# A baseline whose repeats spread by more than this (max - min over median images/s) is marked noisy:
# every speedup and efficiency of its table is a ratio against it. 20 % is the threshold; a
# quiet machine repeats within a few per cent.
NOISY_SPREAD = 0.20


def parse():
    ap = argparse.ArgumentParser(description="tandem scaling study (see apps/scripts/study.sh)")
    ap.add_argument("--models", default="resnet_tiny")
    ap.add_argument("--strategies", default="ddp,ddp_no_overlap,ddp_no_bucketing,ddp_bf16,ddp_b0.25,zero1,zero2,ps")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--batches", default="32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--hostfile", default=None)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:  # < 10 minutes on 2 shared cores: one model, four strategies, 1-4 ranks, 2 repeats
        a.strategies, a.ranks, a.batches, a.repeats, a.steps = "ddp,ddp_no_overlap,ddp_bf16,ps", "1,2,4", "16", 2, 24
    return a


def load(path):
    with open(path) as f:
        return json.load(f)


def measures(m, launch):
    """One run's measures from its --metrics JSON and the launcher's clock."""
    ips = m["images_per_s"] if "images_per_s" in m else m["sequences_per_s"]  # train_encoder: sequences
    total = 1000.0 * m["global_batch"] / ips if ips else 0.0
    ledger = m.get("memory_ledger", {})
    mib = 1.0 / 1048576.0
    c = m.get("comm", {})
    exposed = c.get("exposed_ms_per_step", 0.0) if m["world_size"] > 1 else 0.0
    data = m.get("last_interval_ms_per_step", {}).get("data", 0.0)
    return {"images_per_s": ips, "images_per_s_per_rank": ips / m["world_size"], "ms_per_step": total,
            "data_ms": data, "exposed_ms": exposed, "compute_ms": max(0.0, total - data - exposed),
            "comm_ms": c.get("comm_ms_per_step", 0.0) if m["world_size"] > 1 else 0.0,
            "overlap": c.get("overlap", 1.0) if m["world_size"] > 1 else None,
            "init_s": m["init_s"], "train_s": m["train_s"], "wall_s": m["wall_s"], "launch_s": launch["launch_s"],
            "peak_tensor_mib": m.get("memory", {}).get("peak_bytes", 0) / 1048576.0,
            "rss_mib_per_rank": launch["rss_mib_per_rank"], "images": m["global_batch"] * m["steps_this_run"],
            "backend": m["backend"], "parameters": m["parameters"],
            # The memory ledger per rank: predicted model state + transient gradients, and the measured
            # model state (apps/trainer/run/memory.h), in MiB.
            "ledger_predicted_mib": (ledger.get("predicted_bytes", {}).get("model_state", 0) +
                                     ledger.get("predicted_bytes", {}).get("transient", 0)) * mib if ledger else None,
            "ledger_measured_mib": ledger.get("measured_bytes", {}).get("model_state", 0) * mib if ledger else None}


def summarise(values):
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def main():
    a = parse()
    os.makedirs(a.out, exist_ok=True)
    models, strategies = a.models.split(","), a.strategies.split(",")
    ranks = sorted({int(r) for r in a.ranks.split(",")} - {1})
    batches = [int(b) for b in a.batches.split(",")]
    load_before = open("/proc/loadavg").read().split()[:3]
    cores, cores_how = usable_cores()
    runner = grid.Runner(a.build, a.out, a.steps, a.image_size, a.hostfile, a.device)
    runs = {}  # (model, batch, strategy, n) -> list of measures; strategy "-" for the 1-rank baseline
    total = len(models) * len(batches) * (1 + len(strategies) * len(ranks)) * a.repeats
    done = 0
    for rep in range(a.repeats):
        for model in models:
            for batch in batches:
                cells = [("-", 1)] + [(s, n) for s in strategies for n in ranks]
                for s, n in cells:
                    done += 1
                    tag = f"{model}_b{batch}_{'base' if s == '-' else s}_n{n}_r{rep}"
                    why = None if s == "-" else grid.skip_reason(model, s, n)
                    if why:
                        runner.unavailable[f"{s} ({model}, {n} ranks)"] = why
                        print(f"[{done}/{total}] {tag}: skipped, {why}", flush=True)
                        continue
                    print(f"[{done}/{total}] {tag}", flush=True)
                    r = runner.run(model, "ddp" if s == "-" else s, n, batch, tag)
                    if r is None:
                        print(f"    unavailable: {runner.unavailable.get(s, '')}", flush=True)
                        continue
                    runs.setdefault((model, batch, s, n), []).append(measures(load(os.path.join(a.out, r["metrics"])), r))
    # Traced runs (not counted in the measures): each baseline feeds the what-if model, and the
    # largest ddp cell draws the per-bucket timeline of one step.
    traces = {}
    for model in models:
        for batch in batches:
            for s, n in [("-", 1)] + ([("ddp", max(ranks))] if ranks and "ddp" in strategies else []):
                tag = f"{model}_b{batch}_{'base' if s == '-' else s}_n{n}_traced"
                print(f"[trace] {tag}", flush=True)
                if runner.run(model, "ddp" if s == "-" else s, n, batch, tag, trace=True):
                    traces[f"{model}|{batch}|{s}|{n}"] = {"trace": os.path.join("runs", tag + ".trace.json"),
                                                          "metrics": os.path.join("runs", tag + ".json")}
    cells = aggregate(runs, a.repeats, None if a.hostfile else cores)
    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    study = {"created": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit,
             "command": " ".join(sys.argv[1:]), "host": platform.node(), "cores": cores, "cores_how": cores_how,
             "machine_cores": os.cpu_count(), "hostfile": a.hostfile, "noisy_spread": NOISY_SPREAD,
             "cpu": cpu_name(), "load_before": load_before, "device": a.device,
             "grid": {"models": models, "strategies": strategies, "ranks": [1] + ranks, "batches": batches,
                      "repeats": a.repeats, "steps": a.steps, "image_size": a.image_size},
             "unavailable": runner.unavailable, "cells": cells, "traces": traces}
    study["whatif"] = validate.check(study, a.build, a.out)
    study["load_after"] = open("/proc/loadavg").read().split()[:3]
    with open(os.path.join(a.out, "study.json"), "w") as f:
        json.dump(study, f, indent=2)
    study["plots"] = plots.draw_all(study, a.out)
    report.write(study, os.path.join(a.out, "study.md"))
    print(f"study: wrote {a.out}/study.md, study.json and {len(study['plots'])} plots")


def aggregate(runs, repeats, cores):
    """Median and min-max per cell; speedups against the same repeat's 1-rank baseline.

    Two speedups can be read off a cell: the median of the per-repeat ratios (`speedup`, what the
    tables show: each repeat's cell against that repeat's baseline, so load drift between repeats
    cancels) and the ratio of the two median images/s (`images_ratio`). They agree when the repeats
    agree; when they differ, the difference is the repeats' disagreement, and report.py says so.
    `cores`: usable cores on this machine (None: not judged, e.g. --hostfile).
    """
    cells = []
    for (model, batch, s, n), rs in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] != "-",
                                                                         kv[0][2], kv[0][3])):
        base = runs.get((model, batch, "-", 1), [])
        speed, wall_speed = [], []
        for i, r in enumerate(rs):
            if i < len(base):
                speed.append(r["images_per_s"] / base[i]["images_per_s"])
                # Same steps, n times the images: n * wall(1) / wall(n), wall from launch to exit.
                wall_speed.append(n * base[i]["launch_s"] / r["launch_s"])
        cell = {"model": model, "batch_per_rank": batch, "strategy": "1 rank" if s == "-" else s, "ranks": n,
                "repeats": len(rs), "backend": rs[0]["backend"], "parameters": rs[0]["parameters"]}
        for k in ["images_per_s", "images_per_s_per_rank", "ms_per_step", "data_ms", "compute_ms", "exposed_ms",
                  "comm_ms", "overlap", "init_s", "train_s", "wall_s", "launch_s", "peak_tensor_mib",
                  "ledger_predicted_mib", "ledger_measured_mib"]:
            cell[k] = summarise([r[k] for r in rs])
        cell["rss_mib_max_rank"] = summarise([max(r["rss_mib_per_rank"]) if r["rss_mib_per_rank"] else None for r in rs])
        cell["speedup"] = summarise(speed)
        cell["efficiency"] = summarise([x / n for x in speed])
        cell["speedup_wall"] = summarise(wall_speed)
        b = summarise([r["images_per_s"] for r in base])
        cell["images_ratio"] = cell["images_per_s"]["median"] / b["median"] if b and b["median"] else None
        cell["spread"] = spread(cell["images_per_s"])
        cell["noisy"] = cell["spread"] > NOISY_SPREAD
        cell["baseline_noisy"] = bool(b) and spread(b) > NOISY_SPREAD
        cell["oversubscribed"] = cores is not None and n > cores
        cells.append(cell)
    return cells


def spread(summary):
    """(max - min) / median of a summary: 0.2 means the repeats span 20 % of their median."""
    return (summary["max"] - summary["min"]) / summary["median"] if summary and summary["median"] else 0.0


def usable_cores():
    """(cores, how): the cores this process may run on - its affinity mask, lowered by a cgroup v2
    CPU quota (cpu.max) when one is set - which is what mpiexec's ranks share. os.cpu_count() counts
    the machine's cores, which a container or taskset may not grant."""
    try:
        n, how = len(os.sched_getaffinity(0)), "CPU affinity mask"
    except (AttributeError, OSError):
        n, how = os.cpu_count() or 1, "os.cpu_count()"
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            q = max(1, int(-(-int(quota) // int(period))))  # a quota of 1.5 cores lets 2 run, at 75 %
            if q < n:
                n, how = q, f"cgroup CPU quota ({quota}/{period} us)"
    except (OSError, ValueError):
        pass
    return n, how


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
