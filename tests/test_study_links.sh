#!/usr/bin/env bash
# tests/test_study_links.sh: apps/scripts/study/links.py --predict-only on a copy of a committed sweep
# (apps/results/2026-11-28-cpu-2core/emulated_links_2), with the built whatif: the table prints the
# prediction's host and copy terms, a sweep without the copy bench gets --copy-per-host x host_GBps,
# the all-reduce efficiency's launches give each DDP cell a range around its prediction (the median
# launch), and the parameter server's host term is the one-way one (S / host_GBps at one server);
# links_repeats.py groups the launches of a cell across sweeps and judges the medians; a measured
# push-and-pull efficiency reaches the PS cells as --ps-efficiency.
# Exits 77 (ctest: Skipped) when no python3 here has matplotlib.
#   bash tests/test_study_links.sh BUILD_DIR [OUT_DIR]
set -euo pipefail
src=${TANDEM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
build=${1:?usage: test_study_links.sh BUILD_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import matplotlib" 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "test_study_links: no python3 with matplotlib (apt install python3-matplotlib): skipped"; exit 77; }
rm -rf "$out" && mkdir -p "$out"
cp -r "$src/apps/results/2026-11-28-cpu-2core/emulated_links_2/." "$out/"
"$py" - "$out/links.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
# Three launches at 1 Gbit/s, one at 10, with DDP's buckets in flight (links.py IN_FLIGHT); without
# these links.py would bench the links itself.
s["allreduce_efficiency_in_flight_runs"] = {"1gbit": [0.6, 0.97, 0.78], "10gbit": [0.47]}
s["allreduce_efficiency_in_flight"] = {"1gbit": 0.78, "10gbit": 0.47}
json.dump(s, open(sys.argv[1], "w"))
PY
"$py" "$src/apps/scripts/study/links.py" --build "$build" --out "$out" --predict-only --copy-per-host 5 > "$out/log" 2>&1 ||
  { cat "$out/log"; echo "FAIL: links.py --predict-only"; exit 1; }
"$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "links.json")))
md = open(os.path.join(out, "links.md")).read()
assert "| host / copies ms | DDP range ms |" in md and "1gbit 0.78 [0.60, 0.97, 0.78]" in md, md[:2000]
cells = {c["tag"]: c for c in s["cells"]}
for c in s["cells"]:
    p = c["predicted"]
    assert p["copy_GBps"] == 5 * c["host_GBps"], (c["tag"], p["copy_GBps"])
    assert p["copy_ms"] > 0 and p["host_cpu_ms"] > 0, c["tag"]
    if c["strategy"] == "ddp" and c["rate"] == "1gbit":
        fast, slow = p["step_range_ms"]
        assert fast < p["step_ms"] < slow, (c["tag"], fast, p["step_ms"], slow)
    else:
        assert "step_range_ms" not in p, c["tag"]
# The parameter server, one server at N = 2: rank 0 receives S and sends S, 2S at 2 x host_GBps.
ps = cells["resnet18_ps_10gbit_2x1"]
w = json.load(open(os.path.join(out, "whatif", "resnet18_ps_10gbit_2x1.json")))
S = sum(b["bytes"] for b in w["inputs"]["buckets"])
assert abs(ps["predicted"]["host_cpu_ms"] - S / (ps["host_GBps"] * 1e9) * 1e3) < 0.01, ps["predicted"]["host_cpu_ms"]
# ZeRO-2 at N = 2 copies 3S beyond the 1-rank step.
z2 = cells["resnet18_zero2_10gbit_2x1"]
assert abs(z2["predicted"]["copy_ms"] - 3 * S / (5 * z2["host_GBps"] * 1e9) * 1e3) < 0.01, z2["predicted"]["copy_ms"]
print(f"links.py --predict-only: {len(s['cells'])} cells, PS host {ps['predicted']['host_cpu_ms']:.1f} ms, "
      f"ZeRO-2 copies {z2['predicted']['copy_ms']:.1f} ms")
PY
# links_repeats.py: the same sweep given twice is two launches of each cell, with the medians of one.
"$py" "$src/apps/scripts/study/links_repeats.py" --out "$out/repeats" "$out" "$out" > "$out/repeats.log" 2>&1 ||
  { cat "$out/repeats.log"; echo "FAIL: links_repeats.py"; exit 1; }
"$py" - "$out" <<'PY'
import csv, json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "links.json")))
rows = {(r["model"], r["strategy"], r["rate"]): r for r in csv.DictReader(open(os.path.join(out, "repeats", "repeats.csv")))}
assert len(rows) == len(s["cells"]), (len(rows), len(s["cells"]))
for c in s["cells"]:
    r = rows[(c["model"], c["strategy"], c["rate"])]
    assert r["launches"] == "2", r
    assert abs(float(r["error"]) - c["predicted"]["step_error"]) < 1e-3, (r["error"], c["predicted"]["step_error"])
    assert (r["within_goal"] == "True") == c["predicted"]["within_goal"], r
md = open(os.path.join(out, "repeats", "repeats.md")).read()
assert "cells within 10 %" in md and os.path.getsize(os.path.join(out, "repeats", "repeats.png")) > 10000, md[:500]
print(f"links_repeats.py: {len(rows)} cells, 2 launches each")
PY
# A measured push-and-pull efficiency (links.py measure_rates; here written in) reaches the PS cells'
# what-if as --ps-efficiency, which then charges no host work; --predict-only without --measure-ps
# runs no bench.
"$py" - "$out/links.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["ps_efficiency"] = {"10gbit": 0.8}
json.dump(s, open(sys.argv[1], "w"))
PY
"$py" "$src/apps/scripts/study/links.py" --build "$build" --out "$out" --predict-only --copy-per-host 5 > "$out/log_ps" 2>&1 ||
  { cat "$out/log_ps"; echo "FAIL: links.py --predict-only with a PS efficiency"; exit 1; }
"$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
cells = {c["tag"]: c for c in json.load(open(os.path.join(out, "links.json")))["cells"]}
w = json.load(open(os.path.join(out, "whatif", "resnet18_ps_10gbit_2x1.json")))
assert w["inputs"]["network"]["ps_efficiency"] == 0.8, w["inputs"]["network"]
assert cells["resnet18_ps_10gbit_2x1"]["predicted"]["host_cpu_ms"] == 0, cells["resnet18_ps_10gbit_2x1"]["predicted"]
others = [t for t in cells if "_ps_" not in t]
for t in others:
    n = json.load(open(os.path.join(out, "whatif", t + ".json")))["inputs"]["network"]
    assert n["ps_efficiency"] == 0, (t, n)
print(f"links.py --ps-efficiency: PS cell at 0.8, {len(others)} other cells at 0")
PY
echo "test_study_links: all checks passed ($out)"
