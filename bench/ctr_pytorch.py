#!/usr/bin/python3
"""The baseline of bench/ctr-vs-pytorch.sh: Syncline's ctr model, written in PyTorch.

The same shape and the same arithmetic as models/ctr_model.cc:
  - 13 dense values log1p(max(I, 0)) through a linear layer to a D-vector x;
  - one row per categorical (field, value) of D embedding floats and one first-order weight;
  - the dot products of every pair among x and the 26 embeddings (351 numbers), with x, into one
    ReLU layer of H units and a linear output; the logit adds the 26 first-order weights;
  - log loss, Adagrad (accumulator 0, eps 1e-8) on every parameter, sparse for the embeddings;
  - initial values uniform in [-0.05, 0.05] (rows) and [-0.1, 0.1] (dense parameters).
Examples are read in file order, one pass per epoch, as one Syncline worker reads them.

The rate is measured as Syncline's is: examples trained over the time between the first and the
last progress report (every 10 batches), so parsing and start-up are left out. Prints one line
of key=value pairs. Needs Debian's python3-torch (and libopenblas0-openmp for a fast BLAS); run
with /usr/bin/python3, not a virtual environment's interpreter.
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch

# The model and the AUC are the PyTorch example's (examples/pytorch/dlrm.py), with a plain
# torch.nn.Embedding for the rows.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "pytorch"))
from dlrm import Dlrm, auc  # noqa: E402

DENSE, FIELDS = 13, 26


def read_tsv(path, vocab):
    labels, dense, cats = [], [], []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 1 + DENSE + FIELDS:
                raise SystemExit(f"{path}: a line with {len(parts)} fields, not 40")
            labels.append(float(parts[0]))
            dense.append([math.log1p(max(int(p), 0)) if p else 0.0 for p in parts[1:14]])
            row = []
            for field, p in enumerate(parts[14:]):
                key = (field, p)  # an empty value is its field's own "missing" id
                index = vocab.get(key)
                if index is None:
                    index = vocab[key] = len(vocab)
                row.append(index)
            cats.append(row)
    return (torch.tensor(labels, dtype=torch.float32), torch.tensor(dense, dtype=torch.float32),
            torch.tensor(cats, dtype=torch.int64))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--embedding-dim", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    vocab = {}
    y, dense, cats = read_tsv(args.train, vocab)
    ty, tdense, tcats = read_tsv(args.test, vocab)
    rows = torch.nn.Embedding(len(vocab), args.embedding_dim + 1, sparse=True)
    torch.nn.init.uniform_(rows.weight, -0.05, 0.05)
    model = Dlrm(rows, args.embedding_dim, args.hidden)
    sparse = [model.rows.weight]
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("rows")]
    opts = [torch.optim.Adagrad(sparse, lr=args.lr, eps=1e-8),
            torch.optim.Adagrad(dense_params, lr=args.lr, eps=1e-8)]
    loss_fn = torch.nn.BCEWithLogitsLoss()
    n = len(y)
    # Examples trained between the first and the last report, as metrics.csv's rows count them.
    examples, pending, first_report, last_report, step = 0, 0, None, None, 0
    for _ in range(args.epochs):
        for begin in range(0, n, args.batch_size):
            end = min(n, begin + args.batch_size)
            for o in opts:
                o.zero_grad()
            loss = loss_fn(model(dense[begin:end], cats[begin:end]), y[begin:end])
            loss.backward()
            for o in opts:
                o.step()
            step += 1
            pending += end - begin
            if step % 10 == 0 or end == n:
                last_report = time.perf_counter()
                if first_report is None:
                    first_report = last_report
                else:
                    examples += pending
                pending = 0
    with torch.no_grad():
        scores = torch.sigmoid(model(tdense, tcats)).numpy().astype(np.float64)
        logits = model(tdense, tcats)
        test_loss = loss_fn(logits, ty).item()
    rate = examples / (last_report - first_report)
    print(f"pytorch: examples_per_s={rate:.0f} test_auc={auc(scores, ty.numpy()):.4f} "
          f"test_loss={test_loss:.4f} threads={args.threads} torch={torch.__version__}")


if __name__ == "__main__":
    main()
