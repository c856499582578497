"""Checkpoints of jobs whose workers are Python scripts."""

FLAGS = ["--servers", "2", "--sync", "bsp", "--checkpoint-every", "10"]


def test_a_bsp_job_killed_and_resumed_ends_with_the_parameters_of_an_uninterrupted_run(job,
                                                                                      tmp_path):
    clean = job("resume.py", FLAGS + ["--checkpoint-dir", str(tmp_path / "ck-clean")],
                workers=2, args=[35, -1, 0], name="clean")
    ck = str(tmp_path / "ck")
    killed = job("resume.py", FLAGS + ["--checkpoint-dir", ck], workers=2, args=[35, 25, 1],
                 name="killed", expect_ok=False)
    assert killed.code != 0 and "w1 killed by signal 9" in killed.summary["error"]
    resumed = job("resume.py", FLAGS + ["--checkpoint-dir", ck, "--resume"], workers=2,
                  args=[35, -1, 0], name="resumed")
    r = resumed.result(0)
    # The newest checkpoint complete on disk before the kill at step 25 (the servers write
    # theirs in the background: 20 when it had finished, else 10).
    assert r["start"] in (10, 20)
    assert r["hex"] == clean.result(0)["hex"]  # bit for bit
    # The worker's own state came back: its losses of steps 0..19, then the resumed ones.
    assert r["losses"] == clean.result(0)["losses"]
    assert resumed.summary["status"] == "ok"


def test_a_worker_command_cannot_restart_in_place(job):
    run = job("resume.py", FLAGS + ["--max-restarts", "1"], workers=1, args=[5, -1, 0],
              expect_ok=False)
    assert run.code == 2
    assert "--max-restarts" in run.launcher_log and "--resume" in run.launcher_log
