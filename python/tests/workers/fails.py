"""Trains a few steps, then fails as argv[1] says on the rank argv[2] names: 'raise' (an
exception), 'exit' (sys.exit(0) without finish()), 'kill' (SIGKILL itself); the others train
argv[3] steps and finish."""
import os
import signal
import sys

import torch

import syncline.torch as st

how, victim, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
st.init()
emb = st.ShardedEmbedding(4)
g = torch.Generator().manual_seed(st.rank())
for i in range(steps):
    if st.rank() == victim and i == 3:
        if how == "raise":
            raise RuntimeError("the data loader broke at step 3")
        if how == "exit":
            sys.exit(0)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    ids = torch.randint(0, 100, (16, 2), generator=g)
    loss = emb(ids).pow(2).mean()
    loss.backward()
    st.step(examples=16, loss=loss.item())
st.finish()
print("RESULT {}", flush=True)
