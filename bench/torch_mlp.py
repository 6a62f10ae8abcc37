#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""torch_mlp.py: the trainer's job in PyTorch, the anchor of the GPU bench
(bench/gpu_bench.sh runs both in one go and prints the ratios).

Same model as `trainer --model mlp --hidden H` (Linear + ReLU layers,
nn.Linear's initialization), the same data (Fashion-MNIST idx files,
normalized with the trainer's mean and std), the same optimizer (SGD,
momentum 0.9, lr 0.05 unless told), the same batch and precision:
  fp32: float32 (TF32 off, PyTorch's default for matmuls)
  bf16: torch.autocast(bfloat16), float32 parameters
  fp16: torch.autocast(float16) + GradScaler (its defaults are the trainer's)
The training set lives on the GPU and each batch is an index_select of a
shuffled permutation: PyTorch's fastest input path for a data set this small
(the trainer gathers on the host and copies, so this favours PyTorch).

Modes: --mode eager | compile (torch.compile default) | graphs
(torch.compile mode="reduce-overhead", which uses CUDA graphs).
Prints one JSON line: samples/s over --steps timed steps after --warmup
steps, CUDA-synchronized; with --epochs-acc the test accuracy after that
many epochs from scratch instead (--seed fixes the shuffle, not the
initialization, which is PyTorch's own)."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import MEAN, STD, idx_path, read_idx  # noqa: E402


def idx_array(path):
    dims, data, off = read_idx(path)
    return np.frombuffer(data, dtype=np.uint8, offset=off).reshape(dims)


def load(data, split):
    x = idx_array(idx_path(data, split, "images-idx3-ubyte")).reshape(-1, 784).astype(np.float32)
    y = idx_array(idx_path(data, split, "labels-idx1-ubyte")).astype(np.int64)
    x = (x / 255.0 - MEAN) / STD
    return torch.from_numpy(x), torch.from_numpy(y)


def model_of(hidden, classes=10):
    layers, w = [], 784
    for h in hidden:
        layers += [torch.nn.Linear(w, h), torch.nn.ReLU()]
        w = h
    layers.append(torch.nn.Linear(w, classes))
    return torch.nn.Sequential(*layers)


def flops_per_sample(hidden, classes=10):
    """forward 2P, weight gradients 2P, data gradients 2(P - the first layer's)"""
    dims = [784] + list(hidden) + [classes]
    p = sum(dims[i] * dims[i + 1] for i in range(len(dims) - 1))
    return 6 * p - 2 * dims[0] * dims[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--hidden", default="256,128")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--mode", choices=["eager", "compile", "graphs"], default="eager")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--epochs-acc", type=int, default=0)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    hidden = [int(h) for h in a.hidden.split(",")]
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "t10k")
    xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)
    model = model_of(hidden).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    half = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    scaler = torch.amp.GradScaler("cuda") if a.precision == "fp16" else None
    lossf = torch.nn.CrossEntropyLoss()

    def step(x, y):
        with torch.autocast("cuda", dtype=half, enabled=half is not None):
            loss = lossf(model(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    if a.mode == "compile":
        step = torch.compile(step)
    elif a.mode == "graphs":
        step = torch.compile(step, mode="reduce-overhead")
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    n = xtr.shape[0]

    def batches():
        while True:
            perm = torch.randperm(n, device=dev, generator=gen)
            for i in range(0, n - a.batch + 1, a.batch):  # full batches only: fixed shapes
                idx = perm[i:i + a.batch]
                yield xtr.index_select(0, idx), ytr.index_select(0, idx)

    it = batches()
    out = {"impl": f"torch-{a.mode}", "torch": torch.__version__, "hidden": a.hidden,
           "batch": a.batch, "precision": a.precision,
           "gpu": torch.cuda.get_device_name(0)}
    if a.epochs_acc:
        steps = a.epochs_acc * (n // a.batch)
        for _ in range(steps):
            step(*next(it))
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=half, enabled=half is not None):
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        out.update({"epochs": a.epochs_acc, "steps": steps, "test_acc": acc})
        print(json.dumps(out))
        return
    for _ in range(a.warmup):
        step(*next(it))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step(*next(it))
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    sps = a.steps * a.batch / dt
    out.update({"steps": a.steps, "seconds": dt, "samples_per_s": sps,
                "tflops": sps * flops_per_sample(hidden) / 1e12})
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one line the bench can show, not a traceback in a table
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
