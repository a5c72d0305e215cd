"""tests/data/run_logs/make_run_logs.py: writes the JSON-lines run logs that test_plot_run.sh plots.

The logs follow the trainers' --log-file schema (apps/scripts/plot_run.py's header) and carry the
cases a plotter meets in practice: two image runs with different global batches (64 and 128 images
per step, so loss against samples differs from loss against steps), a run that crashed after step 130
and resumed from its step-120 checkpoint (a second "start"; steps 121-130 are logged twice), an
encoder run (tokens, masked_acc, an fp16 loss scale), null optional fields, an unknown key, and a
torn last line (a log read while it is written). Deterministic: python3 make_run_logs.py rewrites them.
"""
import json
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))


def image_run(path, run_id, world, batch, steps_per_epoch, epochs, ips, crash_at=None, resume_from=None):
    rng = random.Random(run_id)
    g = world * batch
    lines = []
    config = {"model": "resnet_tiny", "batch": batch, "lr": 0.1 * g / 256, "epochs": epochs, "amp": "off"}

    def start(step):
        lines.append({"event": "start", "run_id": run_id, "program": "train_imagenet", "world_size": world,
                      "model": "resnet_tiny", "unit": "images", "start_step": step, "config": config})

    def train(lo, hi, t0):  # elapsed_s: seconds since this process started (t0: its start-up)
        clock = t0
        for step in range(lo, hi + 1):
            if step % 10:
                continue
            epoch = (step - 1) // steps_per_epoch
            lr = config["lr"] * 0.5 * (1 + math.cos(math.pi * step / (steps_per_epoch * epochs)))
            loss = 2.3 * math.exp(-step * g / 9000.0) + 0.35 + 0.08 * rng.gauss(0, 1)
            rate = ips * (1 + 0.05 * rng.gauss(0, 1))
            ms = 1000.0 * g / rate
            clock += 10 * ms / 1000.0  # the 10 steps since the last record
            lines.append({"event": "step", "step": step, "epoch": epoch, "samples": step * g, "loss": round(loss, 4),
                          "lr": round(lr, 6), "items_per_s": round(rate, 1), "tokens_per_s": None,
                          "ms": {"step": round(ms, 2), "data": 1.2, "compute": round(0.85 * ms, 2),
                                 "exposed_comm": round(0.1 * ms, 2) if world > 1 else 0.0, "host": 0.4},
                          "mem_mib": 12.5, "peak_mib": 20.1, "loss_scale": None, "grad_norm": None,
                          "elapsed_s": round(clock, 2),
                          "eta_s": round((steps_per_epoch * epochs - step) * ms / 1000.0, 2),
                          "rank0_only": True})  # an unknown key
            if step % steps_per_epoch == 0:
                top1 = min(0.95, 0.1 + 0.85 * (1 - math.exp(-step * g / 6000.0)))
                lines.append({"event": "val", "step": step, "epoch": epoch, "samples": step * g,
                              "top1": round(top1, 4), "top5": round(min(1.0, top1 + 0.2), 4),
                              "loss": round(2.0 * (1 - top1) + 0.2, 4)})
                lines.append({"event": "checkpoint", "step": step, "path": f"ckpt/checkpoint_epoch{epoch}.safetensors"})

    total = steps_per_epoch * epochs
    start(0)
    if crash_at:
        train(1, crash_at, 3.0)
        start(resume_from)
        train(resume_from + 1, total, 2.5)  # a new process: its clock starts again
    else:
        train(1, total, 3.0)
    lines.append({"event": "end", "summary": {"steps": total, "best_top1": max(l["top1"] for l in lines
                                                                                  if l["event"] == "val")}})
    with open(path, "w") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")


def encoder_run(path):
    rng = random.Random(7)
    lines = [{"event": "start", "run_id": "bert-tiny-fp16", "program": "train_encoder", "world_size": 1,
              "model": "bert_tiny", "unit": "tokens", "config": {"batch": 32, "seq_len": 128, "amp": "fp16"}}]
    scale = 65536.0
    for step in range(10, 301, 10):
        if step == 40:
            scale /= 2  # an overflow halves the loss scale
        lines.append({"event": "step", "step": step, "epoch": 0, "samples": step * 32,
                      "loss": round(7.0 * math.exp(-step / 120.0) + 2.1 + 0.05 * rng.gauss(0, 1), 4),
                      "lr": 1e-4 * min(1.0, step / 50.0), "items_per_s": 410.0, "tokens_per_s": round(52000 + 900 * rng.gauss(0, 1)),
                      "ms": {"step": 78.0, "data": 0.5, "compute": 76.0, "exposed_comm": 0.0, "host": 1.5},
                      "mem_mib": 80.0, "peak_mib": 96.0, "loss_scale": scale, "grad_norm": round(1.5 + rng.random(), 3),
                      "elapsed_s": round(step * 0.078, 2), "eta_s": round((300 - step) * 0.078, 2)})
        if step % 100 == 0:
            acc = 0.1 + 0.4 * (1 - math.exp(-step / 150.0))
            lines.append({"event": "val", "step": step, "epoch": 0, "samples": step * 32, "masked_acc": round(acc, 4),
                          "loss": round(7.0 * math.exp(-step / 120.0) + 2.3, 4)})
    with open(path, "w") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
        f.write('{"event": "step", "step": 310, "epoch": 0, "loss"')  # torn: the writer was mid-line


if __name__ == "__main__":
    image_run(os.path.join(HERE, "resnet_tiny_2ranks_b32.jsonl"), "rt-2x32", 2, 32, 40, 6, 900.0,
              crash_at=130, resume_from=120)
    image_run(os.path.join(HERE, "resnet_tiny_1rank_b128.jsonl"), "rt-1x128", 1, 128, 20, 6, 520.0)
    encoder_run(os.path.join(HERE, "bert_tiny_fp16.jsonl"))
