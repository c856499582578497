"""A dense MLP (no sharded embedding) trained on seeded batches: runs under every sync mode that
DistributedOptimizer serves. Each worker trains its share of each global batch; every worker
prints its final parameters and losses.

Usage: dense.py OPTIMIZER STEPS GLOBAL_BATCH"""
import json
import sys

import torch

import syncline.torch as st

kind, steps, global_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
st.init()
workers, rank = st.world_size(), st.rank()
batch = global_batch // workers
# Each worker starts from other values: DistributedOptimizer must make them rank 0's.
torch.manual_seed(100 + rank)
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.5),
        "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-10),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01),
        "momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)}[kind]
opt = st.DistributedOptimizer(make(model.parameters()))
data = torch.Generator().manual_seed(5)
w_true = torch.randn(10, 3, generator=data)
losses = []
for step in range(steps):
    x = torch.randn(global_batch, 10, generator=data)
    y = (x @ w_true).argmax(1)
    mine, my_y = x[rank * batch:(rank + 1) * batch], y[rank * batch:(rank + 1) * batch]
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(mine), my_y)
    loss.backward()
    opt.step(examples=batch, loss=loss.item())
    losses.append(loss.item())
params = [v for p in model.parameters() for v in p.detach().reshape(-1).tolist()]
print("RESULT " + json.dumps({"rank": rank, "losses": losses, "params": params,
                              "hex": [float(v).hex() for v in params]}), flush=True)
st.finish()
