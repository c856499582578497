"""The examples in examples/pytorch/, each run on small data as a user runs it."""
import pathlib
import subprocess

from conftest import BUILD, PYTHON, run_job

EXAMPLES = pathlib.Path(__file__).parents[2] / "examples" / "pytorch"


def gen(tmp_path, *args):
    subprocess.run([str(BUILD / "bin" / "syncline-gen"), *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_dlrm_learns_criteo_clicks_with_rows_on_the_servers(tmp_path):
    gen(tmp_path, "criteo", "--rows", "20000", "--test-rows", "4000", "--seed", "3",
        "--out", str(tmp_path / "train.tsv"), "--test-out", str(tmp_path / "test.tsv"))
    run = run_job(tmp_path, EXAMPLES / "dlrm.py", ["--servers", "2", "--sync", "bsp"], workers=2,
                  args=["--train", tmp_path / "train.tsv", "--test", tmp_path / "test.tsv"])
    s = run.summary
    assert s["status"] == "ok" and s["test_examples"] == 4000
    assert s["test_auc"] > 0.6, s["test_auc"]
    assert s["examples"] == 20000  # every training line, once
    assert "step time:" in run.logs[0]


def test_fashion_mnist_mlp_trains_under_allreduce_with_momentum(tmp_path):
    gen(tmp_path, "fashion-mnist", "--out", str(tmp_path), "--limit", "3000")
    run = run_job(tmp_path, EXAMPLES / "fashion_mnist_mlp.py", ["--sync", "allreduce"],
                  workers=2, args=["--train", tmp_path / "fashion-mnist-train.libsvm",
                                   "--test", tmp_path / "fashion-mnist-test.libsvm",
                                   "--epochs", "2"])
    s = run.summary
    assert s["status"] == "ok" and s["servers"] == 0
    assert s["test_accuracy"] > 0.65, s["test_accuracy"]
