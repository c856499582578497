"""A model of a ShardedEmbedding and a dense layer under BSP that checkpoints its own state
(the losses so far) and picks up where a resumed job stands (iteration()); its batches depend on
the step alone. Rank `victim` kills itself (SIGKILL) before step `kill_at` when kill_at >= 0.
Worker 0 prints the final rows and dense parameters from the evaluation.

Usage: resume.py STEPS KILL_AT VICTIM"""
import json
import os
import signal
import sys

import torch

import syncline.torch as st

steps, kill_at, victim = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
st.init()
rank = st.rank()
torch.manual_seed(3)
emb = st.ShardedEmbedding(4, init_scale=0.1, optimizer="adagrad", lr=0.1)
lin = torch.nn.Linear(4, 1)
opt = st.DistributedOptimizer(torch.optim.Adagrad(lin.parameters(), lr=0.1))
losses = []
st.checkpoint_state(save=lambda: {"losses": list(losses)},
                    load=lambda state: losses.extend(state["losses"]))
start = st.iteration()
for step in range(start, steps):
    if step == kill_at and rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    g = torch.Generator().manual_seed(1000 * step + rank)
    ids = torch.randint(0, 40, (16, 3), generator=g)
    y = (ids.sum(1) % 3 == 0).float()
    opt.zero_grad()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(
        lin(emb(ids).sum(1)).squeeze(1), y)
    loss.backward()
    losses.append(loss.item())  # before step(): a checkpoint at this clock saves it
    opt.step(examples=16, loss=loss.item())


def evaluate():
    rows = emb(torch.arange(40)).reshape(-1).tolist()
    dense = [v for p in lin.parameters() for v in p.detach().reshape(-1).tolist()]
    print("RESULT " + json.dumps({"start": start, "losses": losses,
                                  "hex": [float(v).hex() for v in rows + dense]}), flush=True)
    return {"loss": losses[-1], "examples": 16}


st.finish(evaluate=evaluate)
