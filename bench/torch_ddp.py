#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""torch_ddp.py: the CPU trainer's job in PyTorch DDP over gloo, the anchor of
bench/train_bench.sh (which runs both, interleaved, and prints the ratios).
It is a benchmark, not a test: nothing under `make check` runs it.

The same job as `mpiexec -n N trainer --device cpu --epochs 1 --ckpt-dir none`:
  data       Fashion-MNIST idx files, pixels (x/255 - 0.2860) / 0.3530, the
             whole set normalized once into one float32 tensor per rank; a
             batch is an index_select of the sampler's indices (PyTorch's
             fastest input path for a set this small: no DataLoader workers)
  model      --model linear (784-10) or mlp with --hidden widths, Linear+ReLU,
             nn.Linear's initialization U(-1/sqrt(in), 1/sqrt(in)) (the
             trainer's family; torch.manual_seed(--seed), DDP broadcasts rank 0's)
  loss       cross-entropy, mean over the batch; DDP averages over the ranks
  optimizer  SGD, lr 0.05, momentum 0.9 (dampening 0, no weight decay)
  sampler    DistributedSampler(shuffle, seed, drop_last=False): per rank
             ceil(N/W) indices cut into batches of --batch (the last short),
             the trainer's sampler semantics (doc/sampler.md) with torch's order
  threads    torch.set_num_threads(--threads), interop 1, OpenBLAS's own pool
             capped by OPENBLAS_NUM_THREADS (torch does not set it) and, where
             the library is mapped, openblas_set_num_threads; each rank pinned
             to one core (--bind core: the local rank's core, as mpiexec
             -bind-to core does for the trainer)
  DDP        default buckets (1 MiB first, then 25 MiB: ddpc's plan too),
             gradients all-reduced by gloo while backward runs

Timed, on rank 0, the same span as the trainer's `final` samples_per_s: the
sum over the optimizer steps of the wall time of one step (fetch the batch,
zero_grad, forward with the loss and hit statistics, backward with the
all-reduce, optimizer step); global samples / that time. Not timed: setup,
the progress all-reduces every --log-every steps (the trainer's log lines),
evaluation. epoch_s is the whole loop (steps and progress all-reduces), as
the trainer's `epoch` event's epoch_s.

--match-trainer replaces torch's initialization and order by the trainer's
own (its splitmix64 initialization from --seed, model.c, and its sampler's
permutation, tests/sampler_ref.py): both sides then train on the same
parameters and batches, and their losses agree to rounding for the first
steps (train_bench.sh's "same job" check).

Launch: torchrun (torch.distributed.run) or mpiexec (PMI_RANK/PMI_SIZE, with
MASTER_ADDR/MASTER_PORT set by the caller), or alone with --nproc N (spawns
N processes, MASTER_ADDR=127.0.0.1 and a free port). Rank 0 prints one JSON
line (and writes it to --json FILE); on failure {"error": ...} and exit 1."""
import argparse
import ctypes
import json
import math
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import MEAN, STD, idx_path, openblas_info, read_idx  # noqa: E402


def idx_tensor(path):
    dims, data, off = read_idx(path)
    return torch.frombuffer(data, dtype=torch.uint8, offset=off).reshape(dims)


def load(data, split):
    """(N, 784) float32 normalized as the trainer does, (N,) int64 labels;
    torch alone (a torch without numpy works too)"""
    x = idx_tensor(idx_path(data, split, "images-idx3-ubyte")).reshape(-1, 784).to(torch.float32)
    y = idx_tensor(idx_path(data, split, "labels-idx1-ubyte")).to(torch.int64)
    x = (x / 255.0 - MEAN) / STD
    return x.contiguous(), y


def dims_of(model, hidden, classes=10):
    return [784] + (list(hidden) if model == "mlp" else []) + [classes]


def model_of(dims):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def flops_per_sample(dims):
    """GEMM FLOP of one sample's forward and backward: forward 2 x weights,
    weight gradients 2 x weights, data gradients 2 x (weights - the first
    layer's: nothing needs the input's gradient). Biases, ReLU, softmax and
    the optimizer are not counted."""
    w = [dims[i] * dims[i + 1] for i in range(len(dims) - 1)]
    return 6 * sum(w) - 2 * w[0]


def splitmix64_stream(seed, n):
    """The first n outputs of splitmix64 from state `seed` (examples/model.c)."""
    import numpy as np  # --match-trainer only
    M = np.uint64(0xFFFFFFFFFFFFFFFF)
    k = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) + k * np.uint64(0x9E3779B97F4A7C15)) & M
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z


def trainer_init(model, dims, seed):
    """model_init_params: per layer weight (out, in) then bias (out,), each
    (2u - 1) / sqrt(in) with u = (splitmix64 >> 11) * 2^-53, one stream over
    all parameters in that order."""
    import numpy as np
    lin = [m for m in model if isinstance(m, torch.nn.Linear)]
    total = sum(m.weight.numel() + m.bias.numel() for m in lin)
    u = (splitmix64_stream(seed, total) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    off = 0
    with torch.no_grad():
        for l, m in enumerate(lin):
            bound = 1.0 / math.sqrt(dims[l])
            for p in (m.weight, m.bias):
                v = ((2.0 * u[off:off + p.numel()] - 1.0) * bound).astype(np.float32)
                p.copy_(torch.from_numpy(v).view_as(p))
                off += p.numel()


def shard_batches(order, n, rank, world, batch):
    """DistributedSampler's sharding of one epoch's order (drop_last=False):
    pad to ceil(n/W)*W by repeating the start, rank r takes [r::W], cut in
    batches of `batch`, the last one short."""
    per = -(-n // world)
    g = list(order) + list(order[:per * world - n])
    mine = torch.tensor(g[rank::world], dtype=torch.int64)
    return list(mine.split(batch))


def epoch_batches(a, n, rank, world, epoch):
    if a.match_trainer:
        sys.path.insert(0, os.path.join(HERE, "..", "tests"))
        from sampler_ref import permutation  # noqa: E402 (the trainer's order, exactly)
        order = permutation(a.seed, epoch, n)
    else:
        s = torch.utils.data.DistributedSampler(range(n), num_replicas=world, rank=rank,
                                                shuffle=True, seed=a.seed, drop_last=False)
        s.set_epoch(epoch)
        mine = torch.tensor(list(s), dtype=torch.int64)
        return list(mine.split(a.batch))
    return shard_batches(order, n, rank, world, a.batch)


def blas_info():
    """Which BLAS this process really calls: torch's build setting, the
    libraries mapped now, and OpenBLAS's kernel (core name) and threads."""
    cfg = torch.__config__.show()
    info = {}
    for key in ("BLAS_INFO", "LAPACK_INFO", "USE_MKLDNN", "USE_OPENMP"):
        i = cfg.find(key + "=")
        if i >= 0:
            info[key.lower()] = cfg[i + len(key) + 1:].split(",")[0].strip()
    for line in cfg.splitlines():
        if "CPU capability usage" in line:
            info["cpu_capability"] = line.split(":")[-1].strip()
        elif "Math Kernel Library" in line:  # MKL linked into libtorch_cpu (PyPI wheels)
            info["mkl"] = line.strip(" -")
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            b = os.path.basename(p)
            if p.startswith("/") and "cublas" not in b and any(
                    k in b for k in ("blas", "blis", "mkl", "dnnl")):
                libs.add(os.path.realpath(p))
    info["mapped"] = sorted(libs)
    for p in sorted(libs):
        if "openblas" in os.path.basename(p):
            info.update(openblas_info(p, threads=True))
    return info


def set_openblas_threads(n):
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "openblas" in line}
    for p in paths:
        try:
            ctypes.CDLL(p).openblas_set_num_threads(n)
        except (OSError, AttributeError):
            pass


def bind(a, local_rank):
    """--bind core: this rank on one core of those it may use (the local
    rank's), as mpiexec -bind-to core; a launcher that bound it already
    (one core left) decides."""
    cpus = sorted(os.sched_getaffinity(0))
    if a.bind == "core" and len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[local_rank % len(cpus)]})
    return sorted(os.sched_getaffinity(0))


