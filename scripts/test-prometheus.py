#!/usr/bin/python3
"""A real Prometheus (Debian's package) on a job's generated config: a local ASP job of 2
servers and 2 workers with --metrics-port 0 runs, Prometheus is started with
OUT/prometheus/prometheus.yml, and the test checks, through Prometheus's HTTP API and the nodes'
own pages:
  - all 5 targets (the coordinator, 2 servers, 2 workers) are up;
  - `promtool check metrics` passes on every node's page; every histogram's +Inf bucket equals
    its count; no counter falls between two scrapes;
  - Prometheus's worker step rate agrees with metrics.csv's within 10%;
  - bad input: an unknown path gets 404, 200 half-open connections do not keep a scrape out or
    stop training, and a --metrics-port already taken stops the launcher with a clear error;
  - a SIGKILLed worker's `up` falls to 0 and its target leaves targets.json; the job goes on.
Skips (exit 77) where prometheus or promtool is not installed (scripts/install-deps.sh
--for-tests installs them). Everything binds 127.0.0.1.
Usage: scripts/test-prometheus.py BUILD_DIR"""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

BUILD = pathlib.Path(sys.argv[1]).resolve()
LAUNCH = BUILD / "bin" / "syncline-launch"
SCRAPE = 0.5  # seconds between Prometheus's scrapes (--metrics-scrape-interval)


