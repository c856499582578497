#!/usr/bin/python3
"""What --metrics-port costs a training job: interleaved runs with metrics on and off.

Runs a job (the demo job, examples/demo.toml, or the ctr job, examples/ctr/ctr.toml, on data
generated once) in pairs, alternating which arm goes first (off-on, on-off, ...), so that a
machine whose load drifts moves both arms alike. In an "on" run the nodes serve their pages and
this script scrapes every target of OUT/prometheus/targets.json once a second (five times as
often as the generated prometheus.yml), so the figure includes the pages' cost. For each run:

  steps/s     the workers' steady rate from metrics.csv: each worker's clocks from its first row
              to its last over the wall time between them, summed over the workers;
  cpu/step    user + system CPU of the launcher and every node it started (they are all reaped
              by the time the launcher exits), over the summary's steps.

It prints each pair, the medians, and the pairs' on/off ratios as a geometric mean with a 95%
confidence interval: the ratio of a pair is what to read (its two runs ran back to back). Where
the job's processes share few cores (as on a 2-core machine) the step rate is bound by CPU, and
cpu/step, which other load on the machine moves far less than wall time, is the sharper figure. Usage:
  bench/metrics-overhead.py [--build build] [--job demo|ctr] [--pairs 10] [--out DIR]
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def steps_per_second(out):
    """The workers' summed steady rate over their metrics.csv progress rows."""
    first, last = {}, {}
    with open(os.path.join(out, "metrics.csv")) as f:
        header = f.readline().strip().split(",")
        col = {name: i for i, name in enumerate(header)}
        for line in f:
            r = line.rstrip("\n").split(",")
            if len(r) < len(header) or r[col["train_loss"]] == "":
                continue  # a held-out row
            worker, wall, clock = r[col["worker"]], float(r[col["wall_seconds"]]), int(
                r[col["clock"]])
            first.setdefault(worker, (wall, clock))
            last[worker] = (wall, clock)
    rate = 0.0
    for w, (wall0, clock0) in first.items():
        wall1, clock1 = last[w]
        if wall1 > wall0:
            rate += (clock1 - clock0) / (wall1 - wall0)
    return rate


def scrape_loop(out, stop, counter):
    """Scrapes every target in OUT/prometheus/targets.json once a second until `stop` is set."""
    path = os.path.join(out, "prometheus", "targets.json")
    while not stop.wait(1.0):
        try:
            with open(path) as f:
                groups = json.load(f)
        except (OSError, ValueError):
            continue
        for g in groups:
            for t in g.get("targets", []):
                try:
                    with urllib.request.urlopen(f"http://{t}/metrics", timeout=2) as r:
                        r.read()
                    counter[0] += 1
                except OSError:
                    pass


def run_once(args, job_args, out, metrics_on):
    cmd = [os.path.join(args.build, "bin", "syncline-launch"), *job_args, "--out", out]
    if metrics_on:
        cmd += ["--metrics-port", "0"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    stop, scrapes = threading.Event(), [0]
    scraper = threading.Thread(target=scrape_loop, args=(out, stop, scrapes))
    if metrics_on:
        scraper.start()
    with open(out + ".log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=900).returncode
    stop.set()
    if metrics_on:
        scraper.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        print(f"metrics-overhead: {' '.join(cmd)} failed with {rc} (see {out}.log); the pair "
              "runs again", flush=True)
        return None
    with open(os.path.join(out, "summary.json")) as f:
        steps = json.load(f)["steps"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return steps_per_second(out), cpu / steps, scrapes[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--job", choices=["demo", "ctr"], default="demo")
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--out", default="/tmp/syncline-metrics-overhead")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    gen = os.path.join(args.build, "bin", "syncline-gen")
    data = os.path.join(args.out, "data-" + args.job)
    if args.job == "demo":
        # examples/demo.toml's data, written once instead of by every run.
        train, test = data + "/train.libsvm", data + "/test.libsvm"
        if not os.path.exists(test):
            os.makedirs(data, exist_ok=True)
            subprocess.run([gen, "--out", train, "--test-out", test, "--rows", "200000",
                            "--test-rows", "10000", "--features", "100000", "--seed", "1"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        config = os.path.join(ROOT, "examples", "demo.toml")
    else:
        train, test = data + "/train.tsv", data + "/test.tsv"
        if not os.path.exists(test):
            os.makedirs(data, exist_ok=True)
            subprocess.run([gen, "criteo", "--rows", "180000", "--test-rows", "20000", "--seed",
                            "1", "--out", train, "--test-out", test],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        config = os.path.join(ROOT, "examples", "ctr", "ctr.toml")
    job_args = ["--config", config, "--train", train, "--test", test]

    print(f"metrics-overhead: {args.job} job, {args.pairs} interleaved pairs "
          f"(load average {os.getloadavg()[0]:.1f} at the start)")
    print(f"{'pair':>4} {'order':>7} {'off steps/s':>11} {'on steps/s':>10} {'on/off':>7} "
          f"{'off cpu/step':>12} {'on cpu/step':>11} {'on/off':>7} {'scrapes':>7}")
    rows = []
    for i in range(args.pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {}
        for attempt in range(3):  # a run another process killed (a shared machine) is redone
            for on in order:
                got[on] = run_once(args, job_args, os.path.join(args.out, f"{args.job}-{i}-"
                                                                f"{'on' if on else 'off'}"), on)
            if None not in got.values():
                break
        else:
            sys.exit(f"metrics-overhead: pair {i} failed three times")
        (r0, c0, _), (r1, c1, n) = got[False], got[True]
        rows.append((r0, r1, c0, c1))
        print(f"{i:>4} {'off,on' if not order[0] else 'on,off':>7} {r0:>11.1f} {r1:>10.1f} "
              f"{r1 / r0:>7.3f} {c0 * 1e3:>10.3f}ms {c1 * 1e3:>9.3f}ms {c1 / c0:>7.3f} {n:>7}",
              flush=True)
    med = statistics.median
    print(f"median: off {med(r[0] for r in rows):.1f} steps/s, on {med(r[1] for r in rows):.1f}; "
          f"on/off of pairs {med(r[1] / r[0] for r in rows):.4f} "
          f"(from {min(r[1] / r[0] for r in rows):.3f} to {max(r[1] / r[0] for r in rows):.3f}); "
          f"cpu/step on/off {med(r[3] / r[2] for r in rows):.4f} "
          f"(load average {os.getloadavg()[0]:.1f} at the end)")
    print("on/off, the pairs' geometric mean with its 95% confidence interval: steps/s " +
          interval([r[1] / r[0] for r in rows]) + "; cpu/step " +
          interval([r[3] / r[2] for r in rows]))


def interval(ratios):
    """The geometric mean of `ratios` and a 95% t-interval for it (over the logarithms)."""
    logs = [math.log(x) for x in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return f"{math.exp(mean):.4f}"
    # Student's t at 97.5% for n - 1 degrees of freedom (n >= 2), from a short table.
    table = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
             10: 2.23, 15: 2.13, 20: 2.09, 30: 2.04, 60: 2.00}
    df = len(logs) - 1
    t = table[max(k for k in table if k <= df)]
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(mean):.4f} [{math.exp(mean - half):.4f}, {math.exp(mean + half):.4f}]"


if __name__ == "__main__":
    main()
