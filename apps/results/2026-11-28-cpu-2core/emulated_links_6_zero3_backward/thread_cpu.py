"""Per-thread CPU time and context switches of a training run on the emulated 2-host cluster at 10 Gbit/s
(or on 1 rank), as made for thread_cpu/ (2026-11-28, 20:17-20:23 UTC). Run as root from the repository root:
    python3 <this folder>/thread_cpu.py run MODEL STRATEGY OUT [STEPS]   (STRATEGY one: 1 rank, no link)
    python3 <this folder>/thread_cpu.py report OUT [OUT ...]
`run` samples /proc/<pid>/task/<tid>/{stat,status} of every train_imagenet / train_encoder process every
0.2 s while the study's own Links (apps/scripts/study/links.py) runs the cell, into OUT/cpu_samples.json.
`report` takes the samples between 45 % and 95 % of the run (steady steps) and prints, per thread, its CPU
time (user + system), voluntary and involuntary context switches per step."""
import json
import os
import sys
import threading
import time


def run(model, strategy, out, steps):
    sys.path.insert(0, os.path.join(os.getcwd(), "apps", "scripts", "study"))
    import links  # noqa: E402
    a = links.one_cell_args(model, strategy, out, steps=steps)
    L = links.Links(a)
    exe = "train_encoder" if model.startswith("bert") else "train_imagenet"
    samples, stop = [], threading.Event()

    def sample():
        hz = os.sysconf("SC_CLK_TCK")
        while not stop.is_set():
            snap = {}
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    if exe not in open(f"/proc/{pid}/comm").read():
                        continue
                    for tid in os.listdir(f"/proc/{pid}/task"):
                        st = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                        status = open(f"/proc/{pid}/task/{tid}/status").read()
                        field = lambda k: int(status.split(k + ":")[1].split()[0])  # noqa: E731
                        snap[f"{pid}/{tid}"] = [(int(st[11]) + int(st[12])) / hz, field("voluntary_ctxt_switches"),
                                                field("nonvoluntary_ctxt_switches")]
                except (FileNotFoundError, ProcessLookupError, IndexError):
                    pass
            samples.append((time.time(), snap))
            time.sleep(0.2)

    th = threading.Thread(target=sample)
    th.start()
    m = L.local(model, "one") if strategy == "one" else L.emulated(model, strategy, "10gbit", strategy)
    stop.set()
    th.join()
    json.dump({"measure": m, "samples": samples}, open(os.path.join(out, "cpu_samples.json"), "w"))
    print(m)


def report(d):
    j = json.load(open(os.path.join(d, "cpu_samples.json")))
    s = [x for x in j["samples"] if x[1]]
    step = j["measure"]["ms_per_step"]
    t0, t1 = s[0][0], s[-1][0]
    a = min(s, key=lambda x: abs(x[0] - (t0 + 0.45 * (t1 - t0))))
    b = min(s, key=lambda x: abs(x[0] - (t0 + 0.95 * (t1 - t0))))
    steps = (b[0] - a[0]) * 1000 / step
    print(f"== {d}: {step:.1f} ms/step, {steps:.0f} steps sampled")
    for k, v in sorted(b[1].items()):
        u = [v[i] - a[1].get(k, [0, 0, 0])[i] for i in range(3)]
        if u[0] / (b[0] - a[0]) > 0.005:  # threads that used at least 0.5 % of a core
            print(f"  pid/tid {k:14s} CPU {u[0] / steps * 1000:6.1f} ms/step   voluntary {u[1] / steps:5.0f}/step"
                  f"   involuntary {u[2] / steps:5.0f}/step")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 40)
    else:
        for d in sys.argv[2:]:
            report(d)
