"""Compares `syncline-launch privacy` with dp-accounting's RdpAccountant (run by
scripts/test-privacy-reference.sh in a test-only virtual environment).

Usage: reference_accountant.py PATH/TO/syncline-launch
Exits 1, listing every point that differs by more than 1%, else prints the largest difference.
"""
import json
import logging
import subprocess
import sys

import dp_accounting

logging.disable(logging.WARNING)  # dp-accounting warns about the orders it gives up

DELTA = 1e-5
RATES = [0.001, 0.004, 0.01, 0.05, 0.2, 1.0]
NOISE = [0.7, 1.0, 1.5, 3.0, 8.0]
STEPS = [1, 50, 1000, 20000]
BUDGETS = [(0.004, 14062, 1.0), (0.01, 1000, 3.0), (0.5, 30, 8.0), (256 / 60000, 14062, 3.0)]


def reference(q, z, steps):
    accountant = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    accountant.compose(event, steps)
    return accountant.get_epsilon(DELTA)


def ours(launch, *args):
    out = subprocess.run([launch, "privacy", "--delta", str(DELTA), *map(str, args)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    launch = sys.argv[1]
    bad, worst = [], 0.0
    for q in RATES:
        for z in NOISE:
            for steps in STEPS:
                want = reference(q, z, steps)
                got = ours(launch, "--sampling-rate", q, "--noise-multiplier", z,
                           "--steps", steps)["epsilon"]
                diff = abs(got - want) / max(want, 1e-12)
                worst = max(worst, diff)
                if diff > 0.01:
                    bad.append(f"q {q} z {z} steps {steps}: ours {got}, dp-accounting {want}")
    for q, steps, budget in BUDGETS:
        z = ours(launch, "--sampling-rate", q, "--epsilon", budget, "--steps", steps)[
            "noise_multiplier"]
        spent = reference(q, z, steps)
        if not (budget * 0.99 <= spent <= budget * 1.01):
            bad.append(f"q {q} steps {steps} budget {budget}: our noise {z} spends {spent} "
                       "by dp-accounting")
    if bad:
        print("\n".join(bad))
        return 1
    points = len(RATES) * len(NOISE) * len(STEPS)
    print(f"{points} points and {len(BUDGETS)} calibrations: largest difference "
          f"{worst * 100:.4f}% of dp-accounting's epsilon")
    return 0


if __name__ == "__main__":
    sys.exit(main())
