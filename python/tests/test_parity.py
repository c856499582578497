"""syncline.torch against plain PyTorch: the same model, the same batches, the same start."""
import numpy as np
import pytest

SERVERS = ["--servers", "2", "--sync", "bsp"]


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_one_bsp_worker_trains_the_losses_of_plain_pytorch(job, optimizer):
    # ShardedEmbedding + DistributedOptimizer against nn.Embedding(sparse=True) and the torch
    # optimizer: the servers' SGD is torch's; their Adagrad is torch's with
    # initial_accumulator_value 0 and the eps given (torch's default 1e-10 here).
    run = job("parity.py", SERVERS, workers=1, args=[optimizer, 100, 16, "reference"])
    r = run.result(0)
    assert len(r["losses"]) == 100
    assert max_diff(r["losses"], r["ref_losses"]) < 1e-5
    assert max_diff(r["rows"], r["ref_rows"]) < 1e-5
    assert max_diff(r["dense"], r["ref_dense"]) < 1e-5
    # It trained: the loss fell, so the comparison is not of two models that stood still.
    assert np.mean(r["losses"][-10:]) < np.mean(r["losses"][:10]) - 0.02
    assert run.summary["status"] == "ok"
    assert run.summary["steps_per_worker"] == 100


def test_two_bsp_workers_of_batch_b_train_one_worker_of_batch_2b(job):
    one = job("parity.py", SERVERS, workers=1, args=["adagrad", 40, 32], name="one")
    two = job("parity.py", SERVERS, workers=2, args=["adagrad", 40, 32], name="two")
    a, b = one.result(0), two.result(0)
    assert max_diff(a["rows"], b["rows"]) < 1e-5
    assert max_diff(a["dense"], b["dense"]) < 1e-5
    # Each step's loss of the union batch is the mean of the two halves'.
    halves = np.mean([two.result(0)["losses"], two.result(1)["losses"]], axis=0)
    assert max_diff(a["losses"], halves) < 1e-5
