"""PyTorch models on Syncline: sharded embeddings on the parameter servers, and dense sync.

A worker script, started by ``syncline-launch [job flags] -- python3 train.py``::

    import syncline.torch as st
    st.init()                                  # joins the job the launcher started
    emb = st.ShardedEmbedding(16)              # rows live on the servers, any int64 id
    model = MyModel(emb)                       # any nn.Module around it
    opt = st.DistributedOptimizer(torch.optim.Adagrad(model.parameters(), lr=0.05, eps=1e-10))
    for x, ids, y in batches:
        opt.zero_grad()
        loss = loss_fn(model(x, ids), y)        # the forward pulls the batch's rows
        loss.backward()
        opt.step(examples=len(y), loss=loss.item())   # pushes, ends the iteration
    st.finish(evaluate=lambda: {"loss": ..., "auc": ..., "examples": ...})

What runs where follows the job (``--sync``):

- ``bsp``, ``ssp:S``, ``asp``: the embeddings' rows and the dense parameters live on the
  servers, which apply the update rule (the embeddings': the module's optimizer, else the job's
  ``--optimizer`` and ``--lr``; the dense parameters': the wrapped torch optimizer's kind and
  settings, SGD, Adagrad or Adam). The dense table starts from rank 0's parameters. Pulls wait
  as the consistency model says.
- ``hybrid``: rows on the servers (``--embedding-sync``), dense gradients all-reduced (mean),
  then the wrapped optimizer steps on every worker.
- ``allreduce``: dense gradients all-reduced (mean) with the job's algorithm and codec; then the
  wrapped optimizer steps on every worker. There are no servers: ShardedEmbedding is refused.

Gradients are taken as means over the step's ``examples`` (a loss averaged over the batch, as
torch's losses are by default): what reaches the servers is the gradient sum behind
``examples`` examples, so that 2 workers of batch B train as 1 worker of batch 2B under BSP.
Pushes and pulls take the job's codecs (``--compress``, ``--compress-pull``) with error
feedback. Errors Syncline reports are ``syncline.Error`` and its subclasses; a wrong dtype,
shape, device or layout of an argument raises TypeError or ValueError naming it.

Thread-safety: call it from one thread (the training loop).
"""
import atexit
import math
import sys
import threading
import time
import traceback

import numpy as np
import torch

import syncline
from syncline import _native

__all__ = [
    "init", "rank", "world_size", "spec", "is_initialized", "iteration", "checkpoint_state", "ShardedEmbedding",
    "ShardedEmbeddingBag", "DistributedOptimizer", "broadcast_parameters", "step", "finish",
    "timings",
]

# Table ids: the dense parameters, the broadcasts, then the embeddings' tables.
_DENSE_TABLE = 8
_BROADCAST_TABLES = 1024
_EMBEDDING_TABLES = 16

_PS_MODES = ("bsp", "asp", "ssp")

_worker = None
_lock = threading.Lock()


def _mode(sync):
    """The kind of a --sync text: bsp, asp, ssp, hybrid, allreduce, gossip, fedavg."""
    return sync.split(":", 1)[0]


class _Timings:
    """Seconds spent in Syncline's calls (pull, push, wait, clock) and in the glue around them."""

    def __init__(self):
        self.pull = self.push = self.clock = self.collective = 0.0
        self.glue = 0.0
        self.steps = 0

    def as_dict(self):
        return {"pull_s": self.pull, "push_s": self.push, "clock_s": self.clock,
                "collective_s": self.collective, "glue_s": self.glue, "steps": self.steps}


class _Worker:
    """The joined session and what this worker's modules share."""

    def __init__(self, session):
        self.session = session
        self.spec = session.spec
        self.mode = _mode(self.spec["sync"])
        self.timeout = float(self.spec["request_timeout"])
        self.tables = {}          # (dim, rule) -> table id of the unbounded embeddings
        self.next_table = _EMBEDDING_TABLES
        self.next_broadcast = _BROADCAST_TABLES
        self.names = set()
        self.recorded = {}        # table id -> [(keys, rows leaf)] of this step
        self.pushes = []          # tickets of pushes not yet waited for
        self.optimizer = None     # the DistributedOptimizer, if any
        self.timings = _Timings()
        self.finished = False

    def check_open(self, call):
        if self.finished:
            raise syncline.FailedPreconditionError(
                f"{call} after finish(): the worker has left the job")

    def settle_pushes(self):
        """Waits for the acknowledgements of this worker's pushes (errors surface here)."""
        t0 = time.perf_counter()
        pushes, self.pushes = self.pushes, []
        for ticket in pushes:
            self.session.wait(ticket, self.timeout)
        self.timings.push += time.perf_counter() - t0


