"""Per step on rank 0 (steady steps: the first 3 and the last left out), the mean time in each "step" range of a
Chrome trace (forward, backward, ps push, optimizer.step, ...) and the communication thread's busy time.
    python3 step_phases.py TRACE [TRACE ...]"""
import collections
import json
import sys


def phases(path, pid=0):
    t = json.load(open(path))
    ev = [e for e in (t["traceEvents"] if isinstance(t, dict) else t) if e.get("ph") == "X" and e.get("pid") == pid]
    steps = [e for e in ev if e.get("cat") == "step"]
    fw = sorted((e for e in steps if e["name"] == "forward"), key=lambda e: e["ts"])
    per = collections.defaultdict(float)
    n = 0
    for i in range(3, len(fw) - 1):
        a, b = fw[i]["ts"], fw[i + 1]["ts"]
        n += 1
        per["step"] += (b - a) / 1e3
        for e in steps:
            if a <= e["ts"] < b:
                per[e["name"]] += e["dur"] / 1e3
        per["comm thread busy"] += sum(e["dur"] for e in ev if e["tid"] == 1 and a <= e["ts"] < b) / 1e3
    return {k: v / n for k, v in per.items()}


for path in sys.argv[1:]:
    print(path + ": " + ", ".join(f"{k} {v:.1f}" for k, v in phases(path).items()) + " (ms/step)")
