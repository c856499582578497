#!/usr/bin/python3
"""A multilayer perceptron on Fashion-MNIST in PyTorch, its dense layers all-reduced by Syncline
(--sync allreduce: no parameter servers), with a torch optimizer the servers do not have (SGD
with momentum), stepping on every worker.

  build/bin/syncline-gen fashion-mnist --out data/fmnist
  build/bin/syncline-launch --workers 2 --sync allreduce -- /usr/bin/python3 \\
      examples/pytorch/fashion_mnist_mlp.py --train data/fmnist/fashion-mnist-train.libsvm \\
      --test data/fmnist/fashion-mnist-test.libsvm --epochs 2

Each worker trains every W-th image (rank r: images r, r + W, ...); worker 0 evaluates the
final model on --test for summary.json. The same script runs under --sync bsp (the dense table
on the servers) with --optimizer adam, which the servers do have.
"""
import argparse

import numpy as np
import torch

import syncline.torch as st

PIXELS, CLASSES = 784, 10


def read_libsvm(path, rank=0, workers=1):
    """(images as float32 [N, 784], labels) of every `workers`-th line from `rank` on."""
    labels, rows = [], []
    with open(path) as f:
        for n, line in enumerate(f):
            if n % workers != rank:
                continue
            parts = line.split()
            image = np.zeros(PIXELS, dtype=np.float32)
            for item in parts[1:]:
                index, value = item.split(":")
                image[int(index)] = float(value)
            labels.append(int(parts[0]))
            rows.append(image)
    return torch.from_numpy(np.stack(rows)), torch.tensor(labels, dtype=torch.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test")
    ap.add_argument("--hidden", default="256,128", help="hidden widths, input side first")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--optimizer", choices=["momentum", "adam", "sgd"], default="momentum")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    st.init()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    x, y = read_libsvm(args.train, st.rank(), st.world_size())
    widths = [PIXELS] + [int(w) for w in args.hidden.split(",")]
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], CLASSES))
    inner = {"momentum": lambda p: torch.optim.SGD(p, lr=args.lr, momentum=0.9),
             "sgd": lambda p: torch.optim.SGD(p, lr=args.lr),
             "adam": lambda p: torch.optim.Adam(p, lr=args.lr)}[args.optimizer]
    opt = st.DistributedOptimizer(inner(model.parameters()))
    loss_fn = torch.nn.CrossEntropyLoss()
    order = torch.Generator().manual_seed(args.seed + st.rank())
    for _ in range(args.epochs):
        perm = torch.randperm(len(y), generator=order)
        for begin in range(0, len(y), args.batch_size):
            idx = perm[begin:begin + args.batch_size]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step(examples=len(idx), loss=loss.item())

    def evaluate():
        model.eval()
        tx, ty = read_libsvm(args.test)
        logits = model(tx)
        return {"loss": loss_fn(logits, ty).item(),
                "accuracy": (logits.argmax(1) == ty).float().mean().item(),
                "examples": len(ty)}

    st.finish(evaluate=evaluate if args.test else None)


if __name__ == "__main__":
    main()
