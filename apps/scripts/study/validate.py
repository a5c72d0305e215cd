"""apps/scripts/study/validate.py: the what-if model against this study's own measurements.

For each (model, batch) with a traced 1-rank baseline: measure the network once (bench_allreduce at
2 ranks, fitted to alpha and bandwidth by apps/whatif), then ask apps/whatif for every strategy at
every measured rank count and put its step time beside the measured median. The traced step is
rescaled to the untraced baseline's median ms/step (tracing costs a little), and --cores tells the
model that the ranks share this machine's cores. Also writes each (model, batch)'s N = 1..1024
table (whatif_<model>_b<batch>.txt), as if every rank had cores of its own.

The verdict is apps/whatif's own (--measured; apps/whatif/model.h's judge and Target): "within
target" needs BOTH the step time within 15 % of the measured median AND the predicted exposed
communication (the model's exposed time plus its wait for the slowest rank) within max(50 % of the
measured exposed time, 2 % of the measured step) - a step time that matches while the model misses
the communication it is about is no agreement. The bound lives in one place (model.h), read back
from whatif's JSON.
"""
import json
import os
import subprocess

import grid



def bench(build, out):
    path = os.path.join(out, "bench_allreduce_np2.json")
    if not os.path.exists(path):
        env = dict(os.environ, HYDRA_LAUNCHER=os.environ.get("HYDRA_LAUNCHER", "fork"))
        with open(os.path.join(out, "runs", "bench_allreduce_np2.log"), "w") as f:
            subprocess.check_call(["mpiexec", "-n", "2", os.path.join(build, "apps", "bench_allreduce"),
                                   "--max-bytes", "16M", "--reps", "5", "--backend", "mpi", "--json", path],
                                  stdout=f, stderr=subprocess.STDOUT, env=env)
    return path


def whatif(build, args, json_path):
    subprocess.check_output([os.path.join(build, "apps", "whatif")] + args + ["--json", json_path], text=True)
    with open(json_path) as f:
        return json.load(f)


def check(study, build, out):
    rows, tables, target = [], {}, {}
    cells = study["cells"]
    if not any(c["ranks"] > 1 for c in cells):
        return {"rows": rows, "tables": tables}
    net = bench(build, out)
    os.makedirs(os.path.join(out, "whatif"), exist_ok=True)
    for key, t in study["traces"].items():
        model, batch, s, n = key.split("|")
        if s != "-":
            continue
        batch = int(batch)
        base = next(c for c in cells if c["model"] == model and c["batch_per_rank"] == batch and c["ranks"] == 1)
        common = ["--trace", os.path.join(out, t["trace"]), "--metrics", os.path.join(out, t["metrics"]),
                  "--allreduce-json", net, "--step-ms", str(base["ms_per_step"]["median"])]
        if not grid.is_encoder(model):  # an encoder's vocabulary comes from its --metrics
            common += ["--num-classes", "10"]
        ranks = [r for r in study["grid"]["ranks"] if r > 1]
        cores = 0 if study.get("hostfile") else study["cores"]  # other hosts' cores are not known here
        for strategy in study["grid"]["strategies"]:
            if any(grid.skip_reason(model, strategy, n) for n in ranks):
                ranks_here = [n for n in ranks if not grid.skip_reason(model, strategy, n)]
            else:
                ranks_here = ranks
            if not ranks_here:
                continue
            measured = {c["ranks"]: c for c in cells if c["model"] == model and c["batch_per_rank"] == batch
                        and c["strategy"] == strategy and c["ranks"] > 1}
            mpath = os.path.join(out, "whatif", f"{model}_b{batch}_{strategy}.measured.json")
            with open(mpath, "w") as f:
                json.dump([{"ranks": n, "step_ms": c["ms_per_step"]["median"], "exposed_ms": c["exposed_ms"]["median"]}
                           for n, c in sorted(measured.items())], f)
            j = whatif(build, common + grid.whatif_args(strategy) + ["--ranks", ",".join(map(str, ranks_here)),
                                                                      "--cores", str(cores),
                                                                      "--measured", mpath],
                       os.path.join(out, "whatif", f"{model}_b{batch}_{strategy}.json"))
            target = j["inputs"]["target"]
            for p in j["predictions"]:
                meas, v = measured.get(p["ranks"]), p.get("verdict")
                rows.append({"model": model, "batch_per_rank": batch, "strategy": strategy, "ranks": p["ranks"],
                             "predicted_ms": p["step_ms"], "predicted_exposed_ms": p["exposed_ms"],
                             "predicted_wait_ms": p["straggler_ms"],
                             "measured_ms": meas["ms_per_step"]["median"] if meas else None,
                             "measured_exposed_ms": meas["exposed_ms"]["median"] if meas else None,
                             "error": v["step_error"] if v else None,
                             "step_ok": v["step_ok"] if v else None, "exposed_ok": v["exposed_ok"] if v else None,
                             "exposed_bound_ms": v["exposed_bound_ms"] if v else None,
                             "within_target": v["within_target"] if v else None,
                             "oversubscribed": bool(meas and meas.get("oversubscribed")),
                             "network": j["inputs"]["network"]})
        table = "ddp,ddp_no_overlap,zero1,zero2,zero3,ps" + (",tp" if grid.is_encoder(model) else "")
        txt = subprocess.check_output([os.path.join(build, "apps", "whatif")] + common + ["--strategy", table],
                                      text=True)
        name = f"whatif_{model}_b{batch}.txt"
        with open(os.path.join(out, name), "w") as f:
            f.write(txt)
        tables[f"{model}|{batch}"] = name
    return {"rows": rows, "tables": tables, "target": target.get("step"), "exposed_target": target.get("exposed"),
            "exposed_floor": target.get("exposed_floor")}
