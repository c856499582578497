#!/usr/bin/python3
"""A DLRM-style CTR model in PyTorch, trained on Syncline: its embedding rows live on the
parameter servers (syncline.torch.ShardedEmbedding), its dense layers sync as the job says.

The same shape as Syncline's built-in ctr model (models/ctr_model.h) and bench/ctr_pytorch.py:
  - 13 dense values log1p(max(I, 0)) through a linear layer to a D-vector x;
  - the 26 categorical fields hashed, each value a row of D embedding floats and one first-order
    weight (one ShardedEmbedding of width D + 1: one pull and one push per server and step);
  - the dot products of every pair among x and the 26 embeddings (351), with x, into one ReLU
    layer of H units and a linear output; the logit adds the 26 first-order weights;
  - log loss, Adagrad (accumulator 0, eps 1e-8), initial values uniform in [-0.05, 0.05] (rows)
    and [-0.1, 0.1] (dense layers).

Run it as every worker of a job (Criteo TSV: label, 13 integers, 26 hex categories):
  build/bin/syncline-gen criteo --rows 200000 --test-rows 20000 --out train.tsv --test-out test.tsv
  build/bin/syncline-launch --servers 2 --workers 2 --sync bsp -- \\
      /usr/bin/python3 examples/pytorch/dlrm.py --train train.tsv --test test.tsv
Each worker trains every W-th line (rank r: lines r, r + W, ...); worker 0 evaluates the final
model on --test for summary.json.
"""
import argparse
import math
import time

import numpy as np
import torch

DENSE, FIELDS = 13, 26


def read_tsv(path, rank=0, workers=1):
    """(labels, dense values, categorical ids) of every `workers`-th line from `rank` on. A
    categorical id is the field in its top 8 bits and the 32-bit hex value below (an empty value
    is its field's own "missing" id)."""
    labels, dense, cats = [], [], []
    with open(path) as f:
        for n, line in enumerate(f):
            if n % workers != rank:
                continue
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 1 + DENSE + FIELDS:
                raise SystemExit(f"{path}:{n + 1}: {len(parts)} fields, a Criteo line has 40")
            labels.append(float(parts[0]))
            dense.append([math.log1p(max(int(p), 0)) if p else 0.0 for p in parts[1:14]])
            cats.append([(field << 56) | (int(p, 16) if p else 0xFFFFFFFF)
                         for field, p in enumerate(parts[14:])])
    return (torch.tensor(labels, dtype=torch.float32), torch.tensor(dense, dtype=torch.float32),
            torch.tensor(cats, dtype=torch.int64))


class Dlrm(torch.nn.Module):
    """`rows` maps a batch's [B, 26] categorical ids to [B, 26, dim + 1] (an embedding and a
    first-order weight per id): a syncline.torch.ShardedEmbedding here, a torch.nn.Embedding in
    the plain PyTorch baseline (bench/ctr_pytorch.py), which shares this class."""

    def __init__(self, rows, dim, hidden):
        super().__init__()
        self.dim = dim
        self.rows = rows
        self.bottom = torch.nn.Linear(DENSE, dim)
        vectors = 1 + FIELDS
        self.register_buffer("pairs", torch.triu_indices(vectors, vectors, offset=1))
        self.top = torch.nn.Linear(dim + self.pairs.shape[1], hidden)
        self.out = torch.nn.Linear(hidden, 1)
        for p in [*self.bottom.parameters(), *self.top.parameters(), *self.out.parameters()]:
            torch.nn.init.uniform_(p, -0.1, 0.1)

    def forward(self, dense, cats):
        x = self.bottom(dense)                                # [B, D]
        r = self.rows(cats)                                   # [B, 26, D+1]
        e, first_order = r[..., :self.dim], r[..., self.dim].sum(1)
        v = torch.cat([x.unsqueeze(1), e], 1)                 # [B, 27, D]
        gram = torch.bmm(v, v.transpose(1, 2))                # [B, 27, 27]
        dots = gram[:, self.pairs[0], self.pairs[1]]          # [B, 351]
        h = torch.relu(self.top(torch.cat([x, dots], 1)))
        return self.out(h).squeeze(1) + first_order


def auc(scores, labels):
    """The area under the ROC curve, ties counted half."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    pos = y > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def report_step_time(st, t, seconds):
    """Where this worker's training time went: the package's glue (hashing ids, merging and
    copying gradients), Syncline's pulls, pushes and clocks (waits included), and the rest
    (PyTorch's forward, backward and the loop)."""
    parts = {"glue": t["glue_s"], "pull": t["pull_s"], "push": t["push_s"],
             "clock": t["clock_s"] + t["collective_s"]}
    parts["compute"] = max(0.0, seconds - sum(parts.values()))
    shares = " ".join(f"{k} {100 * v / seconds:.1f}%" for k, v in parts.items())
    print(f"dlrm: w{st.rank()} step time: {shares} of {seconds:.2f} s, {t['steps']} steps",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True, help="Criteo TSV of training examples")
    ap.add_argument("--test", help="Criteo TSV that worker 0 evaluates the final model on")
    ap.add_argument("--embedding-dim", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=256, help="examples per worker and step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1, help="of the dense layers' initial values")
    ap.add_argument("--threads", type=int, default=1, help="torch's threads per worker")
    args = ap.parse_args()

    import syncline.torch as st  # here: the baseline imports this file without Syncline

    st.init()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    y, dense, cats = read_tsv(args.train, st.rank(), st.world_size())
    rows = st.ShardedEmbedding(args.embedding_dim + 1, init_scale=0.05, eps=1e-8, name="criteo")
    model = Dlrm(rows, args.embedding_dim, args.hidden)
    opt = st.DistributedOptimizer(torch.optim.Adagrad(
        [p for n, p in model.named_parameters()], lr=args.lr, eps=1e-8))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    n = len(y)
    started = time.perf_counter()
    for _ in range(args.epochs):
        for begin in range(0, n, args.batch_size):
            end = min(n, begin + args.batch_size)
            opt.zero_grad()
            loss = loss_fn(model(dense[begin:end], cats[begin:end]), y[begin:end])
            loss.backward()
            opt.step(examples=end - begin, loss=loss.item())
    report_step_time(st, st.timings(), time.perf_counter() - started)

    def evaluate():
        model.eval()
        ty, tdense, tcats = read_tsv(args.test)
        logits = torch.cat([model(tdense[b:b + 4096], tcats[b:b + 4096])
                            for b in range(0, len(ty), 4096)])
        return {"loss": loss_fn(logits, ty).item(),
                "auc": auc(torch.sigmoid(logits).numpy().astype(np.float64), ty.numpy()),
                "examples": len(ty)}

    st.finish(evaluate=evaluate if args.test else None)


if __name__ == "__main__":
    main()