def fail(message):
    print(f"test-prometheus: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def step(message):
    print(f"== {message}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    fail(f"{what}: not within {timeout} s")


def get(url, timeout=10):
    return urllib.request.urlopen(url, timeout=timeout).read().decode()


def samples(page):
    """{series: value} of a text exposition page."""
    out = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def types(page):
    out = {}
    for line in page.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            out[name] = kind
    return out


def check_page(node, url, promtool):
    page = get(url)
    check = subprocess.run([promtool, "check", "metrics"], input=page, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check.returncode != 0 or check.stdout.strip():
        fail(f"promtool check metrics on {node}'s page: {check.stdout.strip()}")
    values = samples(page)
    # Every histogram's +Inf bucket equals its count.
    for name, kind in types(page).items():
        if kind != "histogram":
            continue
        for series, value in values.items():
            if series.startswith(name + "_bucket") and 'le="+Inf"' in series:
                labels = series[len(name + "_bucket{"):-1].replace(',le="+Inf"', "").replace(
                    'le="+Inf"', "")
                count = name + "_count" + ("{" + labels + "}" if labels else "")
                if values.get(count) != value:
                    fail(f"{node}: {series} = {value}, but {count} = {values.get(count)}")
    return page


def counters(page):
    kinds = types(page)
    out = {}
    for series, value in samples(page).items():
        base = series.split("{")[0]
        for suffix in ("_bucket", "_count", "_sum"):
            if base.endswith(suffix) and kinds.get(base[: -len(suffix)]) == "histogram":
                base = base[: -len(suffix)]
                break
        if kinds.get(base) in ("counter", "histogram"):
            out[series] = value
    return out


def query(prom, expression):
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    reply = json.loads(get(url))
    if reply.get("status") != "success":
        fail(f"query {expression}: {reply}")
    return reply["data"]["result"]


def metrics_csv_rate(out, begin, end):
    """Steps per second of all workers between the launcher's wall seconds `begin` and `end`,
    from metrics.csv's progress rows."""
    rows = {}
    lines = (out / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    wall, worker, clock, loss = (header.index(c) for c in
                                 ("wall_seconds", "worker", "clock", "train_loss"))
    for line in lines[1:]:
        f = line.split(",")
        if len(f) != len(header) or f[loss] == "":
            continue
        t = float(f[wall])
        if begin <= t <= end:
            rows.setdefault(f[worker], []).append((t, int(f[clock])))
    rate = 0.0
    for r in rows.values():
        if len(r) >= 2 and r[-1][0] > r[0][0]:
            rate += (r[-1][1] - r[0][1]) / (r[-1][0] - r[0][0])
    return rate, len(rows)


def last_wall(out):
    lines = (out / "metrics.csv").read_text().splitlines()
    return max(float(line.split(",")[0]) for line in lines[1:] if line)


def worker_pid(parent, rank):
    """The launcher's child that runs worker `rank` (syncline-worker --rank RANK)."""
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if (ppid == parent and any(a.endswith(b"syncline-worker") for a in cmdline)
                and b"--rank" in cmdline
                and cmdline[cmdline.index(b"--rank") + 1] == str(rank).encode()):
            return int(entry.name)
    return None


def main():
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        print("SKIP: no prometheus/promtool (scripts/install-deps.sh --for-tests installs "
              "Debian's prometheus)")
        sys.exit(77)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="syncline-prometheus-"))
    procs = []

    def cleanup():
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        if not os.environ.get("KEEP_TMP"):
            shutil.rmtree(tmp, ignore_errors=True)

    try:
        run(tmp, procs, prometheus, promtool)
    finally:
        cleanup()
    print("test-prometheus: OK")


def run(tmp, procs, prometheus, promtool):
    step("a port already taken is a clear error at start")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([str(LAUNCH), "--servers", "1", "--workers", "1", "--gen-rows", "500",
                            "--metrics-port", str(port), "--out", str(tmp / "taken")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if r.returncode != 2 or "--metrics-port" not in r.stdout or str(port) not in r.stdout:
            fail(f"launcher with --metrics-port {port} taken: exit {r.returncode}: {r.stdout}")

    step("a job of 2 servers and 2 workers with --metrics-port 0")
    out = tmp / "run"
    # About 40 s of steady steps (each padded to 20 ms), ASP so that it goes on without a worker.
    job = subprocess.Popen(
        [str(LAUNCH), "--servers", "2", "--workers", "2", "--sync", "asp", "--metrics-port", "0",
         "--metrics-scrape-interval", str(SCRAPE), "--gen-rows", "20000", "--gen-test-rows", "500",
         "--batch-size", "64", "--epochs", "12", "--min-step-ms", "20", "--log-every", "5",
         "--seed", "7", "--out", str(out)],
        stdout=open(tmp / "launch.log", "w"), stderr=subprocess.STDOUT)
    started = time.time()
    procs.append(job)
    targets_file = out / "prometheus" / "targets.json"

    def targets():
        try:
            return json.loads(targets_file.read_text())
        except (OSError, ValueError):
            return None

    listed = wait_for("5 targets in targets.json", lambda: (t := targets()) and len(t) == 5 and t,
                      60)
    nodes = {t["labels"]["node"]: t["targets"][0] for t in listed}
    if sorted(nodes) != ["coordinator", "ps0", "ps1", "w0", "w1"]:
        fail(f"targets: {sorted(nodes)}")
    for t in listed:
        labels = t["labels"]
        if set(labels) != {"job", "run", "role", "rank", "node"} or labels["run"] != str(out):
            fail(f"labels: {labels}")

    step("Prometheus on the generated config")
    prom_port = free_port()
    prom = f"http://127.0.0.1:{prom_port}"
    procs.append(subprocess.Popen(
        [prometheus, "--config.file", str(out / "prometheus" / "prometheus.yml"),
         "--storage.tsdb.path", str(tmp / "tsdb"), "--web.listen-address",
         f"127.0.0.1:{prom_port}", "--log.level", "warn"],
        stdout=open(tmp / "prometheus.log", "w"), stderr=subprocess.STDOUT))

    def all_up():
        try:
            active = json.loads(get(f"{prom}/api/v1/targets"))["data"]["activeTargets"]
        except (OSError, ValueError):
            return None
        return len(active) == 5 and all(t["health"] == "up" for t in active) and active

    wait_for("all 5 targets up in Prometheus", all_up, 60)

    step("promtool check metrics on every page; +Inf = count; counters never fall")
    first = {node: counters(check_page(node, f"http://{a}/metrics", promtool))
             for node, a in nodes.items()}
    time.sleep(1.5)
    for node, a in nodes.items():
        later = counters(check_page(node, f"http://{a}/metrics", promtool))
        for series, value in first[node].items():
            if series in later and later[series] < value:
                fail(f"{node}: counter {series} fell from {value} to {later[series]}")
    worker_page = samples(get(f"http://{nodes['w0']}/metrics"))
    for series in ("syncline_worker_steps_total", "process_cpu_seconds_total",
                   'syncline_sent_bytes_total{peer_role="server"}'):
        if series not in worker_page:
            fail(f"w0's page has no {series}")

    step("bad input: 404, and 200 half-open connections")
    try:
        get(f"http://{nodes['w0']}/nothing-here")
        fail("an unknown path was served")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            fail(f"an unknown path got {e.code}, not 404")
    host, port = nodes["w0"].rsplit(":", 1)
    idle = []
    for _ in range(200):
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(b"GET /metr")
        idle.append(s)
    before = samples(get(f"http://{nodes['w0']}/metrics"))["syncline_worker_steps_total"]
    time.sleep(1)
    after = samples(get(f"http://{nodes['w0']}/metrics"))["syncline_worker_steps_total"]
    for s in idle:
        s.close()
    if after <= before:
        fail(f"w0 did not train with 200 half-open connections open ({before} -> {after} steps)")

    step("Prometheus's step rate agrees with metrics.csv")
    wait_for("20 s of the job", lambda: time.time() - started > 22, 60)
    window = 10
    result = query(prom, f'sum(rate(syncline_worker_steps_total{{role="worker"}}[{window}s]))')
    if not result:
        fail("no step rate from Prometheus")
    prom_rate = float(result[0]["value"][1])
    # The newest row was written a report (5 steps, about 0.1 s) ago: the same window.
    wall = last_wall(out)
    csv_rate, workers = metrics_csv_rate(out, wall - window, wall)
    print(f"step rate: Prometheus {prom_rate:.2f}/s, metrics.csv {csv_rate:.2f}/s "
          f"({workers} workers)")
    if workers != 2 or abs(prom_rate - csv_rate) > 0.1 * csv_rate:
        fail(f"step rates differ by more than 10%: Prometheus {prom_rate}, metrics.csv {csv_rate}")

    step("a killed worker's up falls to 0, and its target leaves the file")
    w1_pid = worker_pid(job.pid, 1)
    if w1_pid is None:
        fail("cannot find w1's process among the launcher's children")
    os.kill(w1_pid, signal.SIGKILL)
    # Over the last minute: the target may already have left the file (and its series gone
    # stale) by the time this looks.
    wait_for("up{node=\"w1\"} == 0",
             lambda: any(r["value"][1] == "0"
                         for r in query(prom, 'min_over_time(up{node="w1"}[1m])')), 30)
    wait_for("w1 out of targets.json",
             lambda: (t := targets()) is not None and "w1" not in
             {x["labels"]["node"] for x in t}, 30)
    if job.wait(timeout=180) != 0:
        fail(f"the job did not go on without w1: {(tmp / 'launch.log').read_text()[-3000:]}")
    if targets() != []:
        fail(f"targets left after the job: {targets()}")


if __name__ == "__main__":
    main()
