#!/usr/bin/python3
"""The Python twin of syncline-bench-link (bench/link_bench.cc): one worker pushes, then pulls,
one dense table for a fixed time through syncline._native, `window` requests outstanding, and
prints the same machine-readable line. bench/python-vs-cpp.sh runs both in one sitting.

Run as a worker of a job: syncline-launch --sync asp ... -- /usr/bin/python3 python_link.py ...
"""
import argparse
import collections
import resource
import sys
import time

import numpy as np

from syncline import _native

TABLE = 1


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def run_phase(session, args, op, values, out):
    floats = values.size
    piece = args.request_bytes // 4
    pieces = (floats + piece - 1) // piece
    window = min(args.window, pieces)
    in_flight = collections.deque()
    done_bytes = requests = passes = 0
    # Views made once, as a training loop reuses its tensors.
    push_views = [values[b:b + piece] for b in range(0, floats, piece)]
    pull_views = [out[b:b + piece] for b in range(0, floats, piece)]
    cpu0 = cpu_seconds()
    t0 = time.time()
    start = time.perf_counter()
    end = start + args.seconds
    at = 0
    while time.perf_counter() < end:
        if len(in_flight) == window:
            ticket, nbytes = in_flight.popleft()
            session.wait(ticket, args.request_timeout)
            done_bytes += nbytes
            requests += 1
        begin = at * piece
        if op == "push":
            ticket = session.push_dense(TABLE, begin, push_views[at], 1.0)
            nbytes = push_views[at].nbytes
        else:
            ticket = session.pull_dense(TABLE, begin, pull_views[at])
            nbytes = pull_views[at].nbytes
        in_flight.append((ticket, nbytes))
        at += 1
        if at == pieces:
            at = 0
            passes += 1
            session.clock(0.0)
    while in_flight:
        ticket, nbytes = in_flight.popleft()
        session.wait(ticket, args.request_timeout)
        done_bytes += nbytes
        requests += 1
    seconds = time.perf_counter() - start
    return {"bytes": done_bytes, "seconds": seconds, "t0": t0, "t1": time.time(),
            "cpu": cpu_seconds() - cpu0, "passes": passes,
            "mbps": done_bytes / seconds / 1e6 if seconds > 0 else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table-bytes", type=int, default=16 << 20)
    ap.add_argument("--request-bytes", type=int, default=1 << 20)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--request-timeout", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.table_bytes % 4 or args.request_bytes % 4:
        sys.exit("python_link: --table-bytes and --request-bytes must be multiples of 4")
    args.request_bytes = min(args.request_bytes, args.table_bytes)
    env = _native.environment()
    session = _native.Session.join(env["coordinator"], env["rank"], key_file=env["key_file"],
                                   insecure=env["insecure"])
    floats = args.table_bytes // 4
    session.declare_table(TABLE, True, floats, 1, lr=1e-3)
    values = np.random.default_rng(args.seed + session.rank).uniform(-1, 1, floats).astype(
        np.float32)
    out = np.zeros(floats, dtype=np.float32)
    push = run_phase(session, args, "push", values, out)
    pull = run_phase(session, args, "pull", values, out)
    spec = session.spec
    print(f"link_bench_py rank={session.rank} servers={spec['servers']} "
          f"workers={spec['workers']} table_bytes={args.table_bytes} "
          f"request_bytes={args.request_bytes} window={args.window} "
          f"push_MBps={push['mbps']:.2f} pull_MBps={pull['mbps']:.2f} "
          f"push_bytes={push['bytes']} pull_bytes={pull['bytes']} push_s={push['seconds']:.4f} "
          f"pull_s={pull['seconds']:.4f} push_cpu_s={push['cpu']:.3f} "
          f"pull_cpu_s={pull['cpu']:.3f} push_passes={push['passes']} "
          f"pull_passes={pull['passes']}", flush=True)
    session.finish(None, 60.0)


if __name__ == "__main__":
    main()
