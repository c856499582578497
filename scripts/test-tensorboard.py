#!/usr/bin/python3
"""TensorBoard reads the events file a job writes (OUT/tensorboard/events.out.tfevents.*),
through its own reader: a test-only virtual environment under the build folder gets
`pip install tensorboard` (once; it is kept for the next run), and its EventAccumulator loads
the file of a BSP job with --eval-every. The test checks that every worker's train/loss equals
metrics.csv's training loss step for step, that the held-out test/loss matches metrics.csv's
held-out rows, and that the other series are there.
Skips (exit 77), saying why, when the environment cannot be made (no venv module, PyPI out of
reach).
Usage: scripts/test-tensorboard.py BUILD_DIR"""
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

BUILD = pathlib.Path(sys.argv[1]).resolve()
LAUNCH = BUILD / "bin" / "syncline-launch"
VENV = BUILD / "test-venv-tensorboard"

READER = r"""
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in acc.Scalars(tag)]
                  for tag in acc.Tags()["scalars"]}))
"""


def fail(message):
    print(f"test-tensorboard: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def skip(message):
    print(f"SKIP: {message}")
    sys.exit(77)


def venv_python():
    python = VENV / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", "import tensorboard"],
                                          capture_output=True).returncode == 0:
        return python
    shutil.rmtree(VENV, ignore_errors=True)
    made = subprocess.run(["/usr/bin/python3", "-m", "venv", str(VENV)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        skip(f"cannot make a virtual environment (python3-venv): {made.stderr.strip()[-300:]}")
    pip = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--timeout", "30", "tensorboard"], capture_output=True, text=True)
    if pip.returncode != 0:
        shutil.rmtree(VENV, ignore_errors=True)
        skip(f"pip install tensorboard failed (PyPI out of reach?): {pip.stderr.strip()[-300:]}")
    return python


def main():
    python = venv_python()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="syncline-tensorboard-"))
    try:
        out = tmp / "run"
        r = subprocess.run(
            [str(LAUNCH), "--servers", "2", "--workers", "2", "--sync", "bsp", "--gen-rows",
             "6000", "--gen-test-rows", "1000", "--batch-size", "100", "--epochs", "2",
             "--log-every", "3", "--eval-every", "10", "--seed", "5", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        if r.returncode != 0:
            fail(f"the job failed (exit {r.returncode}):\n{r.stdout[-3000:]}")
        files = list((out / "tensorboard").glob("events.out.tfevents.*"))
        if len(files) != 1:
            fail(f"event files: {files}")
        read = subprocess.run([str(python), "-c", READER, str(files[0])], capture_output=True,
                              text=True, timeout=120)
        if read.returncode != 0:
            fail(f"EventAccumulator could not read {files[0]}: {read.stderr[-2000:]}")
        scalars = json.loads(read.stdout)
        lines = (out / "metrics.csv").read_text().splitlines()
        header = lines[0].split(",")
        col = {name: header.index(name) for name in header}
        train = {"0": [], "1": []}
        held_out = []
        for line in lines[1:]:
            f = line.split(",")
            if f[col["train_loss"]]:
                train[f[col["worker"]]].append((int(f[col["clock"]]), float(f[col["train_loss"]])))
            else:
                held_out.append((int(f[col["clock"]]), float(f[col["test_loss"]])))
        for w, rows in train.items():
            got = scalars.get(f"train/loss/w{w}")
            if got is None or len(got) != len(rows):
                fail(f"train/loss/w{w}: {got and len(got)} points, metrics.csv has {len(rows)}")
            for (step, value), (clock, loss) in zip(got, rows):
                # metrics.csv prints 6 significant digits; the event holds a float.
                if step != clock or abs(value - loss) > 1e-5 * max(1.0, abs(loss)):
                    fail(f"w{w} at step {step}: TensorBoard {value}, metrics.csv {clock} {loss}")
        if not held_out:
            fail("metrics.csv has no held-out rows (--eval-every 10)")
        # The held-out points, then the final evaluation at the last step.
        got = scalars.get("test/loss", [])
        if [s for s, _ in got[:len(held_out)]] != [c for c, _ in held_out]:
            fail(f"test/loss steps {got} against metrics.csv's {held_out}")
        for (step, value), (clock, loss) in zip(got, held_out):
            if abs(value - loss) > 1e-5 * max(1.0, abs(loss)):
                fail(f"test/loss at {step}: {value}, metrics.csv {loss}")
        for tag in ("train/steps_per_second/w0", "traffic/bytes/w1", "train/staleness/w0",
                    "test/auc", "test/evaluation_seconds"):
            if not scalars.get(tag):
                fail(f"no {tag} in {sorted(scalars)}")
        print(f"TensorBoard read {sum(len(v) for v in scalars.values())} scalars in "
              f"{len(scalars)} series; train/loss matches metrics.csv at "
              f"{sum(len(v) for v in train.values())} points, test/loss at {len(held_out)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test-tensorboard: OK")


if __name__ == "__main__":
    main()
