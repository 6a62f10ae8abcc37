#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""pipe_bench.py -- the pipeline trainer against pure data parallel on the
same ranks, in one run (`make bench`'s part "pipe", doc/pipeline.md).

On NP ranks (default 2, one core each): S = NP stages x 1 replica with the
schedules gpipe and 1f1b at M micro-batches (MS, default "2 4 8"), beside
pure data parallel over the same NP ranks at the same samples per step
(--batch-size B/NP per rank), and one rank alone at that per-rank batch
(NP times its samples/s is the bound: linear scaling with no communication).
Repeats are interleaved (every configuration once, then again), so that a
noisy stretch of the machine hits all of them; the report gives medians with
the min..max spread and the ratios per repeat (pipeline / data parallel),
and the measured bubble (each stage's time waiting for transfers / its step
time, the trainer's "pipeline: bubble" line) beside GPipe's theory
(S-1)/(M+S-1). The model's layers are split by FLOPs (the trainer prints
the split); the default model splits evenly into 2 stages. Timings are
printed, never judged: the exit status is 1 only when a run fails.

Environment: NP=2 REPEATS=3 STEPS=40 HIDDEN=512,512,512,512 BATCH=256
MS="2 4 8" THREADS=1 DATA=/usr/share/datasets/fashion-mnist TRAINER=./trainer
MPIEXEC=mpiexec MPIEXEC_FLAGS= MPIEXEC_BIND="-bind-to core" BENCH_OUT=bench-out
RUN_TIMEOUT=600
"""
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time


def env(name, default):
    return os.environ.get(name, default)


NP = int(env("NP", "2"))
REPEATS = int(env("REPEATS", "3"))
STEPS = int(env("STEPS", "40"))
HIDDEN = env("HIDDEN", "512,512,512,512")
BATCH = int(env("BATCH", "256"))
MS = [int(m) for m in env("MS", "2 4 8").split()]
THREADS = env("THREADS", "1")
DATA = env("DATA", "/usr/share/datasets/fashion-mnist")
TRAINER = env("TRAINER", "./trainer")
MPIEXEC = env("MPIEXEC", "mpiexec")
FLAGS = shlex.split(env("MPIEXEC_FLAGS", "")) + shlex.split(env("MPIEXEC_BIND", "-bind-to core"))
OUT = env("BENCH_OUT", "bench-out")
TIMEOUT = int(env("RUN_TIMEOUT", "600"))


def say(*a):
    print("pipe_bench:", *a, file=sys.stderr, flush=True)


def configs():
    """(name, ranks, trainer arguments)"""
    c = [("one-rank", 1, ["--batch-size", str(BATCH // NP)]),
         ("dp", NP, ["--batch-size", str(BATCH // NP)])]
    for m in MS:
        for sched in ("gpipe", "1f1b"):
            c.append((f"{sched}-M{m}", NP, ["--batch-size", str(BATCH), "--micro-batches", str(m),
                                             "--pipeline-stages", str(NP), "--schedule", sched]))
    return c


FINAL = re.compile(r"^final: .*samples_per_s=([0-9.]+)")
BUBBLE = re.compile(r"^pipeline: bubble .*?:((?: stage \d+ [0-9.]+%)+); theory .* = ([0-9.]+)%")
SPLIT = re.compile(r"^pipeline: \d+ stage\(s\).*")


def run(name, np_, args, rep):
    cmd = [MPIEXEC] + FLAGS + ["-n", str(np_), TRAINER, "--device", "cpu", "--data", DATA,
                               "--hidden", HIDDEN, "--threads", THREADS, "--max-steps", str(STEPS),
                               "--epochs", "1", "--log-every", str(STEPS), "--seed", str(41 + rep),
                               "--ckpt-dir", "none"] + args
    log = os.path.join(OUT, "runs", f"pipe.{name}.{rep}.log")
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=TIMEOUT)
        text, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), 124
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + text)
    r = {"config": name, "ranks": np_, "repeat": rep, "rc": rc, "wall_s": time.time() - t0}
    for line in text.splitlines():
        m = FINAL.match(line)
        if m:
            r["samples_per_s"] = float(m.group(1))
        m = BUBBLE.match(line)
        if m:
            r["bubble"] = [float(x) for x in re.findall(r"stage \d+ ([0-9.]+)%", m.group(1))]
            r["theory"] = float(m.group(2))
        if SPLIT.match(line):
            r["split"] = line
    if rc != 0 or "samples_per_s" not in r:
        say(f"{name} repeat {rep} FAILED (exit {rc}); log {log}")
        say("\n".join(text.splitlines()[-10:]))
    return r


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs, fmt="{:.0f}"):
    return (fmt + " (" + fmt + ".." + fmt + ")").format(med(xs), min(xs), max(xs)) if xs else "-"


def main():
    os.makedirs(os.path.join(OUT, "runs"), exist_ok=True)
    if BATCH % NP or any(BATCH % m for m in MS):
        say(f"BATCH={BATCH} must divide by NP={NP} and by each of MS={MS}")
        return 2
    cs = configs()
    say(f"{len(cs)} configurations x {REPEATS} repeats on {NP} rank(s), {STEPS} steps each, "
        f"mlp 784-{HIDDEN.replace(',', '-')}-10, {BATCH} samples per step")
    runs = []
    for rep in range(1, REPEATS + 1):
        for name, np_, args in cs:
            say(f"{name} repeat {rep}")
            runs.append(run(name, np_, args, rep))
    bad = any(r["rc"] != 0 or "samples_per_s" not in r for r in runs)
    by = {name: [r for r in runs if r["config"] == name and "samples_per_s" in r] for name, _, _ in cs}
    sps = {k: [r["samples_per_s"] for r in v] for k, v in by.items()}
    # per repeat ratios: pipeline / dp of the same repeat
    def ratios(name, ref):
        d = {r["repeat"]: r["samples_per_s"] for r in by[ref]}
        return [r["samples_per_s"] / d[r["repeat"]] for r in by[name] if r["repeat"] in d]
    lines = []
    p = lines.append
    split = next((r["split"] for r in runs if "split" in r), "")
    p(f"## Pipelines against data parallel ({NP} ranks, CPU, {REPEATS} interleaved repeats, "
      f"medians (min..max))")
    p("")
    p(f"mlp 784-{HIDDEN.replace(',', '-')}-10, {BATCH} samples per step, {STEPS} steps, "
      f"{THREADS} BLAS thread(s) per rank. {split}")
    p("")
    p("| configuration | samples/s | / data parallel | / bound | bubble per stage (%) | GPipe theory (%) |")
    p("|---|---|---|---|---|---|")
    bound = [NP * x for x in sps["one-rank"]]
    summary = {}
    for name, np_, _ in cs:
        if not sps[name]:
            p(f"| {name} | failed | | | | |")
            continue
        rd = ratios(name, "dp") if name != "one-rank" else []
        rb = [x / b for x, b in zip(sps[name], bound)] if name != "one-rank" else []
        bub = "-"
        th = "-"
        bs = [r["bubble"] for r in by[name] if "bubble" in r]
        if bs:
            bub = ", ".join(spread([b[s] for b in bs], "{:.1f}") for s in range(len(bs[0])))
            th = f"{by[name][0]['theory']:.1f}"
        label = name if name != "one-rank" else f"one rank, batch {BATCH // NP} (bound: {NP} x)"
        p(f"| {label} | {spread(sps[name])} | {spread(rd, '{:.2f}') if rd else '-'} | "
          f"{spread(rb, '{:.2f}') if rb else '-'} | {bub} | {th} |")
        if name not in ("one-rank", "dp") and rd:
            summary[f"{name.replace('-', '_')}_vs_dp"] = f"{med(rd):.2f}"
    p("")
    p("bound: the one-rank run's samples/s times the ranks (linear scaling, no communication); "
      "bubble: each stage's time waiting for transfers over its step time (1f1b's theory is "
      "GPipe's: the same idle time, less memory).")
    p("pipe_summary " + " ".join(f"{k}={v}" for k, v in summary.items()))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(OUT, "pipe_bench.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(OUT, "pipe_bench.json"), "w") as f:
        json.dump({"settings": {"np": NP, "repeats": REPEATS, "steps": STEPS, "hidden": HIDDEN,
                                "batch": BATCH, "ms": MS}, "runs": runs}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
