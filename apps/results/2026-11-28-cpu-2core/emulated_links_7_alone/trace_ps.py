"""Traced runs of one model with the parameter server on the emulated 2-host cluster at 10 Gbit/s, and on 1 rank
(the ps cells' recipe), as made for trace_resnet18_ps/ (21:03 UTC). Run as root from the repository root:
    python3 apps/results/2026-11-28-cpu-2core/emulated_links_7_alone/trace_ps.py MODEL OUT"""
import os
import sys
sys.path.insert(0, os.path.join(os.getcwd(), "apps", "scripts", "study"))
import links
model, out = sys.argv[1], sys.argv[2]
a = links.one_cell_args(model, "ps", out)
L = links.Links(a)
L.emulated(model, "ps", "10gbit", "ps_traced", trace=True)
L.local(model, "one_traced", trace=True, recipe_of="ps")
