#!/usr/bin/env python3
"""apps/scripts/run_status.py: how the last run in a checkpoint folder ended, and what to do - for a
supervisor that cannot trust (or cannot see) the launcher's exit status: Slurm requeue, systemd, a
plain mpiexec (which can return 0 after a SIGTERM although every rank exited 75: a Hydra race).

    python3 apps/scripts/run_status.py CHECKPOINT_DIR

Prints one line - the state, the exit status, why, the run id, the last checkpoint and the advice -
and exits with the run's status from the trainers' table (apps/trainer/run/exit_status.h):
    0 completed (or still running: nothing to do)      1 failed at run time: retry with --resume auto
    2 usage error: fix the command                     3 stopped on a non-finite value
    65 data or input error: fix the data or the file   75 preempted: retry with --resume auto
A record that still says "running" while its process is gone (same host: the pid is dead, a zombie,
or another process now) means the run was killed or crashed (SIGKILL, the out-of-memory killer, a
rank that aborted the job): exit 1, retry. On another host the process cannot be checked: the line
says so and the status is 0 unless the folder's lock was released.
No record (no run has opened the folder, or an older tandem wrote it): exit 2.

A requeue script:  python3 run_status.py ck; case $? in 1|75) requeue ;; esac
Only the standard library is used.
"""
import json
import os
import socket
import sys


def alive_here(pid):
    """Whether pid is a live (not zombie) process on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc: kill(0) said it exists


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    folder = argv[1]
    path = os.path.join(folder, "run_status.json")
    try:
        with open(path) as f:
            r = json.load(f)
    except FileNotFoundError:
        print(f"no record: '{path}' does not exist (no run has opened this folder, or an older tandem wrote it)")
        return 2
    except (OSError, ValueError) as e:
        print(f"no record: '{path}' cannot be read ({e})")
        return 2
    run = f"run {r.get('run_id', '?')} ({r.get('program', '?')}, pid {r.get('pid', '?')} on {r.get('host', '?')}"
    run += f", started {r.get('started', '?')})"
    last = r.get("last_checkpoint") or "none"
    state = r.get("state", "?")
    if state == "running":
        lock = {}
        try:
            with open(os.path.join(folder, ".lock")) as f:
                lock = json.load(f)
        except (OSError, ValueError):
            pass
        if r.get("host") == socket.gethostname():
            if alive_here(int(r.get("pid", 0))):
                print(f"running: {run}; last checkpoint {last}: nothing to do")
                return 0
        elif not (lock.get("pid") == r.get("pid") and lock.get("released")):
            print(f"running on another host, which cannot be checked from here: {run}; last checkpoint {last}")
            return 0
        print(f"killed or crashed (no end recorded; its process is gone): {run}; last checkpoint {last}; "
              f"retry: rerun the same command with --resume auto (read its log first if it repeats)")
        return 1
    status = int(r.get("exit_status", 1))
    why = r.get("why") or ""
    print(f"{state} (exit {status}) at {r.get('ended', '?')}: {run}; last checkpoint {last}"
          + (f"; why: {why}" if why else "") + f"; {r.get('advice', '')}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
