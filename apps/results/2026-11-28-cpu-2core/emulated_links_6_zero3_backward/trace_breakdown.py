"""Takes a ZeRO-3 (or DDP) trace on 2 ranks apart against the 1-rank trace of the same model (the traces of
trace_zero3.py: ../emulated_links_5_repeats/zero3_trace*/ and trace_resnet18/ here). Rank 0, steady steps
(the first 3 left out), medians over the steps.
    python3 trace_breakdown.py chunks TRACE ONE_RANK_TRACE   backward, bucket by bucket: its length, the time
        the comm thread was busy during it, the 1-rank length, and the share of the core the compute got
        while the comm thread was busy: (1-rank length - time alone) / time beside
    python3 trace_breakdown.py timeline TRACE STEP           one step's step ranges, top layers and collectives
"""
import json
import statistics
import sys


def events(path, pid=0):
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    return [e for e in ev if e.get("pid") == pid and e.get("ph") in ("X", "i", "I")]


def steps(ev, name):
    return sorted([e for e in ev if e["name"] == name and e.get("cat") == "step"], key=lambda e: e["ts"])


def chunks(path):
    """Per bucket of backward (launch order): (length ms, comm thread busy during it ms), medians."""
    ev = events(path)
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("tid") == 1 and e.get("ph") == "X"]
    rows = []
    for b in steps(ev, "backward")[3:]:
        t0, t1 = b["ts"], b["ts"] + b["dur"]
        ready = sorted(e["ts"] for e in ev if e["name"].endswith(" ready") and t0 <= e["ts"] <= t1 + 1)
        if not ready:  # 1 rank: the launches are the ready times
            ready = sorted(e["ts"] for e in ev if e["name"].startswith("allreduce bucket") and t0 <= e["ts"] <= t1 + 1)
        edges = [t0] + ready
        rows.append([((c - a) / 1e3, sum(max(0, min(c, y) - max(a, x)) for x, y in comm) / 1e3)
                     for a, c in zip(edges, edges[1:])])
    n = min(len(r) for r in rows)
    return [(statistics.median(r[i][0] for r in rows), statistics.median(r[i][1] for r in rows)) for i in range(n)]


def main():
    if sys.argv[1] == "chunks":
        two, one = chunks(sys.argv[2]), chunks(sys.argv[3])
        print("bucket  2 ranks ms  comm busy ms  1 rank ms  compute's share beside comm")
        for i, ((d, busy), (d1, _)) in enumerate(zip(two, one)):
            share = (d1 - (d - busy)) / busy if busy > 0.5 else float("nan")
            print(f"{i:6d} {d:11.2f} {busy:13.2f} {d1:10.2f} {share:12.2f}")
        d, busy, d1 = sum(x[0] for x in two), sum(x[1] for x in two), sum(x[0] for x in one)
        print(f"   all {d:11.2f} {busy:13.2f} {d1:10.2f} {(d1 - (d - busy)) / busy:12.2f}")
    elif sys.argv[1] == "timeline":
        ev = events(sys.argv[2])
        fw = steps(ev, "forward")
        k = int(sys.argv[3])
        t0, t1 = fw[k]["ts"], fw[k + 1]["ts"]
        top = ("BertLayer", "Sequential layer", "Embedding word", "BertOnlyMLM")
        for e in sorted((e for e in ev if t0 <= e["ts"] < t1 and (e.get("cat") in ("step", "comm") or e["name"].startswith(top))),
                        key=lambda e: e["ts"]):
            print(f"{(e['ts'] - t0) / 1e3:8.2f} ms  {e.get('dur', 0) / 1e3:7.2f} ms  thread {e['tid']}  {e['name']}")


if __name__ == "__main__":
    main()
