#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""shard_bench.py -- what DDPC_SHARD saves and costs (`make bench`'s part
"shard", doc/ddp.md "Sharding", doc/performance.md).

The trainer (AdamW, so two floats of state per parameter) on NP ranks runs
STEPS steps with DDPC_SHARD=none, optim, optim/forward and grads,
interleaved REPEATS times (none, optim, optim/forward, grads, none, ...) so
that a noisy stretch of the machine hits every setting. The trainer asks
for DDPC_SHARD_GATHER=forward (the updated slices broadcast by bucket and
waited for by layer in the next forward), which the engine takes where its
overlap is on: with THREADS=1 ranks on a 2-core machine DDPC_OVERLAP=auto
turns it off, so optim and grads gather at the step's end (one all-gather);
optim/forward is optim with DDPC_OVERLAP=1, the gather in the forward in
effect: its ratio to optim is what that overlap buys (or costs) here.
Each rank runs under a small watcher (this script, --watch)
that samples the trainer's VmRSS from /proc every 10 ms and prints the
median of the last third of the samples (training: the data set's load,
whose peak hides everything else, is over by then). The report gives,
per setting: samples/s median (min..max) and its ratio to none in the same
repeat, the training RSS per rank (median over ranks and repeats) and its
difference to none, and the optimizer state and the gradient memory per
rank that the engine's log line gives (floats [a, b) here, times 2 for
AdamW; with grads the slice plus its bucket stages), against the
unsharded ones. Timings and sizes are printed, never judged: the exit status is 1
only when a run fails.