def _require_worker(call):
    if _worker is None:
        raise syncline.FailedPreconditionError(
            f"{call}: call syncline.torch.init() first (it joins the job)")
    _worker.check_open(call)
    return _worker


def init(coordinator=None, rank=None, *, key_file=None, insecure=None, bind=None,
         startup_timeout=None):
    """Joins the running job as a worker and returns its settings (a dict).

    Without arguments, from the environment syncline-launch sets (SYNCLINE_COORDINATOR,
    SYNCLINE_RANK, SYNCLINE_KEY_FILE, ...); the rank may also come from Open MPI, PMI or Slurm
    (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID), as syncline-worker reads them. Arguments
    given win over the environment.
    """
    global _worker
    with _lock:
        if _worker is not None and not _worker.finished:
            raise syncline.FailedPreconditionError("init(): this process has joined a job already")
        env = _native.environment()
        coordinator = coordinator or env["coordinator"]
        if not coordinator:
            raise ValueError(
                "init(): no coordinator: start the script with `syncline-launch [job flags] -- "
                "python3 script.py`, or give init(coordinator=...) or SYNCLINE_COORDINATOR "
                "(syncline-launch --external-workers prints the address)")
        if rank is None:
            rank = env["rank"]
        if rank is None:
            raise ValueError(
                "init(): no rank: give init(rank=...) or SYNCLINE_RANK (or start the script "
                "under syncline-launch, mpirun or srun)")
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise ValueError(f"init(): rank must be an integer >= 0, not {rank!r}")
        session = _native.Session.join(
            coordinator, rank,
            bind=bind if bind is not None else env["bind"],
            interface=env["interface"], port_range=env["port_range"],
            world_size=env["world_size"],
            startup_timeout=float(startup_timeout if startup_timeout is not None
                                  else env["startup_timeout"]),
            key_file=key_file if key_file is not None else env["key_file"],
            insecure=bool(insecure if insecure is not None else env["insecure"]),
            metrics_port=env["metrics_port"])
        _worker = _Worker(session)
        _install_exit_hooks()
        return dict(_worker.spec)


_hooks_installed = False


def _install_exit_hooks():
    """A script that raises, or exits without finish(), fails the job with the reason (its
    exception's last line), instead of leaving the others to time out."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        w = _worker
        if w is not None and not w.finished:
            last = traceback.format_exception_only(kind, value)[-1].strip()
            w.finished = True
            try:
                w.session.abort(f"raised {last}")
            except Exception:  # the job may be gone already; the exit code still says it
                pass
        previous(kind, value, tb)

    def at_exit():
        w = _worker
        if w is not None and not w.finished:
            w.finished = True
            w.session.abort("the worker script ended without "
                            "syncline.torch.finish()")

    sys.excepthook = excepthook
    atexit.register(at_exit)


def iteration():
    """Iterations this worker has ended: 0 at the start, the checkpoint's clock in a job resumed
    from one (--resume), so that a training loop can go on from there."""
    return _require_worker("iteration()").session.iteration


def checkpoint_state(save, load=None):
    """Makes this worker's own state part of the job's checkpoints (--checkpoint-every,
    --checkpoint-seconds): `save()` returns a picklable object (its dense parameters under
    all-reduce, its optimizer's state, its place in its data, its random generators), which is
    written with the clock as this worker's part of each checkpoint (save() runs inside the
    step() that ends that clock: update what it saves before step()); the servers write the
    rest (the sharded embeddings, and under bsp/ssp/asp the dense table). In a job resumed
    from a checkpoint (--resume), `load(obj)` is called at once with what `save` gave then;
    iteration() tells where the run stood. A BSP job killed and resumed this way ends with the
    parameters of an uninterrupted run."""
    w = _require_worker("checkpoint_state()")
    if not callable(save) or (load is not None and not callable(load)):
        raise TypeError("save and load must be callables (load may be None)")
    import pickle

    w.session.set_checkpoint_state(lambda: pickle.dumps(save(), protocol=4))
    restored = w.session.restored_state
    if load is not None and restored is not None and len(restored) > 0:
        load(pickle.loads(restored))


def is_initialized():
    return _worker is not None and not _worker.finished


def rank():
    """This worker's rank, 0..world_size()-1."""
    return _require_worker("rank()").session.rank


def world_size():
    """The job's workers."""
    return int(_require_worker("world_size()").spec["workers"])


