"""Runs real Syncline jobs for the Python package's tests: syncline-launch starts the
coordinator and the servers as separate processes, and each worker is a Python process of its
own running a script from tests/workers/ (as `syncline-launch ... -- python3 script.py` runs
users' scripts). Everything binds 127.0.0.1 and is killed at the end of each test."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

BUILD = pathlib.Path(os.environ.get("SYNCLINE_BUILD_DIR", pathlib.Path(__file__).parents[2] / "build"))
LAUNCH = BUILD / "bin" / "syncline-launch"
WORKERS = pathlib.Path(__file__).parent / "workers"
PYTHON = "/usr/bin/python3"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(BUILD / "python")
    env["SYNCLINE_BIN_DIR"] = str(BUILD / "bin")
    return env


class Job:
    """A finished job: its summary.json, and each worker's RESULT line (a dict) and log."""

    def __init__(self, out, code, summary, results, logs, launcher_log):
        self.out, self.code, self.summary = out, code, summary
        self.results, self.logs, self.launcher_log = results, logs, launcher_log

    def result(self, rank):
        if rank not in self.results:
            raise AssertionError(f"worker {rank} printed no RESULT line:\n{self.logs.get(rank)}\n"
                                 f"launcher:\n{self.launcher_log[-3000:]}")
        return self.results[rank]


def run_job(tmp_path, script, flags, workers=1, args=(), timeout=120, expect_ok=True,
            name="run"):
    """Runs `script` (in tests/workers/) as every worker of a job started with `flags`, through
    the launcher's `--`: syncline-launch FLAGS -- python3 SCRIPT ARGS."""
    out = tmp_path / name
    cmd = [str(LAUNCH), "--workers", str(workers), "--out", str(out), *flags, "--",
           PYTHON, str(WORKERS / script), *map(str, args)]  # an absolute script stays as it is
    proc = subprocess.run(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout, text=True)
    summary = {}
    if (out / "summary.json").exists():
        summary = json.loads((out / "summary.json").read_text())
    results, logs = {}, {}
    for rank in range(workers):
        log = out / "logs" / f"w{rank}.log"
        text = log.read_text() if log.exists() else ""
        logs[rank] = text
        for line in text.splitlines():
            if line.startswith("RESULT "):
                results[rank] = json.loads(line[len("RESULT "):])
    job = Job(out, proc.returncode, summary, results, logs, proc.stdout)
    if expect_ok and proc.returncode != 0:
        raise AssertionError(f"the job failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n"
                             + "\n".join(f"--- w{r}\n{l[-2000:]}" for r, l in logs.items()))
    return job


@pytest.fixture
def job(tmp_path):
    return lambda *a, **k: run_job(tmp_path, *a, **k)
