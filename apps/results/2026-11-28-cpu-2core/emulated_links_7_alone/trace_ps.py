"""Traced runs of one model with the parameter server on the emulated 2-host cluster at 10 Gbit/s, and on 1 rank
(the ps cells' recipe), as made for trace_resnet18_ps/ (21:03 UTC). Run as root from the repository root:
    python3 apps/results/2026-11-28-cpu-2core/emulated_links_7_alone/trace_ps.py MODEL OUT"""
import argparse, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "apps", "scripts", "study"))
import links
model, out = sys.argv[1], sys.argv[2]
a = argparse.Namespace(models=model, strategies="ps", rates="10gbit", hosts=2, ranks_per_host=1, batch=8,
                       encoder_batch=4, image_size=32, seq_len=32, steps=12, build="build-cpu", out=out,
                       predict_only=False, copy_per_host=0)
L = links.Links(a)
L.emulated(model, "ps", "10gbit", "ps_traced", trace=True)
L.local(model, "one_traced", trace=True, recipe_of="ps")
