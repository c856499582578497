"""Bad input to syncline.torch and syncline._native: each case must raise the named exception
with a message naming what is wrong, and the servers must hold what they held before."""
import json
import traceback

import numpy as np
import torch

import syncline
import syncline.torch as st

st.init()
session = st._worker.session
emb = st.ShardedEmbedding(4, init_scale=0.1, optimizer="sgd", lr=1.0)
bounded = st.ShardedEmbedding(4, num_embeddings=10, optimizer="sgd", lr=1.0)
lin = torch.nn.Linear(4, 1)
opt = st.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=0.5))
probe = torch.arange(8)
cases = []


def rows():
    emb.eval()
    with torch.no_grad():
        out = emb(probe).clone()
    emb.train()
    return out


def case(name, exc, words, fn):
    try:
        fn()
    except exc as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        cases.append({"case": name, "ok": not missing, "message": text, "missing": missing})
        return
    except Exception as e:  # the wrong kind
        cases.append({"case": name, "ok": False, "message": f"{type(e).__name__}: {e}",
                      "trace": traceback.format_exc()})
        return
    cases.append({"case": name, "ok": False, "message": "nothing was raised"})


before = rows()
table = emb.table
keys = emb.keys_of(probe)
case("float ids", TypeError, ["ids", "int64"], lambda: emb(torch.tensor([1.0, 2.0])))
case("meta device", ValueError, ["ids", "meta"],
     lambda: emb(torch.zeros(3, dtype=torch.int64, device="meta")))
case("values dtype", TypeError, ["values", "float32"],
     lambda: session.push(table, keys, np.zeros(32, dtype=np.float64), 1.0))
case("values size", ValueError, ["values", "31 floats", "32"],
     lambda: session.push(table, keys, np.zeros(31, dtype=np.float32), 1.0))
case("non-contiguous", ValueError, ["values", "contiguous"],
     lambda: session.push(table, keys, np.zeros(64, dtype=np.float32)[::2], 1.0))
case("keys dtype", TypeError, ["keys", "int64"],
     lambda: session.push(table, keys.astype(np.float32), np.zeros(32, dtype=np.float32), 1.0))
case("read-only out", ValueError, ["out", "writable"],
     lambda: session.pull(table, keys, np.zeros(32, dtype=np.float32).setflags(write=False)
                          or np.frombuffer(bytes(128), dtype=np.float32)))
case("cuda tensor for a host buffer", (ValueError, TypeError), ["values"],
     lambda: session.push(table, keys, torch.zeros(32, device="meta"), 1.0))
case("id past a bounded table", IndexError, ["12", "num_embeddings=10"],
     lambda: bounded(torch.tensor([3, 12])))
case("NaN pushed to the servers", syncline.InvalidArgumentError, [f"table {table}", "non-finite"],
     lambda: session.wait(session.push(table, keys, np.full(32, np.nan, dtype=np.float32), 1.0)))


def nan_step():
    opt.zero_grad()
    out = lin(emb(torch.tensor([[1, 2]])).sum(1))
    (out.sum() * float("nan")).backward()
    opt.step(examples=1)


case("NaN gradient", syncline.InvalidArgumentError, ["not finite", "nothing was pushed"], nan_step)
st._worker.recorded = {}


def nan_rows():
    (emb(torch.tensor([5, 6])).sum() * float("inf")).backward()
    st.step(examples=2)


case("NaN row gradient", syncline.InvalidArgumentError, [f"table {table}", "not finite"],
     nan_rows)
st._worker.recorded = {}
case("float64 parameters", TypeError, ["float64", "float32"],
     lambda: st.broadcast_parameters([torch.zeros(2, dtype=torch.float64)]))
case("momentum on the servers", ValueError, ["momentum", "allreduce", "hybrid"],
     lambda: st.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)))
case("AdamW on the servers", ValueError, ["AdamW", "SGD without momentum, Adagrad and Adam"],
     lambda: st.DistributedOptimizer(torch.optim.AdamW(lin.parameters())))
# The servers hold what they held: nothing of the refused calls was applied.
st.step(examples=1)
unchanged = torch.equal(before, rows())
st.finish()
case("emb after finish", syncline.FailedPreconditionError, ["after finish"],
     lambda: emb(probe))
case("push after finish", syncline.FailedPreconditionError, ["after finish"],
     lambda: session.push(table, keys, np.zeros(32, dtype=np.float32), 1.0))
print("RESULT " + json.dumps({"cases": cases, "unchanged": unchanged}), flush=True)