def spec():
    """The job's settings (sync mode, workers, servers, seed, optimizer, codecs, ...)."""
    return dict(_require_worker("spec()").spec)


def timings():
    """Seconds this worker spent so far in Syncline's pulls, pushes, clocks and collectives,
    and in the package's own glue (hashing ids, merging gradients, copying); and its steps."""
    return _require_worker("timings()").timings.as_dict()


# --------------------------------------------------------------------------------------------
# Sparse embeddings on the servers.

_FNV_OFFSET, _FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
_M64 = (1 << 64) - 1


def _salt(name):
    """A stable 64-bit salt of a module's name (Python's hash() differs between processes)."""
    h = _FNV_OFFSET
    for b in name.encode():
        h = ((h ^ b) * _FNV_PRIME) & _M64
    return h


def _mix(ids, salt):
    """A bijection of 64-bit ids (MurmurHash3's finaliser) after xor with the salt: distinct ids
    of one module stay distinct, and modules that share a table do not collide."""
    x = ids.view(np.uint64) ^ np.uint64(salt)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(33))
        x = x * np.uint64(0xFF51AFD7ED558CCD)
        x = x ^ (x >> np.uint64(33))
        x = x * np.uint64(0xC4CEB9FE1A85EC53)
        x = x ^ (x >> np.uint64(33))
    return x


def _rule(optimizer, lr, l2, eps, spec):
    """The servers' rule for a module: its own settings, else the job's."""
    kind = optimizer if optimizer is not None else spec["optimizer"]
    if kind not in ("sgd", "adagrad", "adam", "ftrl"):
        raise ValueError(f"optimizer: '{kind}' is not one of the servers' rules: sgd, adagrad, "
                         "adam, ftrl")
    return (kind, float(lr if lr is not None else spec["lr"]),
            float(l2 if l2 is not None else spec["l2"]), float(eps))


