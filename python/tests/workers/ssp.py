"""Two workers at different speeds (rank 1 sleeps argv[2] ms a step) train argv[1] steps, reading
ahead with prefetch() where the job allows it; the servers' staleness histogram goes into
summary.json."""
import json
import sys
import time

import torch

import syncline.torch as st

steps, slow_ms = int(sys.argv[1]), float(sys.argv[2])
st.init()
emb = st.ShardedEmbedding(8)
lin = torch.nn.Linear(8, 1)
opt = st.DistributedOptimizer(torch.optim.Adagrad(lin.parameters(), lr=0.05))
g = torch.Generator().manual_seed(st.rank())
batches = [torch.randint(0, 200, (32, 4), generator=g) for _ in range(steps)]
for i, ids in enumerate(batches):
    if i + 1 < steps:
        emb.prefetch(batches[i + 1])
    if st.rank() == 1:
        time.sleep(slow_ms / 1000)
    opt.zero_grad()
    loss = torch.nn.functional.softplus(lin(emb(ids).sum(1))).mean()
    loss.backward()
    opt.step(examples=32, loss=loss.item())
print("RESULT " + json.dumps({"rank": st.rank(), "timings": st.timings()}), flush=True)
st.finish()
