"""A Python worker shows up in the job's metrics as a built-in one does (--metrics-port): the
launcher lists its /metrics page for Prometheus, and the page counts its steps and examples."""


def test_python_workers_serve_metrics_and_are_listed(job, tmp_path):
    out = tmp_path / "run"
    run = job("basic.py", ["--servers", "1", "--sync", "bsp", "--metrics-port", "0"], workers=2,
              args=[12, out])
    for rank in range(2):
        m = run.result(rank)["metrics"]
        assert m["labels"] == {"job": "syncline", "run": str(out), "role": "worker",
                               "rank": str(rank), "node": f"w{rank}"}
        assert m["steps"] == 12
        assert m["examples"] == 12 * 8
        assert m["build_info"], m
