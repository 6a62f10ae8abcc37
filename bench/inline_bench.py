#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""inline_bench.py -- what running a lone blocking collective on its caller's
thread saves (`make bench`'s part "inline", doc/comm.md "Threading").

The trainer on NP ranks (default 2) runs STEPS steps of MODEL with
DDPC_COMM_INLINE=auto (a blocking collective with nothing queued ahead runs
on the caller's thread: the engine's unready check, the trainer's stop vote)
and DDPC_COMM_INLINE=0 (every collective handed to the progress thread and
back), interleaved REPEATS times (0, auto, 0, auto, ...) so that a noisy
stretch of the machine hits both. It reports the medians of samples/s with
their min..max, and the ratio auto/0 of each pair (median, min..max); the
runs must end with the same parameters (params_crc32), since only the thread
that makes the calls changes. Timings are printed, never judged: the exit
status is 1 only when a run fails or the parameters differ.

Environment: NP=2 REPEATS=5 STEPS=400 MODEL=linear BATCH=64 HIDDEN=1024,1024
THREADS=1 DATA=/usr/share/datasets/fashion-mnist TRAINER=./trainer
MPIEXEC=mpiexec MPIEXEC_FLAGS= BENCH_OUT=bench-out RUN_TIMEOUT=600
"""
import os
import re
import shlex
import statistics
import subprocess
import sys


def env(name, default):
    return os.environ.get(name, default)


NP = int(env("NP", "2"))
REPEATS = int(env("REPEATS", "5"))
STEPS = int(env("STEPS", "400"))
MODEL = env("MODEL", "linear")
BATCH = env("BATCH", "64")
HIDDEN = env("HIDDEN", "1024,1024")
OUT = env("BENCH_OUT", "bench-out")
LOG = open(os.path.join(OUT, "inline_bench.txt"), "w") if os.path.isdir(OUT) else None


def p(line):
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


def run(setting, rep):
    """(samples/s, params_crc32) of one run with DDPC_COMM_INLINE=setting"""
    e = dict(os.environ, DDPC_COMM_INLINE=setting)
    cmd = [env("MPIEXEC", "mpiexec")] + shlex.split(env("MPIEXEC_FLAGS", "")) + [
        "-n", str(NP), env("TRAINER", "./trainer"), "--data",
        env("DATA", "/usr/share/datasets/fashion-mnist"), "--device", "cpu", "--model", MODEL,
        "--threads", env("THREADS", "1"), "--batch-size", BATCH, "--max-steps", str(STEPS),
        "--ckpt-dir", "none", "--log-every", str(STEPS)]
    if MODEL == "mlp":
        cmd += ["--hidden", HIDDEN]
    r = subprocess.run(cmd, env=e, capture_output=True, text=True,
                       timeout=int(env("RUN_TIMEOUT", "600")))
    m = re.search(r"^final: .*samples_per_s=([0-9.]+)", r.stdout, re.M)
    c = re.search(r"params_crc32[= ]([0-9a-f]{8})", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        p("run %d (DDPC_COMM_INLINE=%s) failed, exit %d:\n%s%s" % (rep, setting, r.returncode,
                                                                   r.stdout, r.stderr))
        sys.exit(1)
    return float(m.group(1)), c.group(1) if c else None


def spread(xs, fmt):
    return (fmt + " (" + fmt + ".." + fmt + ")") % (statistics.median(xs), min(xs), max(xs))


def main():
    os.makedirs(OUT, exist_ok=True)
    p("inline_bench: trainer %s, %d ranks, %d steps, batch %s per rank; DDPC_COMM_INLINE=0 and "
      "auto interleaved, %d repeats" % (MODEL, NP, STEPS, BATCH, REPEATS))
    rate = {"0": [], "auto": []}
    crcs = set()
    ratios = []
    for rep in range(1, REPEATS + 1):
        pair = {}
        for s in ("0", "auto"):
            pair[s], crc = run(s, rep)
            rate[s].append(pair[s])
            crcs.add(crc)
        ratios.append(pair["auto"] / pair["0"])
        p("repeat %d: 0 %.0f samples/s, auto %.0f (x%.3f)" % (rep, pair["0"], pair["auto"],
                                                              ratios[-1]))
    p("DDPC_COMM_INLINE=0:    samples/s median " + spread(rate["0"], "%.0f"))
    p("DDPC_COMM_INLINE=auto: samples/s median " + spread(rate["auto"], "%.0f"))
    p("auto / 0 per pair: median " + spread(ratios, "%.3f"))
    if len(crcs) != 1:
        p("the settings end with different parameters: %s" % sorted(str(c) for c in crcs))
        return 1
    p("the same parameters in every run (params_crc32 %s)" % crcs.pop())
    return 0


if __name__ == "__main__":
    sys.exit(main())
