"""Dense sync without servers: all-reduce (and the dense half of hybrid) for Python workers."""
import numpy as np
import pytest


def params(run, rank):
    return np.asarray(run.result(rank)["params"], dtype=np.float64)


def test_allreduce_keeps_every_worker_bitwise_equal_and_trains_the_model_of_bsp(job):
    ar = job("dense.py", ["--sync", "allreduce"], workers=2,
             args=["sgd", 30, 32], name="allreduce")
    bsp = job("dense.py", ["--servers", "1", "--sync", "bsp"], workers=2,
              args=["sgd", 30, 32], name="bsp")
    # Each worker started from other values: the optimizer made them rank 0's, and every step
    # leaves them equal to the bit.
    assert ar.result(0)["hex"] == ar.result(1)["hex"]
    assert float(np.max(np.abs(params(ar, 0) - params(bsp, 0)))) < 1e-5
    assert np.mean(ar.result(0)["losses"][-5:]) < np.mean(ar.result(0)["losses"][:5]) - 0.3
    assert ar.summary["status"] == "ok" and ar.summary["servers"] == 0


@pytest.mark.parametrize("flags", [["--sync", "allreduce:ring"],
                                   ["--sync", "allreduce", "--compress", "topk:0.25"],
                                   ["--sync", "allreduce", "--compress", "sign1"],
                                   ["--sync", "allreduce:doubling", "--compress", "fp16"]])
def test_a_torch_optimizer_the_servers_lack_steps_on_every_worker(job, flags):
    # SGD with momentum cannot run on the servers; under all-reduce the torch optimizer steps
    # on every worker, with the job's algorithm and codec, and the workers stay equal.
    run = job("dense.py", flags, workers=3, args=["momentum", 25, 48])
    hexes = [run.result(r)["hex"] for r in range(3)]
    assert hexes[0] == hexes[1] == hexes[2]
    assert np.mean(run.result(0)["losses"][-5:]) < np.mean(run.result(0)["losses"][:5])


def test_hybrid_keeps_rows_on_the_servers_and_all_reduces_the_dense_layers(job):
    run = job("parity.py", ["--servers", "2", "--sync", "hybrid"], workers=2,
              args=["adagrad", 40, 32])
    assert run.summary["status"] == "ok"
    losses = run.result(0)["losses"]
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def test_sharded_embedding_under_allreduce_is_refused_with_the_reason(job):
    run = job("parity.py", ["--sync", "allreduce"], workers=1, args=["sgd", 5, 8],
              expect_ok=False)
    assert run.code != 0
    assert "--sync allreduce has none" in run.summary["error"]
