"""A worker script that fails ends the job as a failed built-in worker does, naming it."""
import pytest


@pytest.mark.parametrize("how,reason", [
    ("raise", "w1 (pid"),
    ("exit", "the worker script ended without syncline.torch.finish()"),
    ("kill", "w1 killed by signal 9"),
])
def test_under_bsp_a_failed_worker_script_fails_the_job_naming_it(job, how, reason):
    run = job("fails.py", ["--servers", "1", "--sync", "bsp"], workers=2, args=[how, 1, 20],
              expect_ok=False)
    assert run.code == 1
    assert run.summary["status"] == "failed"
    assert reason in run.summary["error"]
    if how == "raise":  # the exception's last line, as the script printed it
        assert "raised RuntimeError: the data loader broke at step 3" in run.summary["error"]


def test_under_asp_the_job_goes_on_without_a_killed_worker_script(job):
    run = job("fails.py", ["--servers", "1", "--sync", "asp"], workers=2, args=["kill", 1, 30])
    assert run.summary["status"] == "ok"
    assert run.summary["workers_left"] == 1
    assert "RESULT" in run.logs[0]
