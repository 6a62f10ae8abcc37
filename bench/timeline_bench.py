#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""timeline_bench.py -- what DDPC_TIMELINE costs, and the picture it draws
(`make bench`'s part "timeline", doc/timeline.md).

The trainer on NP ranks (default 2) runs STEPS steps with the timeline off
and on, interleaved REPEATS times (off, on, off, on, ...) so that a noisy
stretch of the machine hits both. The report gives the medians of the
trainer's samples/s with their min..max spread, the ratio on/off of each
repeat, and the overhead (1 - median ratio); then merges the last run's
timeline and draws BENCH_OUT/timeline.png (ddpc-timeline png: the last 3
steps of every rank, buckets against backward). Timings are printed, never
judged: the exit status is 1 only when a run fails.

Environment: NP=2 REPEATS=5 STEPS=200 HIDDEN=1024,1024 BATCH=64 THREADS=1
OVERLAP=1 DATA=/usr/share/datasets/fashion-mnist TRAINER=./trainer
TOOL=<srcdir>/src/tools/ddpc-timeline MPIEXEC=mpiexec MPIEXEC_FLAGS=
BENCH_OUT=bench-out RUN_TIMEOUT=600
"""
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys


def env(name, default):
    return os.environ.get(name, default)


NP = int(env("NP", "2"))
REPEATS = int(env("REPEATS", "5"))
STEPS = int(env("STEPS", "200"))
HIDDEN = env("HIDDEN", "1024,1024")
BATCH = env("BATCH", "64")
THREADS = env("THREADS", "1")
DATA = env("DATA", "/usr/share/datasets/fashion-mnist")
TRAINER = env("TRAINER", "./trainer")
HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = env("TOOL", os.path.join(HERE, "..", "src", "tools", "ddpc-timeline"))
MPIEXEC = env("MPIEXEC", "mpiexec")
FLAGS = shlex.split(env("MPIEXEC_FLAGS", ""))
OUT = env("BENCH_OUT", "bench-out")
TIMEOUT = int(env("RUN_TIMEOUT", "600"))
LOG = open(os.path.join(OUT, "timeline_bench.txt"), "w") if os.path.isdir(OUT) else None


def p(line):
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


def run(on, rep):
    e = dict(os.environ, DDPC_OVERLAP=env("OVERLAP", "1"))
    e.pop("DDPC_TIMELINE", None)
    tl = os.path.join(OUT, "timeline")
    if on:
        shutil.rmtree(tl, ignore_errors=True)
        e["DDPC_TIMELINE"] = tl
    cmd = [MPIEXEC] + FLAGS + ["-n", str(NP), TRAINER, "--data", DATA, "--device", "cpu",
                               "--hidden", HIDDEN, "--threads", THREADS, "--batch-size", BATCH,
                               "--max-steps", str(STEPS), "--ckpt-dir", "none",
                               "--log-every", str(STEPS)]
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=TIMEOUT)
    m = re.search(r"^final: .*samples_per_s=([0-9.]+)", r.stdout, re.M)
    if r.returncode != 0 or not m:
        p("run %d (timeline %s) failed, exit %d:\n%s%s" % (rep, "on" if on else "off",
                                                          r.returncode, r.stdout, r.stderr))
        sys.exit(1)
    return float(m.group(1))


def main():
    os.makedirs(OUT, exist_ok=True)
    p("timeline_bench: trainer mlp 784-%s-10, %d ranks, %d steps, batch %s, overlap %s; "
      "timeline off and on interleaved, %d repeats" % (HIDDEN.replace(",", "-"), NP, STEPS, BATCH,
                                                       env("OVERLAP", "1"), REPEATS))
    off, on, ratio = [], [], []
    for k in range(REPEATS):
        a = run(False, k)
        b = run(True, k)
        off.append(a)
        on.append(b)
        ratio.append(b / a)
        p("  repeat %d: off %.0f samples/s, on %.0f samples/s, on/off %.3f" % (k + 1, a, b, b / a))
    med = statistics.median(ratio)
    p("samples/s off: median %.0f (%.0f..%.0f); on: median %.0f (%.0f..%.0f)"
      % (statistics.median(off), min(off), max(off), statistics.median(on), min(on), max(on)))
    p("timeline_summary on_over_off=%.3f spread=%.3f..%.3f overhead_pct=%.1f repeats=%d"
      % (med, min(ratio), max(ratio), 100 * (1 - med), REPEATS))
    tl = os.path.join(OUT, "timeline")
    for cmd in (["merge", tl], ["png", tl, "-o", os.path.join(OUT, "timeline.png"), "--steps", "3"]):
        r = subprocess.run([sys.executable, TOOL] + cmd, capture_output=True, text=True)
        p(("  " + r.stdout.strip()) if r.returncode == 0 else
          "  ddpc-timeline %s: %s" % (cmd[0], (r.stderr or r.stdout).strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
