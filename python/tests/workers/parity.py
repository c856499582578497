"""A model of a ShardedEmbedding (4 fields of one vocabulary) and a dense MLP, trained on seeded
batches, beside the same model in plain PyTorch (nn.Embedding(sparse=True) and the same torch
optimizer) started from the same values, in this one process: prints both models' losses per
step and, from the evaluation, the final rows and dense parameters.

Usage: parity.py OPTIMIZER STEPS GLOBAL_BATCH [reference]. Every worker trains its share of each
global batch (rank r: rows r*B..(r+1)*B-1 of it, B = GLOBAL_BATCH / workers); with `reference`
(one worker only) the plain PyTorch model trains the same batches."""
import json
import sys

import torch

import syncline.torch as st

VOCAB, FIELDS, DIM = 60, 4, 4
kind, steps, global_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
reference = "reference" in sys.argv[4:]

st.init()
workers, rank = st.world_size(), st.rank()
batch = global_batch // workers
torch.manual_seed(7)


class Model(torch.nn.Module):
    def __init__(self, emb):
        super().__init__()
        self.emb = emb
        self.hidden = torch.nn.Linear(FIELDS * DIM, 8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, ids):
        e = self.emb(ids).reshape(ids.shape[0], FIELDS * DIM)
        return self.out(torch.tanh(self.hidden(e))).squeeze(1)


def torch_optimizer(params, sparse=False):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1.0)
    if kind == "adagrad":
        return torch.optim.Adagrad(params, lr=0.1, eps=1e-10)
    if kind == "adam":
        return (torch.optim.SparseAdam if sparse else torch.optim.Adam)(params, lr=0.01)
    raise SystemExit(f"unknown optimizer {kind}")


rule = {"sgd": dict(optimizer="sgd", lr=1.0), "adagrad": dict(optimizer="adagrad", lr=0.1),
        "adam": dict(optimizer="adam", lr=0.01)}[kind]
emb = st.ShardedEmbedding(DIM, init_scale=0.1, eps=1e-10, **rule)
model = Model(emb)
if reference:
    ref_emb = torch.nn.Embedding(VOCAB, DIM, sparse=True)
    with torch.no_grad():
        ref_emb.weight.copy_(emb.initial_rows(torch.arange(VOCAB)))
    ref = Model(ref_emb)
    ref.hidden.load_state_dict(model.hidden.state_dict())
    ref.out.load_state_dict(model.out.state_dict())
    ref_opts = [torch_optimizer(list(ref.hidden.parameters()) + list(ref.out.parameters())),
                torch_optimizer(ref_emb.parameters(), sparse=True)]
opt = st.DistributedOptimizer(torch_optimizer(
    list(model.hidden.parameters()) + list(model.out.parameters())))

data = torch.Generator().manual_seed(11)
truth = torch.randn(VOCAB, generator=data)
losses, ref_losses = [], []
for step in range(steps):
    ids = torch.randint(0, VOCAB, (global_batch, FIELDS), generator=data)
    y = (truth[ids].sum(1) > 0).float()
    mine, my_y = ids[rank * batch:(rank + 1) * batch], y[rank * batch:(rank + 1) * batch]
    opt.zero_grad()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(mine), my_y)
    loss.backward()
    opt.step(examples=batch, loss=loss.item())
    losses.append(loss.item())
    if reference:
        for o in ref_opts:
            o.zero_grad()
        r = torch.nn.functional.binary_cross_entropy_with_logits(ref(mine), my_y)
        r.backward()
        for o in ref_opts:
            o.step()
        ref_losses.append(r.item())


def evaluate():
    model.eval()
    rows = emb(torch.arange(VOCAB)).reshape(-1).tolist()
    dense = [p.detach().reshape(-1).tolist() for p in
             list(model.hidden.parameters()) + list(model.out.parameters())]
    result = {"rank": rank, "losses": losses, "ref_losses": ref_losses, "rows": rows,
              "dense": [v for d in dense for v in d]}
    if reference:
        result["ref_rows"] = ref_emb.weight.detach().reshape(-1).tolist()
        result["ref_dense"] = [v for p in list(ref.hidden.parameters()) +
                               list(ref.out.parameters()) for v in p.detach().reshape(-1).tolist()]
    print("RESULT " + json.dumps(result), flush=True)
    return {"loss": losses[-1], "examples": global_batch}


st.finish(evaluate=evaluate)
if rank != 0:
    print("RESULT " + json.dumps({"rank": rank, "losses": losses}), flush=True)
