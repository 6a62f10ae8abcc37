#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""gpu_bench.py: the trainer against PyTorch on one GPU, in one run
(scripts/gpu-check.sh calls it on the GPU machine; doc/performance.md has
the figures). Interleaved repeats (trainer, torch eager, trainer, ...) so
that drift hits both sides alike; medians with min..max; ratios to torch
eager; for the GEMM-bound model the achieved TFLOP/s against the bf16 GEMM
rate measured in the same run (torch.matmul, 8192^3, random data).

  gpu_bench.py --trainer BUILD/trainer --mpiexec MPIEXEC --data DIR --out DIR
              [--repeats 3] [--quick]

Trainer throughput: from its --metrics log events, the global samples
between the first log at or after the warm-up and the last one, over the
wall time between them (each log event is taken after the device caught
up). For the large model the span includes the end-of-epoch evaluations, so
its figure is a lower bound. Writes gpu_bench.json and prints a table."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def flops_per_sample(hidden, classes=10):
    dims = [784] + list(hidden) + [classes]
    p = sum(dims[i] * dims[i + 1] for i in range(len(dims) - 1))
    return 6 * p - 2 * dims[0] * dims[1]


def run(cmd, log, env=None, timeout=600):
    t0 = time.time()
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env, timeout=timeout)
        f.write(p.stdout)
    return p.returncode, p.stdout, time.time() - t0


def trainer_rate(metrics, warm_step, global_batch):
    logs = []
    with open(metrics) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "log" and "time_s" in e:
                logs.append(e)
    logs = [e for e in logs if e["step"] >= warm_step]
    if len(logs) < 2:
        return None
    a, b = logs[0], logs[-1]
    return (b["step"] - a["step"]) * global_batch / (b["time_s"] - a["time_s"])


def trainer_final(metrics):
    acc = None
    with open(metrics) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "final":
                acc = e["test_acc"]
    return acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one repeat, no torch.compile")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = os.path.join(a.out, "gpu_bench.log")
    open(log, "w").close()
    R = 1 if a.quick else a.repeats
    py = sys.executable
    torch_py = os.path.join(HERE, "torch_mlp.py")
    results = {"configs": []}

    # the hardware reference: bf16 GEMM rate on random data
    rc, out, _ = run([py, "-c", (
        "import torch,time,statistics,json\n"
        "a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)\n"
        "b=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)\n"
        "for _ in range(5): a@b\n"
        "r=[]\n"
        "for _ in range(20):\n"
        "  s=torch.cuda.Event(enable_timing=True);e=torch.cuda.Event(enable_timing=True)\n"
        "  s.record();a@b;e.record();e.synchronize();r.append(2*8192**3/(s.elapsed_time(e)/1e3)/1e12)\n"
        "print(json.dumps({'gemm_bf16_tflops':statistics.median(r),'min':min(r),'max':max(r)}))\n")],
        log)
    gemm = json.loads(out.strip().splitlines()[-1]) if rc == 0 else {"gemm_bf16_tflops": None}
    results["gemm"] = gemm

    configs = [
        # name, hidden, batch, precision, trainer epochs, log every, warm step, torch steps
        ("default mlp fp32", [256, 128], 128, "fp32", 1, 50, 50, 400),
        ("default mlp bf16", [256, 128], 128, "bf16", 1, 50, 50, 400),
        ("large mlp bf16", [8192, 8192], 4096, "bf16", 6, 5, 5, 60),
    ]
    if a.quick:
        configs = configs[:1] + configs[2:]
    for name, hidden, batch, prec, epochs, every, warm, tsteps in configs:
        hs = ",".join(map(str, hidden))
        c = {"name": name, "hidden": hs, "batch": batch, "precision": prec,
             "flops_per_sample": flops_per_sample(hidden), "trainer": [], "trainer-graphs": [],
             "torch-eager": []}
        modes = ["eager"] if a.quick else ["eager", "compile", "graphs"]
        for m in modes[1:]:
            c["torch-" + m] = []
        for r in range(R):
            metrics = os.path.join(a.out, f"metrics-{len(results['configs'])}-{r}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            for impl, graph in (("trainer", "off"), ("trainer-graphs", "on")):
                if os.path.exists(metrics):
                    os.remove(metrics)
                rc, out, _ = run([a.mpiexec, "-n", "1", a.trainer, "--device", "cuda", "--data",
                                  a.data, "--hidden", hs, "--batch-size", str(batch),
                                  "--precision", prec, "--epochs", str(epochs), "--log-every",
                                  str(every), "--quiet", "--ckpt-dir", "none", "--metrics",
                                  metrics, "--cuda-graph", graph], log)
                rate = trainer_rate(metrics, warm, batch) if rc == 0 else None
                c[impl].append(rate)
                if rc != 0 or "without CUDA graphs" in out:
                    c.setdefault("errors", []).append(
                        f"{impl}: exit {rc}: " + " | ".join(out.strip().splitlines()[-2:]))
                if r == 0:
                    c[impl + "_test_acc"] = trainer_final(metrics) if rc == 0 else None
            for m in modes if r == 0 else ["eager"]:  # compile modes once: minutes each
                rc, out, _ = run([py, torch_py, "--data", a.data, "--hidden", hs, "--batch",
                                  str(batch), "--precision", prec, "--mode", m, "--steps",
                                  str(tsteps), "--warmup", str(max(warm, 10))], log)
                try:
                    j = json.loads(out.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    j = {"error": "no output"}
                c["torch-" + m].append(j.get("samples_per_s"))
                if "error" in j:
                    c.setdefault("errors", []).append(f"torch-{m}: {j['error']}")
        results["configs"].append(c)
        with open(os.path.join(a.out, "gpu_bench.json"), "w") as f:
            json.dump(results, f, indent=1)

    def med(xs):
        xs = [x for x in xs if x]
        return (statistics.median(xs), min(xs), max(xs)) if xs else None

    g = gemm.get("gemm_bf16_tflops")
    print(f"bf16 GEMM rate (8192^3, random): "
          f"{g:.0f} TFLOP/s" if g else "bf16 GEMM rate: not measured")
    print(f"{'config':<20} {'impl':<14} {'samples/s median (min..max)':<34} {'vs eager':>8} "
          f"{'TFLOP/s':>8} {'of GEMM':>8}")
    for c in results["configs"]:
        base = med(c["torch-eager"])
        for impl in ["trainer", "trainer-graphs", "torch-eager", "torch-compile", "torch-graphs"]:
            if impl not in c:
                continue
            m = med(c[impl])
            if not m:
                print(f"{c['name']:<20} {impl:<14} {'failed':<34}")
                continue
            ratio = f"{m[0] / base[0]:.2f}x" if base else "-"
            tf = m[0] * c["flops_per_sample"] / 1e12
            frac = f"{tf / g:.2f}" if g else "-"
            n = len([x for x in c[impl] if x])
            print(f"{c['name']:<20} {impl:<14} {m[0]:>10.0f} ({m[1]:.0f}..{m[2]:.0f}) n={n:<3} "
                  f"{ratio:>8} {tf:>8.1f} {frac:>8}")
        for impl in ["trainer", "trainer-graphs"]:
            if c.get(impl + "_test_acc") is not None:
                print(f"{c['name']:<20} {impl} test accuracy at its end: "
                      f"{c[impl + '_test_acc']:.4f}")
        for e in c.get("errors", []):
            print(f"{c['name']:<20} {e}")
    print(f"(json: {os.path.join(a.out, 'gpu_bench.json')}, log: {log})")


if __name__ == "__main__":
    main()