class _ShardedRows(torch.nn.Module):
    """What ShardedEmbedding and ShardedEmbeddingBag share: the table, the keys, the pulls."""

    _count = 0

    def __init__(self, dim, num_embeddings, optimizer, lr, l2, eps, init_scale, name):
        super().__init__()
        w = _require_worker(type(self).__name__ + "()")
        if w.mode == "allreduce":
            raise syncline.FailedPreconditionError(
                f"{type(self).__name__} keeps its rows on the parameter servers, and --sync "
                "allreduce has none: use --sync hybrid (rows on the servers, dense layers "
                "all-reduced) or bsp/ssp/asp, or torch.nn.Embedding for a table every worker "
                "can hold")
        if not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= 65536:
            raise ValueError(f"dim must be an integer in [1, 65536], not {dim!r}")
        if num_embeddings is not None and (not isinstance(num_embeddings, int)
                                           or num_embeddings < 1):
            raise ValueError(f"num_embeddings must be an integer >= 1 or None, not "
                             f"{num_embeddings!r}")
        if not (init_scale >= 0 and math.isfinite(init_scale)):
            raise ValueError(f"init_scale must be a number >= 0, not {init_scale!r}")
        if name is None:
            name = f"{type(self).__name__}{_ShardedRows._count}"
            _ShardedRows._count += 1
        if name in w.names:
            raise ValueError(f"name: another sharded embedding is named '{name}' already")
        w.names.add(name)
        self.name = name
        self._w = w
        self.dim = dim
        self.num_embeddings = num_embeddings
        self.init_scale = float(init_scale)
        self.rule = _rule(optimizer, lr, l2, eps, w.spec)
        self.salt = _salt(name)
        key = (dim, self.rule, self.init_scale)
        # Unbounded modules of one width and rule share a table (one pull and one push per
        # server and step for all of them); a bounded one has a table of its own.
        if num_embeddings is None and key in w.tables:
            self.table = w.tables[key]
            return
        self.table = w.next_table
        w.next_table += 1
        if num_embeddings is None:
            w.tables[key] = self.table
        kind, lr_, l2_, eps_ = self.rule
        t0 = time.perf_counter()
        w.session.declare_table(self.table, False, num_embeddings or 0, dim, optimizer=kind,
                                lr=lr_, l2=l2_, eps=eps_, init_scale=self.init_scale,
                                seed=int(w.spec["seed"]), timeout=w.timeout)
        w.timings.push += time.perf_counter() - t0
        self._prefetched = None

    def keys_of(self, ids_cpu):
        """The table's keys of the (unique, CPU, int64) ids."""
        ids = ids_cpu.numpy()
        if self.num_embeddings is not None:
            if ids.size and (ids[0] < 0 or ids[-1] >= self.num_embeddings):
                bad = ids[0] if ids[0] < 0 else ids[-1]
                raise IndexError(f"ids: id {int(bad)} is out of range for '{self.name}', "
                                 f"num_embeddings={self.num_embeddings}")
            return ids.view(np.uint64)
        return _mix(ids, self.salt)

    def initial_rows(self, ids):
        """The values the rows of `ids` start from on the servers (before any push): for
        starting a plain PyTorch model alike, to compare the two."""
        self._check_ids(ids)
        w = _require_worker(f"{self.name}.initial_rows()")
        flat = ids.reshape(-1).cpu()
        keys = self.keys_of(flat) if self.num_embeddings is None else flat.numpy().view(np.uint64)
        if self.num_embeddings is not None and flat.numel() and (
                int(flat.min()) < 0 or int(flat.max()) >= self.num_embeddings):
            raise IndexError(f"ids: out of range for '{self.name}', "
                             f"num_embeddings={self.num_embeddings}")
        out = torch.empty((flat.numel(), self.dim), dtype=torch.float32)
        _native.initial_rows(self.table, self.dim, self.init_scale, int(w.spec["seed"]),
                             np.ascontiguousarray(keys), out.numpy())
        return out.view(*ids.shape, self.dim)

    def _check_ids(self, ids, what="ids"):
        if not isinstance(ids, torch.Tensor):
            raise TypeError(f"{what}: expected a torch.Tensor of int64 ids, not {type(ids).__name__}")
        if ids.dtype != torch.int64:
            raise TypeError(f"{what}: dtype {ids.dtype}; expected torch.int64")
        if ids.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{what}: a tensor on {ids.device}; expected the CPU or a CUDA device")

    def _unique_keys(self, ids):
        """(sorted distinct keys, per id its key's position) of a batch's ids, on the CPU."""
        flat = ids.reshape(-1)
        if flat.is_cuda:
            flat = flat.cpu()
        # Compressed pulls need the keys ascending; other reads take them as they come.
        sort = self._w.spec["compress_pull"] != "none"
        return _native.unique_keys(flat.contiguous(), self.salt, self.num_embeddings or 0,
                                   self.name, sort)

    def pull(self, ids):
        """(unique ids' rows as a leaf tensor on ids' device, inverse index) for a batch."""
        w = _require_worker(f"{self.name}.forward()")
        g0 = time.perf_counter()
        keys, inverse = self._unique_keys(ids)
        inverse = torch.from_numpy(inverse)
        if ids.is_cuda:
            inverse = inverse.to(ids.device, non_blocking=True)
        pre = getattr(self, "_prefetched", None)
        self._prefetched = None
        if pre is not None and np.array_equal(pre[0], keys):
            _, host, ticket = pre
            w.timings.glue += time.perf_counter() - g0
        else:
            host = torch.empty((len(keys), self.dim), dtype=torch.float32,
                               pin_memory=ids.is_cuda)
            w.timings.glue += time.perf_counter() - g0
            w.settle_pushes()  # a pull reads this worker's own last pushes
            t0 = time.perf_counter()
            ticket = w.session.pull(self.table, keys, host.numpy())
            w.timings.pull += time.perf_counter() - t0
        t0 = time.perf_counter()
        w.session.wait(ticket, w.timeout)
        w.timings.pull += time.perf_counter() - t0
        rows = host.to(ids.device, non_blocking=True) if ids.is_cuda else host
        if torch.is_grad_enabled() and self.training:
            rows.requires_grad_(True)
            w.recorded.setdefault(self.table, []).append((keys, rows))
        return rows, inverse

    def prefetch(self, ids):
        """Starts the pull of a coming batch's rows while this one computes (under asp and
        ssp:S, as --read-ahead does: one more step of staleness). The forward that gets the same
        ids uses it; under bsp, whose reads must see every push of the step before, it does
        nothing."""
        w = _require_worker(f"{self.name}.prefetch()")
        self._check_ids(ids)
        if w.mode == "bsp" or (w.mode == "ssp" and int(w.spec["staleness"]) == 0):
            return
        keys, _ = self._unique_keys(ids)
        host = torch.empty((len(keys), self.dim), dtype=torch.float32, pin_memory=ids.is_cuda)
        t0 = time.perf_counter()
        ticket = w.session.pull(self.table, keys, host.numpy())
        w.timings.pull += time.perf_counter() - t0
        if self._prefetched is not None:  # an unused prefetch: complete it, drop its rows
            w.session.wait(self._prefetched[2], w.timeout)
        self._prefetched = (keys, host, ticket)