def run(a):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cpus = bind(a, local_rank)
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set by an earlier parallel call
    t_setup = time.perf_counter()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    set_openblas_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "t10k")
    n = xtr.shape[0]
    hidden = [int(h) for h in a.hidden.split(",")] if a.model == "mlp" else []
    dims = dims_of(a.model, hidden)
    model = model_of(dims)
    if a.match_trainer:
        trainer_init(model, dims, a.seed)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    log, steps, samples, train_s = [], 0, 0, 0.0
    epoch_s = 0.0
    acc = {"loss": 0.0, "batches": 0, "hits": 0, "samples": 0}

    def progress():
        t = torch.tensor([acc["loss"], acc["batches"], acc["hits"], acc["samples"]],
                         dtype=torch.float64)
        dist.all_reduce(t)
        for k in acc:
            acc[k] = 0
        log.append({"step": steps, "loss": (t[0] / t[1]).item() if t[1] else None,
                    "train_acc": (t[2] / t[3]).item() if t[3] else None})

    stop = False
    for epoch in range(a.epochs):
        batches = epoch_batches(a, n, rank, world, epoch)
        if epoch == 0:
            setup_s = time.perf_counter() - t_setup
        t_epoch = time.perf_counter()
        for i, idx in enumerate(batches):
            if a.max_steps and steps >= a.max_steps:
                stop = True
                break
            t0 = time.perf_counter()
            x = xtr.index_select(0, idx)
            y = ytr.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            out = ddp(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            acc["loss"] += loss.item()  # the trainer's model sums these in its forward
            acc["hits"] += int((out.detach().argmax(1) == y).sum())
            train_s += time.perf_counter() - t0
            acc["batches"] += 1
            acc["samples"] += idx.numel()
            samples += idx.numel() * world  # every rank's batch has this size
            steps += 1
            if steps % a.log_every == 0 or i == len(batches) - 1:
                progress()
        epoch_s += time.perf_counter() - t_epoch
        if stop:  # --max-steps: no progress line for the rest (the trainer has none)
            break
    # evaluation, not timed: contiguous shards of the test set, summed (the trainer's)
    nt = xte.shape[0]
    lo, hi = nt * rank // world, nt * (rank + 1) // world
    with torch.no_grad():
        s = torch.zeros(2, dtype=torch.float64)
        for b in range(lo, hi, 1000):
            out = model(xte[b:min(b + 1000, hi)])
            yy = yte[b:min(b + 1000, hi)]
            s[0] += F.cross_entropy(out, yy, reduction="sum").item()
            s[1] += (out.argmax(1) == yy).sum().item()
    dist.all_reduce(s)
    res = None
    if rank == 0:
        res = {"impl": "torch-ddp-gloo", "torch": torch.__version__, "world": world,
               "model": a.model, "dims": "-".join(map(str, dims)), "batch": a.batch,
               "lr": a.lr, "momentum": a.momentum, "seed": a.seed,
               "init": "trainer" if a.match_trainer else "torch",
               "epochs": a.epochs, "steps": steps, "samples": samples, "train_s": train_s,
               "samples_per_s": samples / train_s if train_s > 0 else None,
               "epoch_s": epoch_s, "epoch_samples_per_s": samples / epoch_s if epoch_s else None,
               "setup_s": setup_s, "test_acc": (s[1] / nt).item(),
               "test_loss": (s[0] / nt).item(), "log": log,
               "flops_per_sample": flops_per_sample(dims),
               "threads": torch.get_num_threads(), "interop_threads":
               torch.get_num_interop_threads(), "cpus": cpus, "blas": blas_info(),
               "launcher": a.launcher}
    dist.barrier()
    dist.destroy_process_group()
    return res


def spawned(local_rank, a, world, port):
    os.environ.update({"RANK": str(local_rank), "LOCAL_RANK": str(local_rank),
                       "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    emit(a, run(a))


def emit(a, res):
    if res is None:
        return
    line = json.dumps(res)
    print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--model", choices=["linear", "mlp"], default="mlp")
    ap.add_argument("--hidden", default="256,128")
    ap.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: no limit)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1, help="intra-op (and OpenBLAS) threads")
    ap.add_argument("--bind", choices=["core", "none"], default="core")
    ap.add_argument("--match-trainer", action="store_true",
                    help="the trainer's initialization and batch order")
    ap.add_argument("--nproc", type=int, default=0,
                    help="no launcher: spawn this many ranks here")
    ap.add_argument("--json", help="rank 0 also writes its JSON line here")
    a = ap.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if "PMI_RANK" in os.environ and "RANK" not in os.environ:  # mpiexec (hydra)
        os.environ["RANK"] = os.environ["PMI_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["PMI_SIZE"]
        os.environ.setdefault("LOCAL_RANK", os.environ.get("MPI_LOCALRANKID",
                                                           os.environ["PMI_RANK"]))
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        a.launcher = "mpiexec"
    elif "RANK" in os.environ:
        a.launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "env"
    if "RANK" in os.environ:
        emit(a, run(a))
        return
    a.launcher = "spawn"
    world = a.nproc or 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(spawned, args=(a, world, port), nprocs=world)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one line the bench can show, not a traceback in a table
        print(json.dumps({"error": f"{type(e).__name__}: {e}",
                          "rank": os.environ.get("RANK")}), flush=True)
        sys.exit(1)
