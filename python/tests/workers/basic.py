"""A small model of a sharded embedding and a linear layer, trained a few steps: the launcher's
`--`, init() from the environment, and the job's report. Arguments: the steps (20), and the run
folder of a job started with --metrics-port: the worker then reads its own /metrics page, which
the launcher lists in OUT/prometheus/targets.json, and reports what it counts."""
import json
import pathlib
import sys
import urllib.request

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
result = {"rank": st.rank(), "world": st.world_size(), "steps": steps}
if len(sys.argv) > 2:
    targets = json.loads((pathlib.Path(sys.argv[2]) / "prometheus" / "targets.json").read_text())
    mine = [t for t in targets if t["labels"]["node"] == f"w{st.rank()}"]
    url = f"http://{mine[0]['targets'][0]}/metrics"
    page = urllib.request.urlopen(url, timeout=10).read().decode()
    values = dict(line.rsplit(" ", 1) for line in page.splitlines()
                  if line and not line.startswith("#"))
    result["metrics"] = {"labels": mine[0]["labels"],
                         "steps": float(values["syncline_worker_steps_total"]),
                         "examples": float(values["syncline_worker_examples_total"]),
                         "build_info": [k for k in values if k.startswith("syncline_build_info")]}
print("RESULT " + json.dumps(result), flush=True)
st.finish(evaluate=lambda: {"loss": 0.25, "accuracy": 0.5, "examples": 100})
