"""The job's consistency model holds for Python workers as for built-in ones."""
import pytest


@pytest.mark.parametrize("bound", [1, 2])
def test_ssp_serves_staleness_within_its_bound(job, bound):
    # Rank 1 is slower; rank 0 runs ahead as far as the bound lets it, reading ahead.
    run = job("ssp.py", ["--servers", "1", "--sync", f"ssp:{bound}"], workers=2, args=[60, 20])
    assert run.summary["status"] == "ok"
    assert 0 < run.summary["max_staleness_served"] <= bound
    assert run.summary["steps_per_worker"] == 60


def test_bsp_serves_no_staleness(job):
    run = job("ssp.py", ["--servers", "1", "--sync", "bsp"], workers=2, args=[30, 10])
    assert run.summary["max_staleness_served"] == 0
