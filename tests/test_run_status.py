#!/usr/bin/env python3
"""tests/test_run_status.py: apps/scripts/run_status.py on hand-made run_status.json records (the
trainers write them: apps/trainer/run/exit_status.h). Each ended state exits with its status and says
what to do; "running" with a live process is "nothing to do" (0); "running" whose process is gone
(killed, or a zombie) is "killed or crashed" (1, retry); no record is 2. Standard library only;
run by ctest (run_status) or directly.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apps", "scripts", "run_status.py")


def run(folder):
    p = subprocess.run([sys.executable, SCRIPT, folder], capture_output=True, text=True)
    return p.returncode, p.stdout


def write(folder, **fields):
    record = {"program": "train_imagenet", "run_id": "abc", "host": socket.gethostname(), "pid": os.getpid(),
              "started": "2026-01-01T00:00:00.000000Z", "last_checkpoint": "ck/checkpoint_epoch2.safetensors"}
    record.update(fields)
    with open(os.path.join(folder, "run_status.json"), "w") as f:
        json.dump(record, f)


class RunStatus(unittest.TestCase):
    def test_ended_states_exit_with_their_status(self):
        with tempfile.TemporaryDirectory() as d:
            for state, status, advice in [("completed", 0, "nothing to do"), ("preempted", 75, "retry"),
                                          ("usage", 2, "do not retry"), ("data", 65, "do not retry"),
                                          ("failed", 1, "retry"), ("nonfinite", 3, "do not retry")]:
                write(d, state=state, exit_status=status, why="because", advice=advice, ended="2026-01-01T01:00:00Z")
                rc, out = run(d)
                self.assertEqual(rc, status, out)
                self.assertTrue(out.startswith(f"{state} (exit {status})"), out)
                self.assertIn(advice, out)
                self.assertIn("ck/checkpoint_epoch2.safetensors", out)
                self.assertEqual(out.count("\n"), 1)  # one line

    def test_running_alive_dead_and_zombie(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, state="running")  # this very process: alive
            rc, out = run(d)
            self.assertEqual(rc, 0, out)
            self.assertTrue(out.startswith("running"), out)
            child = subprocess.Popen(["true"])
            child.wait()  # reaped: the pid is gone
            write(d, state="running", pid=child.pid)
            rc, out = run(d)
            self.assertEqual(rc, 1, out)
            self.assertIn("killed or crashed", out)
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            try:  # not reaped yet: a zombie, as a killed rank 0 is until its launcher reaps it
                for _ in range(500):
                    with open(f"/proc/{pid}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            break
                write(d, state="running", pid=pid)
                rc, out = run(d)
                self.assertEqual(rc, 1, out)
            finally:
                os.waitpid(pid, 0)

    def test_no_record(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out = run(d)
            self.assertEqual(rc, 2)
            self.assertIn("no record", out)


if __name__ == "__main__":
    unittest.main()
