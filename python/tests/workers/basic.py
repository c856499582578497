"""A small model of a sharded embedding and a linear layer, trained a few steps: the launcher's
`--`, init() from the environment, and the job's report."""
import json
import sys

import torch

import syncline.torch as st

st.init()
torch.manual_seed(0)
emb = st.ShardedEmbedding(4, init_scale=0.1)
lin = torch.nn.Linear(4, 1)
opt = st.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=0.1))
g = torch.Generator().manual_seed(st.rank())
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
for i in range(steps):
    ids = torch.randint(0, 50, (8, 3), generator=g)
    y = (ids.sum(1) % 2).float()
    opt.zero_grad()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(lin(emb(ids).sum(1)).squeeze(1), y)
    loss.backward()
    opt.step(examples=8, loss=loss.item())
print("RESULT " + json.dumps({"rank": st.rank(), "world": st.world_size(), "steps": steps}),
      flush=True)
st.finish(evaluate=lambda: {"loss": 0.25, "accuracy": 0.5, "examples": 100})