Environment: NP=2 REPEATS=3 STEPS=150 HIDDEN=1024,1024 BATCH=64 THREADS=1
DATA=/usr/share/datasets/fashion-mnist TRAINER=./trainer MPIEXEC=mpiexec
MPIEXEC_FLAGS= BENCH_OUT=bench-out RUN_TIMEOUT=600
SETTINGS=none,optim,optim/forward,grads (none first) BUCKET_MB= (the engine's)
NAME=shard_bench (the report's name, and its summary line's prefix)
"""
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time


def env(name, default):
    return os.environ.get(name, default)


NP = int(env("NP", "2"))
REPEATS = int(env("REPEATS", "3"))
STEPS = int(env("STEPS", "150"))
HIDDEN = env("HIDDEN", "1024,1024")
BATCH = env("BATCH", "64")
THREADS = env("THREADS", "1")
DATA = env("DATA", "/usr/share/datasets/fashion-mnist")
TRAINER = env("TRAINER", "./trainer")
MPIEXEC = env("MPIEXEC", "mpiexec")
FLAGS = shlex.split(env("MPIEXEC_FLAGS", ""))
OUT = env("BENCH_OUT", "bench-out")
TIMEOUT = int(env("RUN_TIMEOUT", "600"))
SETTINGS = tuple(env("SETTINGS", "none,optim,optim/forward,grads").split(","))
BUCKET_MB = env("BUCKET_MB", "")  # DDPC_BUCKET_MB for every run ("": the engine's 25)
NAME = env("NAME", "shard_bench")  # the report: $BENCH_OUT/$NAME.txt
LOG = None


def p(line):
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


def vmrss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def watch(cmd):
    """One rank: run cmd, pass its output on, sample its VmRSS every 10 ms
    and print the median of the last third of the samples (training: the
    data set's load, whose peak hides everything else, is long over by then)
    as 'shard_bench_rss_kib N'."""
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, close_fds=False)  # PMI_FD
    samples = []

    def sample():
        while child.poll() is None:
            v = vmrss_kib(child.pid)
            if v:
                samples.append(v)
            time.sleep(0.01)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    for line in child.stdout:
        sys.stdout.write(line)
    rc = child.wait()
    t.join()
    tail = samples[-max(1, len(samples) // 3):] or [0]
    print("shard_bench_rss_kib %d" % statistics.median(tail), flush=True)
    return rc


def run(setting, rep):
    shard, _, gather = setting.partition("/")
    e = dict(os.environ, DDPC_SHARD=shard, DDPC_LOG_LEVEL="info")
    if BUCKET_MB:
        e["DDPC_BUCKET_MB"] = BUCKET_MB
    if gather:
        e["DDPC_SHARD_GATHER"] = gather
        if gather == "forward":  # in effect only where the engine overlaps
            e["DDPC_OVERLAP"] = "1"
    e.setdefault("UCX_NET_DEVICES", "lo")  # as the tests: the testbed's interfaces come and go
    cmd = [MPIEXEC] + FLAGS + ["-n", str(NP), sys.executable, os.path.abspath(__file__), "--watch",
                               TRAINER, "--data", DATA, "--device", "cpu", "--optimizer", "adamw",
                               "--hidden", HIDDEN, "--threads", THREADS, "--batch-size", BATCH,
                               "--max-steps", str(STEPS), "--ckpt-dir", "none",
                               "--log-every", str(max(1, STEPS // 3))]
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=TIMEOUT)
    out = r.stdout + r.stderr
    m = re.search(r"^final: .*samples_per_s=([0-9.]+)", r.stdout, re.M)
    rss = [int(x) for x in re.findall(r"shard_bench_rss_kib (\d+)", r.stdout)]
    if r.returncode != 0 or not m or len(rss) != NP:
        p("run %d (DDPC_SHARD=%s) failed, exit %d:\n%s" % (rep, setting, r.returncode, out))
        sys.exit(1)
    ne = re.search(r"ddp: \d+ parameters, (\d+) elements", out)
    here = re.findall(r"sharded \(floats \[(\d+), (\d+)\) here[,)]", out)
    numel = int(ne.group(1)) if ne else 0
    slice_len = max((int(b) - int(a) for a, b in here), default=numel)
    # the gradient memory per rank: the arena (padded to whole slices when
    # sharded), or with grads the slice and the bucket stages
    st = re.search(r"gradients through (\d+) stages? of (\d+) floats", out)
    grad = (slice_len + int(st.group(1)) * int(st.group(2)) if st
            else slice_len * NP if here else numel)
    return float(m.group(1)), rss, numel, slice_len, grad


def main():
    global LOG
    os.makedirs(OUT, exist_ok=True)
    LOG = open(os.path.join(OUT, NAME + ".txt"), "w")
    if SETTINGS[0] != "none":
        p("SETTINGS must start with none (the yardstick), not %s" % SETTINGS[0])
        return 1
    p("shard_bench: trainer mlp 784-%s-10, adamw, %d ranks, %d steps, batch %s%s; DDPC_SHARD "
      "%s interleaved, %d repeats" % (HIDDEN.replace(",", "-"), NP, STEPS, BATCH,
                                      ", DDPC_BUCKET_MB=" + BUCKET_MB if BUCKET_MB else "",
                                      ", ".join(SETTINGS), REPEATS))
    sps = {s: [] for s in SETTINGS}
    rss = {s: [] for s in SETTINGS}
    ratio = {s: [] for s in SETTINGS}
    state = {}
    for k in range(REPEATS):
        line = []
        for s in SETTINGS:
            v, r, numel, slice_len, grad = run(s, k)
            sps[s].append(v)
            rss[s].extend(r)
            state[s] = (numel, slice_len, grad)
            ratio[s].append(v / sps["none"][-1])
            line.append("%s %.0f samples/s (x%.3f), RSS %s MiB" % (
                s, v, ratio[s][-1], "/".join("%.1f" % (x / 1024) for x in r)))
        p("  repeat %d: %s" % (k + 1, "; ".join(line)))
    base_rss = statistics.median(rss["none"])
    numel = state["none"][0]
    p("| DDPC_SHARD | samples/s median (min..max) | / none median (min..max) | training RSS per "
      "rank, MiB | - none, MiB | optimizer state per rank, MiB (of unsharded) | gradients "
      "per rank, MiB (of unsharded) |")
    p("| --- | --- | --- | --- | --- | --- | --- |")
    kv = []
    for s in SETTINGS:
        med = statistics.median(rss[s])
        st = 2 * state[s][1] * 4 / 2**20
        gm = state[s][2] * 4 / 2**20
        p("| %s | %.0f (%.0f..%.0f) | %.3f (%.3f..%.3f) | %.1f | %+.1f | %.2f (%.2f) | %.2f (%.2f) |" % (
            s, statistics.median(sps[s]), min(sps[s]), max(sps[s]), statistics.median(ratio[s]),
            min(ratio[s]), max(ratio[s]), med / 1024, (med - base_rss) / 1024, st,
            st / (2 * numel * 4 / 2**20) if numel else 0, gm,
            gm / (numel * 4 / 2**20) if numel else 0))
        if s != "none":
            k = s.replace("/", "_")
            kv.append("%s_speed=%.3f %s_rss_saved_mib=%.1f %s_state_mib=%.2f %s_grads_mib=%.2f" % (
                k, statistics.median(ratio[s]), k, (base_rss - med) / 1024, k, st, k, gm))
    fw = [a / b for a, b in zip(sps.get("optim/forward", []), sps.get("optim", []))]
    if fw:
        p("optim/forward (gathered in the forward) / optim (as resolved here), same "
          "repeat: median %.3f (%.3f..%.3f)" % (statistics.median(fw), min(fw), max(fw)))
        kv.append("forward_vs_step=%.3f" % statistics.median(fw))
    # shard_bench -> shard_summary, shard_deep_bench -> shard_deep_summary
    p("%s_summary ranks=%d params=%d state_unsharded_mib=%.2f grads_unsharded_mib=%.2f %s "
      "repeats=%d" % (NAME.replace("_bench", ""), NP, numel, 2 * numel * 4 / 2**20,
                      numel * 4 / 2**20, " ".join(kv), REPEATS))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--watch":
        sys.exit(watch(sys.argv[2:]))
    sys.exit(main())
