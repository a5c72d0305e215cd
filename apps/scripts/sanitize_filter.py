#!/usr/bin/env python3
"""apps/scripts/sanitize_filter.py: the verdict on one compute-sanitizer (memcheck) report, for
gpu_session.sh's sanitize phase.

compute-sanitizer prints one record per error, each line prefixed by "========= ": a first line
saying what happened ("Invalid __global__ read of size 4 bytes", "Program hit
cudaErrorNoKernelImageForDevice (error 209) due to "..." on CUDA API call to cudaFuncGetAttributes.",
"Host API memory access error at ..."), then indented details and a host backtrace ("Host Frame:"
lines, the library on the same line or, in newer versions, on the next one as "in /path/lib.so"),
a bare "=========" line between records, and at the end "ERROR SUMMARY: N errors".

The rule (issue 18: the resnet18 step failed with "8 errors", every one of them NCCL's):
  - an API error ("Program hit ... on CUDA API call to ...") whose host backtrace runs through
    libnccl's initialisation (a frame in libnccl naming ncclCommInit*, ncclInit*, ncclCommSplit or
    NCCL's init.cc) is ignored: NCCL probes for kernel images, P2P and other features while it
    builds a communicator and handles the failures itself (cudaErrorNoKernelImageForDevice on a
    GPU its build has no kernels for);
  - every other record counts: any memory error (device or host API accesses, races,
    misaligned or out-of-bounds), and any API error from tandem's own calls or from NCCL outside its
    initialisation;
  - records the report does not print (past --print-limit) count too: ERROR SUMMARY's N minus
    the records seen.
Exit status: 0 when nothing counts, 1 otherwise, 2 when the report has no ERROR SUMMARY (the
sanitizer did not finish). Prints (and with --summary writes) one line: the sanitizer's summary,
what was ignored and why, what counts. Standard library only.
"""
import argparse
import re
import sys

PREFIX = re.compile(r"^=+ ?")
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
API_ERROR = re.compile(r"Program hit (\S+).* on CUDA API call to ([\w:]+)")
NCCL_INIT = re.compile(r"ncclCommInit|ncclInit|ncclCommSplit|nccl[^ ]*/init\.cc|\binit\.cc")


def records(text):
    """The sanitizer's records: lists of lines without the prefix, and the ERROR SUMMARY count."""
    recs, cur, total = [], [], None
    for raw in text.splitlines():
        if not raw.startswith("========="):
            continue  # the program's own output
        line = PREFIX.sub("", raw, count=1).rstrip()
        m = SUMMARY.search(line)
        if m:  # one per process the sanitizer followed (mpiexec's ranks): they add up
            total = (total or 0) + int(m.group(1))
            continue
        if line.startswith("COMPUTE-SANITIZER") or line.startswith("Target application returned"):
            continue
        if not line.strip():
            if cur:
                recs.append(cur)
            cur = []
            continue
        if not line.startswith(" ") and cur:  # a new record without a separator line
            recs.append(cur)
            cur = []
        cur.append(line)
    if cur:
        recs.append(cur)
    return recs, total


def in_nccl_init(rec):
    """True when a host frame of the record is NCCL's initialisation inside libnccl."""
    frames = []
    for line in rec[1:]:
        s = line.strip()
        if s.startswith("Host Frame:"):
            frames.append(s)
        elif s.startswith("in ") and frames:  # the library of the frame above (newer sanitizers)
            frames[-1] += " " + s
    return any("libnccl" in f and NCCL_INIT.search(f) for f in frames)


def judge(text):
    recs, total = records(text)
    ignored, counted = [], []
    for rec in recs:
        m = API_ERROR.search(rec[0])
        if m and in_nccl_init(rec):
            ignored.append(m.group(1))
        else:
            counted.append(rec[0])
    unprinted = max(0, (total or 0) - len(recs))
    return {"total": total, "ignored": ignored, "counted": counted, "unprinted": unprinted}


def verdict_line(v):
    if v["total"] is None:
        return "no ERROR SUMMARY line (the sanitizer did not finish)"
    parts = [f"ERROR SUMMARY: {v['total']} errors"]
    if v["ignored"]:
        kinds = sorted(set(v["ignored"]))
        parts.append(f"{len(v['ignored'])} ignored: API errors inside NCCL's initialisation ({', '.join(kinds)})")
    n = len(v["counted"]) + v["unprinted"]
    parts.append(f"{n} counted" + (f": {v['counted'][0]}" if v["counted"] else "") +
                 (f" (+{v['unprinted']} not printed)" if v["unprinted"] else ""))
    return "; ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", help="compute-sanitizer's output (with the program's own lines mixed in)")
    ap.add_argument("--summary", help="also write the verdict line here")
    a = ap.parse_args(argv)
    with open(a.report, errors="replace") as f:
        v = judge(f.read())
    line = verdict_line(v)
    print("sanitize_filter:", line)
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(line + "\n")
    if v["total"] is None:
        return 2
    return 0 if not v["counted"] and not v["unprinted"] else 1


if __name__ == "__main__":
    sys.exit(main())
