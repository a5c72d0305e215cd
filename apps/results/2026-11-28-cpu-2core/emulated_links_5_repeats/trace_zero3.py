"""Traced runs of one model on the emulated 2-host cluster at 10 Gbit/s (ZeRO-3 and DDP) and on 1 rank,
as made for zero3_trace/ (resnet50) and zero3_trace_bert/ (bert_small), through the study's own Links
(apps/scripts/study/links.py). Run as root from the repository root:
    python3 apps/results/2026-11-28-cpu-2core/emulated_links_5_repeats/trace_zero3.py MODEL OUT
The traces land in OUT/runs/<zero3|ddp|one>_traced.trace.json."""
import os
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "apps", "scripts", "study"))
import links  # noqa: E402

model, out = sys.argv[1], sys.argv[2]
a = links.one_cell_args(model, "zero3", out)
L = links.Links(a)
for strategy in ("zero3", "ddp"):
    L.emulated(model, strategy, "10gbit", f"{strategy}_traced", trace=True)
L.local(model, "one_traced", trace=True)