class ShardedEmbedding(_ShardedRows):
    """An embedding table whose rows live on the parameter servers, like nn.Embedding.

    forward(ids): int64 ids of any shape in (any 64-bit value; with num_embeddings, 0 to
    num_embeddings-1), float32 of shape ids.shape + (dim,) out, on ids' device. The forward pulls
    the batch's unique ids (one request per server), under the job's consistency model; the
    backward's row gradients are summed by id and pushed once a step by step() (or
    DistributedOptimizer.step()), for all sharded embeddings of one width and rule together.

    optimizer, lr, l2, eps: the servers' rule for the rows (sgd, adagrad, adam, ftrl); None:
    the job's --optimizer, --lr, --l2. The servers' Adagrad is torch's with
    initial_accumulator_value 0; give eps=1e-10 for torch's default eps.
    init_scale: rows start uniform in [-init_scale, init_scale] from a generator of (the job's
    seed, the table, the id), the same on every server and after a restart; 0: zeros.
    name: what tells the modules' ids apart in a shared table (default: the creation order,
    which is the same in every worker of one script).
    """

    def __init__(self, dim, num_embeddings=None, *, optimizer=None, lr=None, l2=None, eps=1e-8,
                 init_scale=0.05, name=None):
        super().__init__(dim, num_embeddings, optimizer, lr, l2, eps, init_scale, name)

    def forward(self, ids):
        self._check_ids(ids)
        rows, inverse = self.pull(ids)
        return rows.index_select(0, inverse).view(*ids.shape, self.dim)

    def extra_repr(self):
        return (f"dim={self.dim}, num_embeddings={self.num_embeddings}, table={self.table}, "
                f"rule={self.rule[0]}:{self.rule[1]}")


class ShardedEmbeddingBag(_ShardedRows):
    """nn.EmbeddingBag over rows on the parameter servers: the sum or mean of each bag's rows.

    forward(input, offsets=None, per_sample_weights=None): as nn.EmbeddingBag's, with int64
    ids: a 2-D input is a batch of bags of equal size; a 1-D input takes offsets (the start of
    each bag). mode: "sum" or "mean" (per_sample_weights with "sum" only). The rows' rule and
    initialisation as ShardedEmbedding's.
    """

    def __init__(self, dim, num_embeddings=None, *, mode="mean", optimizer=None, lr=None,
                 l2=None, eps=1e-8, init_scale=0.05, name=None):
        if mode not in ("sum", "mean"):
            raise ValueError(f"mode must be 'sum' or 'mean', not {mode!r}")
        super().__init__(dim, num_embeddings, optimizer, lr, l2, eps, init_scale, name)
        self.mode = mode

    def forward(self, input, offsets=None, per_sample_weights=None):
        self._check_ids(input, "input")
        if input.dim() == 2:
            if offsets is not None:
                raise ValueError("offsets: must be None when input is 2-D (bags of equal size)")
        elif input.dim() == 1:
            if offsets is None:
                raise ValueError("offsets: a 1-D input needs offsets (the start of each bag)")
            self._check_ids(offsets, "offsets")
        else:
            raise ValueError(f"input: 1-D (with offsets) or 2-D, not {input.dim()}-D")
        rows, inverse = self.pull(input)
        return torch.nn.functional.embedding_bag(
            inverse.view(input.shape), rows, offsets, mode=self.mode,
            per_sample_weights=per_sample_weights)

    def extra_repr(self):
        return f"dim={self.dim}, mode={self.mode}, table={self.table}"


def _push_rows(w, examples):
    """Pushes this step's row gradients, one push per table (per server), as sums behind
    `examples` examples."""
    g0 = time.perf_counter()
    recorded, w.recorded = w.recorded, {}
    pushes = []
    for table, entries in recorded.items():
        entries = [(k, r) for k, r in entries if r.grad is not None]
        if not entries:
            continue
        if len(entries) == 1:
            keys, grad = entries[0][0], entries[0][1].grad
        else:  # one id in several forwards of the step: its gradients add up
            keys = np.concatenate([k for k, _ in entries])
            grads = torch.cat([r.grad.to("cpu") for _, r in entries])
            keys, inverse = np.unique(keys, return_inverse=True)
            grad = torch.zeros((len(keys), grads.shape[1]), dtype=torch.float32)
            grad.index_add_(0, torch.from_numpy(inverse.astype(np.int64)), grads)
        grad = grad.detach()
        if grad.is_cuda:
            host = torch.empty(grad.shape, dtype=torch.float32, pin_memory=True)
            host.copy_(grad)
            grad = host
        values = grad.contiguous()  # the step's own gradient: scaled in place
        bad = _native.scale_finite(values.numpy(), float(examples))
        if bad >= 0:
            raise syncline.InvalidArgumentError(
                f"table {table}: the row gradient of key {int(keys[bad // values.shape[1]])} is "
                "not finite (NaN or inf); nothing was pushed this step")
        pushes.append((table, keys, values))
    w.timings.glue += time.perf_counter() - g0
    t0 = time.perf_counter()
    for table, keys, values in pushes:
        w.pushes.append(w.session.push(table, keys, values.numpy(), float(examples)))
    w.timings.push += time.perf_counter() - t0


