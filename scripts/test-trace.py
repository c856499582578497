#!/usr/bin/python3
"""The trace of a job (--trace on --trace-steps A:B): a local BSP job of 2 servers and 2 workers
writes OUT/trace.json, and the test checks that it is valid JSON in the Chrome trace event
format; that every event has name, ph, ts, pid and tid; that there is one process per node, named
"w0 on HOST"; that the slices on each track nest; that each worker has exactly B - A step slices,
each with its phases inside it; that the servers' requests and the async slices of parked pulls
are there, every begin with its end. Then an all-reduce job of 2 workers: each worker's
"collectives" track has one all-reduce slice per step of the window, inside that step's push.
Prints the trace's size, its event counts and one step.
Usage: scripts/test-trace.py BUILD_DIR"""
import collections
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

BUILD = pathlib.Path(sys.argv[1]).resolve()
LAUNCH = BUILD / "bin" / "syncline-launch"
FIRST, END = 5, 25


def fail(message):
    print(f"test-trace: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check_nesting(events):
    """Slices (ph X) on one track must nest: each lies inside the one open, or after it ends."""
    tracks = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    for track, slices in tracks.items():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in slices:
            while open_ends and e["ts"] >= open_ends[-1]:
                open_ends.pop()
            end = e["ts"] + e["dur"]
            if open_ends and end > open_ends[-1]:
                fail(f"track {track}: {e['name']} [{e['ts']}, {end}] overlaps the slice it starts "
                     f"in (ending {open_ends[-1]})")
            open_ends.append(end)
    return tracks


def main():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="syncline-trace-"))
    try:
        out = tmp / "run"
        r = subprocess.run(
            [str(LAUNCH), "--servers", "2", "--workers", "2", "--sync", "bsp", "--trace", "on",
             "--trace-steps", f"{FIRST}:{END}", "--gen-rows", "8000", "--gen-test-rows", "500",
             "--batch-size", "100", "--epochs", "1", "--checkpoint-every", "10", "--seed", "3",
             "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        if r.returncode != 0:
            fail(f"the job failed (exit {r.returncode}):\n{r.stdout[-3000:]}")
        path = out / "trace.json"
        try:
            trace = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            fail(f"{path}: not JSON: {e}")
        events = trace["traceEvents"]
        for e in events:
            missing = [k for k in ("name", "ph", "ts", "pid", "tid") if k not in e]
            if missing:
                fail(f"an event without {missing}: {e}")
        names = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
        nodes = sorted(n.split(" on ")[0] for n in names.values())
        if nodes != ["ps0", "ps1", "w0", "w1"]:
            fail(f"processes: {sorted(names.values())}")
        check_nesting(events)
        pid_of = {n.split(" on ")[0]: pid for pid, n in names.items()}
        counts = collections.Counter((e["pid"], e.get("cat", ""), e["ph"]) for e in events)
        for w in ("w0", "w1"):
            steps = sorted((e for e in events if e["pid"] == pid_of[w] and e.get("cat") == "step"),
                           key=lambda e: e["ts"])
            if [s["args"]["step"] for s in steps] != list(range(FIRST, END)):
                fail(f"{w}: step slices {[s['args']['step'] for s in steps]}, not {FIRST}..{END - 1}")
            phases = [e for e in events if e["pid"] == pid_of[w] and e.get("cat") == "phase"]
            for s in steps:
                inside = [p for p in phases if s["ts"] <= p["ts"] and
                          p["ts"] + p["dur"] <= s["ts"] + s["dur"] and p["tid"] == s["tid"]]
                if not {"read", "compute", "push"} <= {p["name"] for p in inside}:
                    fail(f"{w} step {s['args']['step']}: phases {[p['name'] for p in inside]}")
        for ps in ("ps0", "ps1"):
            if counts[(pid_of[ps], "request", "X")] == 0:
                fail(f"{ps}: no request slices")
        begins = collections.Counter((e["pid"], e["id"]) for e in events if e["ph"] == "b")
        ends = collections.Counter((e["pid"], e["id"]) for e in events if e["ph"] == "e")
        if begins != ends:
            fail("async slices whose begin has no end (or the other way)")
        checkpoints = [e for e in events if e.get("cat") == "checkpoint"]
        if not checkpoints:
            fail("no checkpoint slices (checkpoint 10 and 20 are in the window)")
        if any(e.get("cat") == "collective" for e in events):
            fail("collective slices in a parameter-server job")
        # What the report quotes: the size, the counts, one step.
        print(f"trace.json: {path.stat().st_size} bytes, {len(events)} events")
        by_kind = collections.Counter((names[e["pid"]].split(" on ")[0], e.get("cat", e["name"]),
                                       e["ph"]) for e in events if e["ph"] != "M")
        for (node, cat, ph), n in sorted(by_kind.items()):
            print(f"  {node:4} {cat:12} {ph}  {n}")
        step = next(e for e in events if e["pid"] == pid_of["w0"] and e.get("cat") == "step")
        excerpt = [e for e in events if e["pid"] == pid_of["w0"] and
                   step["ts"] <= e["ts"] < step["ts"] + step["dur"] + 1 and e["ph"] == "X"]
        print("one step of w0:")
        for e in excerpt:
            print("  " + json.dumps(e))
        print(f"parked pulls: {sum(begins.values())} async slices; the servers' requests: "
              f"{sum(counts[(pid_of[p], 'request', 'X')] for p in ('ps0', 'ps1'))}")
        check_collectives(tmp / "allreduce")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test-trace: OK")


def check_collectives(out):
    """An all-reduce job: per worker, a "collectives" track with one all-reduce per traced step,
    each inside the push of its step on the steps track."""
    r = subprocess.run(
        [str(LAUNCH), "--workers", "2", "--sync", "allreduce", "--trace", "on", "--trace-steps",
         f"{FIRST}:{END}", "--gen-rows", "8000", "--gen-test-rows", "500", "--batch-size", "100",
         "--epochs", "1", "--seed", "3", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    if r.returncode != 0:
        fail(f"the all-reduce job failed (exit {r.returncode}):\n{r.stdout[-3000:]}")
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    check_nesting(events)
    names = {e["pid"]: e["args"]["name"].split(" on ")[0] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e["ph"] == "M" and e["name"] == "thread_name"}
    for pid, node in names.items():
        collectives = [e for e in events if e["pid"] == pid and e.get("cat") == "collective"]
        if [c["args"]["step"] for c in collectives] != list(range(FIRST, END)):
            fail(f"{node}: collective slices of steps {[c['args']['step'] for c in collectives]}")
        steps = {e["args"]["step"]: e for e in events if e["pid"] == pid and e.get("cat") == "step"}
        pushes = [e for e in events if e["pid"] == pid and e.get("name") == "push"]
        for c in collectives:
            if tracks.get((pid, c["tid"])) != "collectives" or c["name"] != "all-reduce":
                fail(f"{node}: {c} is not an all-reduce on the collectives track")
            step = steps[c["args"]["step"]]
            if not any(step["ts"] <= p["ts"] <= c["ts"] and
                       c["ts"] + c["dur"] <= p["ts"] + p["dur"] <= step["ts"] + step["dur"]
                       for p in pushes):
                fail(f"{node}: the all-reduce of step {c['args']['step']} is not inside its push")
    print(f"all-reduce job: {len(names)} workers, {END - FIRST} all-reduce slices each, every one "
          "inside its step's push")


if __name__ == "__main__":
    main()
