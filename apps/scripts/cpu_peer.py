#!/usr/bin/env python3
"""apps/scripts/cpu_peer.py: tandem against PyTorch on the CPU, side by side, in one script.

Run it with the Python that has PyTorch (Debian's python3-torch 1.13: /usr/bin/python3):
    /usr/bin/python3 apps/scripts/cpu_peer.py --build build-cpu --out apps/results/<date>-cpu-2core

Each row is one workload, run by both frameworks with the same model, batch, image size or sequence
length, thread count and precision (f32 on both; PyTorch's CPU convolutions are oneDNN, channels_last
as tandem's NHWC): tandem's train_imagenet / train_encoder --synthetic, one process, and
pytorch_peer.py --device cpu. The two alternate (tandem, PyTorch, tandem, ...) --repeats times, so
load from other processes on a shared machine falls on both alike; each framework's median
throughput over the repeats is reported, with the ratio tandem / PyTorch (> 1: tandem is faster)
and the spread (min-max); "best" is the ratio of the two fastest runs, the figure least moved by
other processes on a shared machine (each framework's least-disturbed run). Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS for both, which PyTorch
reads at start-up and tandem's core/threads.h honours.
Rows (the issue's): ResNet-18 64 px b32, ResNet-50 224 px b8, VGG-16 64 px b16, bert_small seq 128 b8,
each on 1 and 2 threads (--rows picks some by name, --threads others).
Writes <out>/cpu_peer<tag>.json (every run) and prints the table; the raw logs go to
<out>/cpu_peer_logs<tag>/ (--tag keeps a new measurement from overwriting an older one's files).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name: (kind, model, size (image px or seq), batch, steps, warmup); steps are few so a row's 2 x
# repeats runs fit minutes on one core, warm-up steps left out of both frameworks' steady window.
ROWS = {
    "resnet18_64_b32": ("image", "resnet18", 64, 32, 8, 2),
    "resnet50_224_b8": ("image", "resnet50", 224, 8, 4, 1),
    "vgg16_64_b16": ("image", "vgg16", 64, 16, 5, 2),
    "bert_small_128_b8": ("encoder", "bert_small", 128, 8, 6, 2),
}


def tandem_cmd(build, row, out_json):
    kind, model, size, batch, steps, warmup = row
    if kind == "image":
        return [str(build / "apps/train_imagenet"), "--synthetic", "--device", "cpu", "--model", model,
                "--image-size", str(size), "--batch", str(batch), "--num-classes", "1000", "--steps", str(steps),
                "--bench-warmup", str(warmup), "--synthetic-val-size", "0", "--lr", "0.01", "--amp", "off",
                "--metrics", out_json]
    return [str(build / "apps/train_encoder"), "--synthetic", "--device", "cpu", "--model", model,
            "--seq-len", str(size), "--batch", str(batch), "--steps", str(steps), "--bench-warmup", str(warmup),
            "--amp", "off", "--val-batches", "1", "--metrics", out_json]


def torch_cmd(row, out_json):
    kind, model, size, batch, steps, warmup = row
    cmd = [sys.executable, str(HERE / "pytorch_peer.py"), "--device", "cpu", "--precision", "f32", "--amp", "off",
           "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup), "--json", out_json]
    if kind == "image":
        return cmd + ["--model", model, "--image-size", str(size), "--lr", "0.01"]
    return cmd + ["--encoder", model, "--seq", str(size)]


def throughput(kind, path):
    """Items per second from a run's JSON: images/s, or tokens/s for the encoder."""
    d = json.loads(Path(path).read_text())
    if kind == "encoder":
        return d.get("tokens_per_s") or d.get("throughput", {}).get("tokens_per_s")
    return d.get("images_per_s") or d.get("throughput", {}).get("images_per_s")


def run_one(cmd, env, log):
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(" ".join(cmd) + "\n" + p.stdout)
    if p.returncode != 0:
        sys.exit(f"cpu_peer: {' '.join(cmd)} failed (exit {p.returncode}); its output is in {log}")
    return time.time() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-cpu", help="tandem's CPU build folder")
    p.add_argument("--out", required=True, help="folder for cpu_peer.json and the raw logs")
    p.add_argument("--rows", default=",".join(ROWS), help="comma-separated row names: " + ", ".join(ROWS))
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--repeats", type=int, default=5, help="alternated runs per framework (median reported)")
    p.add_argument("--tag", default="", help="suffix of the output names (cpu_peer<tag>.json, cpu_peer_logs<tag>/)")
    a = p.parse_args()
    build, out = Path(a.build).resolve(), Path(a.out)
    logs = out / f"cpu_peer_logs{a.tag}"
    logs.mkdir(parents=True, exist_ok=True)
    import torch  # noqa: F401  (fail early, with Python's message, when this Python has no PyTorch)
    results = []
    print(f"cpu_peer: PyTorch {torch.__version__} ({sys.executable}), tandem {build}, {a.repeats} alternated runs each",
          flush=True)
    for threads in [int(t) for t in a.threads.split(",")]:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
        for name in a.rows.split(","):
            row = ROWS[name]
            runs = {"tandem": [], "pytorch": []}
            for r in range(a.repeats):
                for fw in ("tandem", "pytorch"):
                    j = str(logs / f"{name}_t{threads}_{fw}_{r}.json")
                    cmd = tandem_cmd(build, row, j) if fw == "tandem" else torch_cmd(row, j)
                    run_one(cmd, env, logs / f"{name}_t{threads}_{fw}_{r}.log")
                    runs[fw].append(throughput(row[0], j))
            med = {fw: statistics.median(v) for fw, v in runs.items()}
            unit = "tok/s" if row[0] == "encoder" else "img/s"
            best = max(runs["tandem"]) / max(runs["pytorch"])
            res = {"row": name, "threads": threads, "unit": unit, "runs": runs, "tandem": med["tandem"],
                   "pytorch": med["pytorch"], "ratio": med["tandem"] / med["pytorch"], "best_ratio": best,
                   "load_after": os.getloadavg()}
            results.append(res)
            print(f"{name:20s} {threads} thread(s): tandem {med['tandem']:8.1f} {unit} "
                  f"[{min(runs['tandem']):.1f}-{max(runs['tandem']):.1f}], PyTorch {med['pytorch']:8.1f} "
                  f"[{min(runs['pytorch']):.1f}-{max(runs['pytorch']):.1f}], tandem/PyTorch {res['ratio']:.2f} "
                  f"(best {best:.2f})  "
                  f"(load {res['load_after'][0]:.1f})", flush=True)
            (out / f"cpu_peer{a.tag}.json").write_text(json.dumps({"torch": torch.__version__, "rows": results}, indent=1))
    print("\nrow                  threads   tandem    PyTorch   tandem/PyTorch   best/best")
    for r in results:
        print(f"{r['row']:20s} {r['threads']:7d} {r['tandem']:8.1f} {r['pytorch']:10.1f}   {r['ratio']:6.2f}"
              f"           {r['best_ratio']:5.2f}  {r['unit']}")


if __name__ == "__main__":
    main()