def step(examples, loss=float("nan")):
    """Ends this worker's iteration without a DistributedOptimizer: pushes the sharded
    embeddings' gradients and tells the job the iteration trained `examples` examples with mean
    loss `loss` (for its progress line, metrics.csv and summary.json)."""
    w = _require_worker("step()")
    _check_examples(examples)
    _push_rows(w, examples)
    _clock(w, examples, loss)


def _check_examples(examples):
    if isinstance(examples, bool) or not isinstance(examples, (int, float)) or not (
            examples > 0 and math.isfinite(examples)):
        raise ValueError(f"examples must be a number > 0, not {examples!r}")


def _clock(w, examples, loss):
    t0 = time.perf_counter()
    w.session.clock(float(examples), float(loss))
    w.timings.clock += time.perf_counter() - t0
    w.timings.steps += 1


# --------------------------------------------------------------------------------------------
# Dense parameters.

def _dense_params(params):
    out = []
    for p in params:
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"parameters: expected tensors, not {type(p).__name__}")
        if p.dtype != torch.float32:
            raise TypeError(f"parameters: a parameter of dtype {p.dtype}; Syncline syncs float32 "
                            "parameters (model.float())")
        out.append(p)
    return out


def _flat_copy(params):
    """The parameters' values, concatenated, on the CPU (float32)."""
    if not params:
        return torch.empty(0, dtype=torch.float32)
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float32) for p in params])


def _assign_flat(params, flat):
    """Copies the flat values back into the parameters."""
    at = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[at:at + n].view_as(p))
            at += n


def broadcast_parameters(params, root=0):
    """Makes every worker's parameters (a module, an iterable of tensors, or a state dict's
    values) equal to worker `root`'s. Under allreduce and hybrid, a broadcast among the workers;
    under bsp, ssp and asp, through a table on the servers that rank `root` makes with its
    values."""
    w = _require_worker("broadcast_parameters()")
    if isinstance(params, torch.nn.Module):
        params = list(params.parameters())
    elif isinstance(params, dict):
        params = list(params.values())
    params = _dense_params(list(params))
    flat = _flat_copy(params)
    if flat.numel() == 0:
        return
    if not isinstance(root, int) or not 0 <= root < int(w.spec["workers"]):
        raise ValueError(f"root must be a worker's rank, 0..{int(w.spec['workers']) - 1}")
    t0 = time.perf_counter()
    if w.mode in _PS_MODES:
        table = w.next_broadcast
        w.next_broadcast += 1
        mine = w.session.rank == root
        w.session.declare_table(table, True, flat.numel(), 1, optimizer="sgd", lr=1.0,
                                initial=flat.numpy() if mine else None,
                                await_initial=not mine, timeout=w.timeout)
        w.session.wait(w.session.pull_dense(table, 0, flat.numpy()), w.timeout)
    else:
        w.session.broadcast(flat.numpy(), root)
    w.timings.collective += time.perf_counter() - t0
    _assign_flat(params, flat)


def _server_rule(optimizer):
    """The servers' rule (kind, lr, l2, eps, beta1, beta2) for a torch optimizer, or a
    ValueError saying why the servers cannot apply it."""
    groups = optimizer.param_groups
    first = {k: v for k, v in groups[0].items() if k != "params"}
    for g in groups[1:]:
        if {k: v for k, v in g.items() if k != "params"} != first:
            raise ValueError("optimizer: its parameter groups have different settings; the "
                             "servers apply one rule to the dense table (use one group, or "
                             "--sync allreduce/hybrid, where the optimizer steps on the workers)")
    where = ("torch.optim.{name} cannot run on the parameter servers ({why}); it works under "
             "--sync allreduce or hybrid, where the wrapped optimizer steps on every worker")
    name = type(optimizer).__name__
    wd = float(first.get("weight_decay", 0.0))
    if first.get("maximize", False):
        raise ValueError(where.format(name=name, why="maximize=True"))
    if isinstance(optimizer, torch.optim.SGD):
        if first.get("momentum", 0.0) != 0.0 or first.get("nesterov", False):
            raise ValueError(where.format(name=name, why="the servers' SGD has no momentum"))
        return ("sgd", float(first["lr"]), wd, 1e-8, 0.9, 0.999)
    if isinstance(optimizer, torch.optim.Adagrad):
        if first.get("lr_decay", 0.0) != 0.0 or first.get("initial_accumulator_value", 0.0) != 0.0:
            raise ValueError(where.format(
                name=name, why="the servers' Adagrad has no lr_decay and starts its sums at 0"))
        return ("adagrad", float(first["lr"]), wd, float(first["eps"]), 0.9, 0.999)
    if isinstance(optimizer, torch.optim.Adam):
        if first.get("amsgrad", False):
            raise ValueError(where.format(name=name, why="amsgrad=True"))
        b1, b2 = first["betas"]
        return ("adam", float(first["lr"]), wd, float(first["eps"]), float(b1), float(b2))
    raise ValueError(where.format(
        name=name, why="the servers apply SGD without momentum, Adagrad and Adam"))


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer over a model's dense parameters (Horovod's shape).

    Under bsp, ssp and asp the parameters live on the servers as one dense table, which starts
    from rank 0's values: step() pushes the gradients (with the job's codec) and pulls the new
    values, and the servers apply the wrapped optimizer's kind and settings (SGD without
    momentum, Adagrad, Adam; another is refused with the reason). Under allreduce and hybrid the
    gradients are all-reduced (mean) with the job's algorithm and codec, then the wrapped
    optimizer steps on every worker; the parameters start from rank 0's values (a broadcast
    when the optimizer is made; broadcast_parameters() does it for other tensors).

    step(examples, loss) also pushes the sharded embeddings' gradients and ends the iteration:
    the job's progress, metrics.csv and summary.json show it as a built-in worker's.
    """

    def __init__(self, optimizer, named_parameters=None):
        w = _require_worker("DistributedOptimizer()")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer: expected a torch.optim.Optimizer, not "
                            f"{type(optimizer).__name__}")
        rule = _server_rule(optimizer) if w.mode in _PS_MODES else None
        if w.optimizer is not None:
            raise syncline.FailedPreconditionError(
                "DistributedOptimizer(): this worker has one already (wrap one optimizer over "
                "all of the model's dense parameters)")
        self._opt = optimizer
        self._w = w
        if named_parameters is not None:
            params = [p for _, p in named_parameters]
            mine = {id(p) for g in optimizer.param_groups for p in g["params"]}
            if {id(p) for p in params} != mine:
                raise ValueError("named_parameters: not the optimizer's parameters")
        else:
            params = [p for g in optimizer.param_groups for p in g["params"]]
        self._params = _dense_params(params)
        self._numel = sum(p.numel() for p in self._params)
        # The torch.optim.Optimizer interface, on the wrapped optimizer's state.
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.defaults = optimizer.defaults
        self._flat = _flat_copy(self._params)
        self._grad = torch.zeros(self._numel, dtype=torch.float32)
        self._buf = torch.zeros(self._numel + 1, dtype=torch.float32)
        if w.mode in _PS_MODES and self._numel > 0:
            kind, lr, l2, eps, b1, b2 = rule
            mine = w.session.rank == 0
            t0 = time.perf_counter()
            w.session.declare_table(_DENSE_TABLE, True, self._numel, 1, optimizer=kind, lr=lr,
                                    l2=l2, eps=eps, beta1=b1, beta2=b2,
                                    initial=self._flat.numpy() if mine else None,
                                    await_initial=not mine, timeout=w.timeout)
            # Every worker starts from the table (rank 0's values, or a resumed job's).
            w.session.wait(w.session.pull_dense(_DENSE_TABLE, 0, self._flat.numpy()), w.timeout)
            w.timings.push += time.perf_counter() - t0
            _assign_flat(self._params, self._flat)
        elif self._numel > 0:
            # Every worker starts from rank 0's parameters.
            t0 = time.perf_counter()
            w.session.broadcast(self._flat.numpy(), 0)
            w.timings.collective += time.perf_counter() - t0
            _assign_flat(self._params, self._flat)
        w.optimizer = self

    def zero_grad(self, set_to_none=False):
        self._opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self._opt.state_dict()

    def load_state_dict(self, state_dict):
        self._opt.load_state_dict(state_dict)

    def _gather_grads(self):
        at = 0
        for p in self._params:
            n = p.numel()
            if p.grad is None:
                self._grad[at:at + n].zero_()
            else:
                self._grad[at:at + n].copy_(p.grad.detach().reshape(-1))
            at += n

    def _scale_grads(self, examples):
        """The gathered gradient as a sum over `examples` examples, or an error naming the
        first value that is not finite."""
        bad = _native.scale_finite(self._grad.numpy(), float(examples))
        if bad >= 0:
            raise syncline.InvalidArgumentError(
                f"the dense gradient is not finite (NaN or inf) at parameter value {bad}; "
                "nothing was pushed this step")

    def step(self, closure=None, *, examples, loss=float("nan")):
        """Syncs the dense parameters and the sharded embeddings of this step, and ends the
        iteration, which trained `examples` examples with mean loss `loss`."""
        if closure is not None:
            raise ValueError("closure: not supported (compute the loss before step())")
        w = _require_worker("DistributedOptimizer.step()")
        _check_examples(examples)
        g0 = time.perf_counter()
        if self._numel > 0:
            self._gather_grads()
            self._scale_grads(examples)
        w.timings.glue += time.perf_counter() - g0
        if w.mode in _PS_MODES:
            self._step_on_servers(w, examples, loss)
        else:
            self._step_by_allreduce(w, examples, loss)

    def _step_on_servers(self, w, examples, loss):
        t0 = time.perf_counter()
        if self._numel > 0:
            # self._grad stays as it is until the push is acknowledged (refresh() settles it).
            w.pushes.append(w.session.push_dense(_DENSE_TABLE, 0, self._grad.numpy(),
                                                 float(examples)))
        w.timings.push += time.perf_counter() - t0
        _push_rows(w, examples)
        _clock(w, examples, loss)
        if self._numel > 0:
            self.refresh()

    def refresh(self):
        """Pulls the dense parameters' current values from the servers into the model (the
        next iteration's, under the job's consistency model)."""
        w = self._w
        w.settle_pushes()
        t0 = time.perf_counter()
        w.session.wait(w.session.pull_dense(_DENSE_TABLE, 0, self._flat.numpy()), w.timeout)
        w.timings.pull += time.perf_counter() - t0
        g0 = time.perf_counter()
        _assign_flat(self._params, self._flat)
        w.timings.glue += time.perf_counter() - g0

    def _step_by_allreduce(self, w, examples, loss):
        t0 = time.perf_counter()
        if self._numel > 0:
            # Every worker's gradient sum, added up, over every worker's examples: the gradient
            # of the union batch, as BSP computes it.
            if w.spec["compress"] == "none":
                self._buf[:self._numel] = self._grad
                self._buf[self._numel] = float(examples)
                w.session.allreduce(self._buf.numpy(), "sum")
                total = float(self._buf[self._numel])
                torch.div(self._buf[:self._numel], total, out=self._grad)
            else:  # the gradient with the job's codec (and its residual); the count exactly
                count = np.array([examples], dtype=np.float32)
                w.session.allreduce(self._grad.numpy(), "sum", compress=True, residual=0)
                w.session.allreduce(count, "sum")
                self._grad.div_(float(count[0]))
        w.timings.collective += time.perf_counter() - t0
        g0 = time.perf_counter()
        at = 0
        for p in self._params:
            n = p.numel()
            g = self._grad[at:at + n].view_as(p).to(p.device)
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
            at += n
        w.timings.glue += time.perf_counter() - g0
        self._opt.step()
        _push_rows(w, examples)
        _clock(w, examples, loss)


def finish(evaluate=None, timeout=600.0):
    """Ends this worker: its pushes are acknowledged, the servers and the coordinator are told.
    `evaluate`, if given, is called when the coordinator asks for the final model's evaluation
    (on one worker): it returns a dict of `loss`, `auc` or `accuracy`, and `examples`, which go
    into summary.json. Rows the model pulls inside it, and the dense parameters, are the final
    model's."""
    global _worker
    w = _require_worker("finish()")
    if evaluate is not None and not callable(evaluate):
        raise TypeError("evaluate: expected a callable returning a dict, or None")
    w.settle_pushes()
    w.recorded = {}

    def final_evaluation():
        if w.optimizer is not None and w.mode in _PS_MODES and w.optimizer._numel > 0:
            w.session.wait(w.session.pull_dense(_DENSE_TABLE, 0, w.optimizer._flat.numpy()),
                           w.timeout)
            _assign_flat(w.optimizer._params, w.optimizer._flat)
        with torch.no_grad():
            return evaluate()

    try:
        w.session.finish(final_evaluation if evaluate is not None else None, float(timeout))
    finally:
        w.finished = True
