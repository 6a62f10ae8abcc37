#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# train_bench.sh -- `make bench` (issue 11): ddpc beside PyTorch, MPI and the
# hardware limit, in one run on this machine's CPUs. Parts (BENCH_PARTS, in
# this order):
#   gemm   bench/gemm_bench (same CBLAS as the trainer, one thread, pinned)
#          on the MLP's step shapes at its per-rank batch: GFLOP/s per core,
#          the bound for the MLP's samples/s; run before and after `train`
#   train  the trainer against PyTorch DDP/gloo (bench/torch_ddp.py) on the
#          same job, interleaved repeats (trainer, torch, trainer, ...) of
#          {linear batch 64/rank, MLP 784-1024-1024-10 batch 128/rank} x
#          {1, 2 ranks}, one BLAS thread and one core per rank, one epoch;
#          then the same-job check: a short run of each model where torch
#          takes the trainer's initialization and batch order
#          (--match-trainer): the losses must agree to rounding
#   ckpt   bench/ckpt_bench: checkpoint save/load against raw I/O (1 GiB)
#   ddp    bench/ddp_bench.sh: the engine's all-reduce and overlap against
#          raw MPI, local and between the testbed's two nodes (its own knobs:
#          ROUNDS, NET, ...; see that script)
#   pipe   bench/pipe_bench.py: the pipeline trainer (2 stages, gpipe and
#          1f1b at 2, 4, 8 micro-batches) against pure data parallel on the
#          same 2 ranks and the linear-scaling bound, with the measured bubble
#          beside the theory (its own knobs: PIPE_REPEATS, PIPE_STEPS, PIPE_MS)
#   timeline bench/timeline_bench.py: the trainer with DDPC_TIMELINE off and
#          on, interleaved (the recorder's cost as a ratio), and the picture
#          BENCH_OUT/timeline.png (TL_REPEATS, TL_STEPS)
#   shard  bench/shard_bench.py: the trainer (AdamW) under DDPC_SHARD=none,
#          optim and grads, interleaved: samples/s as ratios to none, the
#          training RSS per rank, the optimizer state and the gradients per
#          rank; then none and grads on a deep MLP (32 hidden layers of 256,
#          0.5 MiB buckets), where ZeRO-2's gradients shrink (SH_REPEATS,
#          SH_STEPS)
# then bench/plot.py: a markdown table on stdout, BENCH_OUT/bench.json (all
# raw runs and the summary) and PNG plots, ending with the CPU engine's
# targets (issue 24: the MLP's share of the SGEMM bound, the linear model
# over PyTorch, the engine's all-reduce over raw MPI from 1 MiB), each with
# its spread and whether its median meets it. Timings never decide the exit
# status; a run that fails does (exit 1), and so does a failed same-job check.
#
# Knobs (environment):
#   BENCH_PARTS="gemm train ckpt ddp pipe"
#   REPEATS=5            interleaved repeats of each training configuration
#   MODELS="linear mlp"  RANKS="1 2"
#   QUICK=1              a smoke run: REPEATS=1, MAX_STEPS=60, gemm -r 3,
#                        ckpt --reps 1, ddp_bench ROUNDS=1 NET=0
#   MAX_STEPS=0          stop each training run after N steps (0: one epoch)
#   MLP_HIDDEN=1024,1024 MLP_BATCH=128 LINEAR_BATCH=64 (per rank)
#   LOG_EVERY=50         progress all-reduce interval, both sides
#   SEED=42              repeat r uses SEED+r-1 on both sides
#   CHECK=1              the same-job check (0: skip it)
#   CHECK_STEPS=0        its length in steps (0: one epoch; QUICK: 50)
#   CHECK_TOL=0.01       its largest relative difference of the losses logged
#                        every 10 steps over the first 100 steps
#   GEMM_ARGS="-r 7 -t 20"   CKPT_ARGS="--reps 3"
#   TORCH_LAUNCH=torchrun|mpiexec|spawn   PYTHON=/usr/bin/python3
#   TORCH2_PYTHON=       an interpreter with another torch (a venv): adds
#                        the impl torch2 beside torch in every repeat
#   QUIET_IDLE=80 QUIET_WAIT=120   before each run, wait up to QUIET_WAIT s
#                        for the CPUs to be QUIET_IDLE % idle
#   MPIEXEC_BIND="-bind-to core" (MPICH; --bind-to core for Open MPI)
#   BENCH_OUT=bench-out  (relative to the build dir)   DATA=/usr/share/datasets/fashion-mnist
#   RUN_TIMEOUT=1200     seconds per run
#   DRY_RUN=1            print the plan and the expected time, run nothing
set -u
here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/.." && pwd)}
case $srcdir in /*) ;; *) srcdir=$(cd "$srcdir" && pwd) ;; esac
builddir=${top_builddir:-$(pwd)}
case $builddir in /*) ;; *) builddir=$(cd "$builddir" && pwd) ;; esac

QUICK=${QUICK:-0}
q() { [ "$QUICK" = 1 ] && echo "$1" || echo "$2"; }
BENCH_PARTS=${BENCH_PARTS:-gemm train ckpt ddp pipe timeline shard}
REPEATS=${REPEATS:-$(q 1 5)}
MODELS=${MODELS:-linear mlp}
RANKS=${RANKS:-1 2}
MAX_STEPS=${MAX_STEPS:-$(q 60 0)}
MLP_HIDDEN=${MLP_HIDDEN:-1024,1024}
MLP_BATCH=${MLP_BATCH:-128}
LINEAR_BATCH=${LINEAR_BATCH:-64}
LOG_EVERY=${LOG_EVERY:-50}
SEED=${SEED:-42}
CHECK=${CHECK:-1}
CHECK_STEPS=${CHECK_STEPS:-$(q 50 0)}
CHECK_TOL=${CHECK_TOL:-0.01}
GEMM_ARGS=${GEMM_ARGS:-$(q "-r 3 -t 10" "-r 7 -t 20")}
CKPT_ARGS=${CKPT_ARGS:-$(q "--reps 1" "--reps 3")}
TORCH_LAUNCH=${TORCH_LAUNCH:-torchrun}
PYTHON=${PYTHON:-/usr/bin/python3}
TORCH2_PYTHON=${TORCH2_PYTHON:-}
QUIET_IDLE=${QUIET_IDLE:-80}
QUIET_WAIT=${QUIET_WAIT:-120}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
RUN_TIMEOUT=${RUN_TIMEOUT:-1200}
BENCH_OUT=${BENCH_OUT:-bench-out}
case $BENCH_OUT in /*) ;; *) BENCH_OUT=$builddir/$BENCH_OUT ;; esac
TRAINER=${TRAINER:-$builddir/trainer}
GEMM_BIN=${GEMM_BIN:-$builddir/bench/gemm_bench}
CKPT_BIN=${CKPT_BIN:-$builddir/bench/ckpt_bench}
MPIEXEC=${MPIEXEC:-}
# shellcheck source=/dev/null
[ -n "$MPIEXEC" ] || [ ! -f "$builddir/tests/testenv.sh" ] || . "$builddir/tests/testenv.sh"
MPIEXEC=${MPIEXEC:-mpiexec}
MPIEXEC_FLAGS=${MPIEXEC_FLAGS:-}
if [ -z "${MPIEXEC_BIND+set}" ]; then
    MPIEXEC_BIND="-bind-to core"
    [ "${DDPC_MPI_FLAVOR:-mpich}" = openmpi ] && MPIEXEC_BIND="--bind-to core"
fi
# one BLAS thread per rank on both sides (torch's own intra-op threads: --threads 1)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 BLIS_NUM_THREADS=1 MKL_NUM_THREADS=1
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}

say() { echo "train_bench.sh: $*" >&2; }
has() { case " $BENCH_PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
failed=0
for m in $MODELS; do
    case $m in linear | mlp) ;; *) say "MODELS: linear and/or mlp, not \"$m\""; exit 2 ;; esac
done
IMPLS="trainer torch"
[ -n "$TORCH2_PYTHON" ] && IMPLS="$IMPLS torch2"

# ---------------------------------------------------------------- expected time
# seconds per run on an idle 2-core Zen 4 VM (one epoch; setup included), by
# model, ranks and side; QUICK/MAX_STEPS scale the epoch part by the steps
est_run() { # model ranks impl -> seconds
    local m=$1 n=$2 i=$3 b full t
    case $m.$n.$i in
        linear.1.trainer) t=2 ;; linear.2.trainer) t=3 ;;
        mlp.1.trainer) t=13 ;; mlp.2.trainer) t=10 ;;
        linear.1.*) t=9 ;; linear.2.*) t=12 ;;
        mlp.1.*) t=22 ;; mlp.2.*) t=18 ;;
        *) t=20 ;;
    esac
    if [ "$MAX_STEPS" -gt 0 ]; then
        [ "$m" = mlp ] && b=$MLP_BATCH || b=$LINEAR_BATCH
        full=$(( (60000 + b * n - 1) / (b * n) ))
        [ "$MAX_STEPS" -lt "$full" ] && t=$(( 6 + t * MAX_STEPS / full ))
    fi
    echo $((t + 1)) # + the idle check
}
total=0
if has gemm; then total=$((total + 2 * 15)); fi
if has train; then
    for m in $MODELS; do for n in $RANKS; do for i in $IMPLS; do
        total=$((total + REPEATS * $(est_run "$m" "$n" "$i")))
    done; done; done
    [ "$CHECK" = 1 ] && total=$((total + $(q 35 50)))
fi
if has ckpt; then # about 30 s per repetition of 1 GiB, plus the start
    r=$(echo "$CKPT_ARGS" | sed -n 's/.*--reps[ =]*\([0-9]*\).*/\1/p')
    total=$((total + 15 + 30 * ${r:-5}))
fi
if has ddp; then # ddp_bench.sh: 5 local runs per round, the testbed's 2 + 2 per round
    r=${ROUNDS:-$(q 1 3)}
    ddp_net=${NET:-$(q 0 1)}
    total=$((total + 150 * r + ddp_net * (60 + 60 * r)))
fi
if has pipe; then # pipe_bench.py: 2 + 2 x |MS| runs per repeat, ~5 s each at 40 steps
    total=$((total + 5 * ${PIPE_REPEATS:-$(q 1 3)} * (2 + 2 * $(echo ${PIPE_MS:-$(q 4 "2 4 8")} | wc -w))))
fi
if has timeline; then # timeline_bench.py: 2 runs per repeat, ~10 s each at 200 steps
    total=$((total + 20 * ${TL_REPEATS:-$(q 2 5)}))
fi
if has shard; then # shard_bench.py: 3 runs per repeat, ~8 s each at 150 steps
    total=$((total + 24 * ${SH_REPEATS:-$(q 1 3)}))
fi
say "parts: $BENCH_PARTS; repeats $REPEATS of models ($MODELS) x ranks ($RANKS) x ($IMPLS)$([ "$MAX_STEPS" -gt 0 ] && echo ", $MAX_STEPS steps each" || echo ", one epoch each")"
say "expected time: about $(( (total + 59) / 60 )) min on an idle machine (waits for quiet: up to ${QUIET_WAIT}s more per run); output in $BENCH_OUT"
[ "${DRY_RUN:-0}" = 1 ] && exit 0
t_bench=$SECONDS
mkdir -p "$BENCH_OUT/runs" || exit 1
INDEX=$BENCH_OUT/runs.tsv
: > "$INDEX"

# ---------------------------------------------------------------- quiet machine
# shellcheck source=bench/quiet.sh
. "$here/quiet.sh" # idle_pct, wait_quiet

# run PART TAG CONFIG IMPL RANKS REPEAT SEED FILE CMD...: one measurement; its
# output in runs/TAG.log, a line in runs.tsv (FILE: what plot.py reads)
run() {
    local part=$1 tag=$2 cfg=$3 impl=$4 np=$5 rep=$6 seed=$7 file=$8 t0 rc load
    shift 8
    wait_quiet
    load=$(cut -d' ' -f1 /proc/loadavg)
    say "$tag (idle ${idle}%, load $load): $*"
    t0=$SECONDS
    timeout -k 10 "$RUN_TIMEOUT" "$@" > "$BENCH_OUT/runs/$tag.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$part" "$tag" "$cfg" "$impl" "$np" \
        "$rep" "$seed" "$idle" "$load" "$rc" "$((SECONDS - t0))" "$file" >> "$INDEX"
    if [ $rc -ne 0 ]; then
        say "FAILED (exit $rc): $*"
        tail -n 15 "$BENCH_OUT/runs/$tag.log" >&2
        failed=1
    fi
    return $rc
}

# Commands are built in the array CMD (no word splitting of paths).
# mpi_cmd N: the launch of N ranks, bound one per core
mpi_cmd() {
    # shellcheck disable=SC2206 # the flags are lists of words
    CMD=(env -u SLURM_CONF "$MPIEXEC" $MPIEXEC_FLAGS $MPIEXEC_BIND -n "$1")
}

# trainer_cmd TAG MODEL RANKS SEED STEPS LOG_EVERY: its --metrics file is the result
trainer_cmd() {
    local tag=$1 m=$2 np=$3 seed=$4 steps=$5 every=$6
    rm -f "$BENCH_OUT/runs/$tag.jsonl"
    mpi_cmd "$np"
    CMD+=("$TRAINER" --device cpu --model "$m")
    if [ "$m" = mlp ]; then
        CMD+=(--hidden "$MLP_HIDDEN" --batch-size "$MLP_BATCH")
    else
        CMD+=(--batch-size "$LINEAR_BATCH")
    fi
    CMD+=(--epochs 1 --max-steps "$steps" --threads 1 --seed "$seed" --log-every "$every"
          --ckpt-dir none --metrics "$BENCH_OUT/runs/$tag.jsonl")
}

# torch_cmd TAG MODEL RANKS SEED STEPS LOG_EVERY PYTHON [--match-trainer]: its --json file
torch_cmd() {
    local tag=$1 m=$2 np=$3 seed=$4 steps=$5 every=$6 py=$7 port args
    shift 7
    rm -f "$BENCH_OUT/runs/$tag.json"
    args=("$srcdir/bench/torch_ddp.py" --data "$DATA" --model "$m")
    if [ "$m" = mlp ]; then
        args+=(--hidden "$MLP_HIDDEN" --batch "$MLP_BATCH")
    else
        args+=(--batch "$LINEAR_BATCH")
    fi
    args+=(--epochs 1 --max-steps "$steps" --threads 1 --seed "$seed" --log-every "$every"
           --json "$BENCH_OUT/runs/$tag.json" "$@")
    case $TORCH_LAUNCH in
        torchrun) # --redirects/--tee: Debian's torch 1.13 torchrun fails on Python 3.11 with
                  # their defaults (0, Std.NONE, which 3.11's IntFlag iteration omits)
            CMD=("$py" -m torch.distributed.run --standalone --nnodes 1 --nproc_per_node "$np"
                 --redirects 1 --tee 1 --log_dir "$BENCH_OUT/runs/$tag.torchrun" "${args[@]}") ;;
        mpiexec)
            port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
            mpi_cmd "$np"
            CMD+=(env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "$py" "${args[@]}" --bind none) ;;
        spawn)
            CMD=("$py" "${args[@]}" --nproc "$np") ;;
        *) say "TORCH_LAUNCH=$TORCH_LAUNCH: torchrun, mpiexec or spawn"; exit 2 ;;
    esac
}

# ---------------------------------------------------------------- gemm
gemm_run() {
    [ -x "$GEMM_BIN" ] || { say "$GEMM_BIN not built (make bench builds it)"; failed=1; return; }
    local b=$MLP_BATCH
    # shellcheck disable=SC2086
    run gemm "gemm.$1" mlp gemm_bench 1 "$1" 0 "runs/gemm.$1.log" \
        taskset -c 0 "$GEMM_BIN" -l trainer-cblas -b "$b" -T 1 $GEMM_ARGS
}
has gemm && gemm_run 1

# ---------------------------------------------------------------- train
if has train; then
    [ -x "$TRAINER" ] || { say "$TRAINER not built"; exit 1; }
    # the anchors come from Debian: as root, install what is missing (after
    # the README's setup, which does not need them)
    if [ "$(id -u)" = 0 ] && [ "$PYTHON" = /usr/bin/python3 ] &&
        ! "$PYTHON" -c 'import torch, matplotlib' 2>/dev/null; then
        say "installing python3-torch and python3-matplotlib (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            python3-torch python3-matplotlib >"$BENCH_OUT/apt.log" 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install \
                -y -q --no-install-recommends python3-torch python3-matplotlib >>"$BENCH_OUT/apt.log" 2>&1; } ||
            say "apt-get install failed (see $BENCH_OUT/apt.log)"
    fi
    if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
        say "$PYTHON has no torch (apt install python3-torch): only the trainer runs"
        IMPLS=trainer
        failed=1
    fi
    # which BLAS the trainer really loads (plot.py asks it for its kernel)
    { "$builddir/libtool" --mode=execute ldd "$TRAINER" 2>/dev/null || ldd "$TRAINER"; } \
        > "$BENCH_OUT/trainer-ldd.txt" 2>&1
    for r in $(seq "$REPEATS"); do
        seed=$((SEED + r - 1))
        for m in $MODELS; do
            for np in $RANKS; do
                cfg=$m.np$np
                for impl in $IMPLS; do
                    tag=train.$cfg.$impl.$r
                    case $impl in
                        trainer) trainer_cmd "$tag" "$m" "$np" "$seed" "$MAX_STEPS" "$LOG_EVERY" ;;
                        torch) torch_cmd "$tag" "$m" "$np" "$seed" "$MAX_STEPS" "$LOG_EVERY" "$PYTHON" ;;
                        torch2) torch_cmd "$tag" "$m" "$np" "$seed" "$MAX_STEPS" "$LOG_EVERY" "$TORCH2_PYTHON" ;;
                    esac
                    file=runs/$tag.json
                    [ "$impl" = trainer ] && file=runs/$tag.jsonl
                    run train "$tag" "$cfg" "$impl" "$np" "$r" "$seed" "$file" "${CMD[@]}"
                done
            done
        done
    done
    # the same job, bit for bit in its inputs: torch with the trainer's
    # initialization and order; losses every 10 steps must agree to rounding
    if [ "$CHECK" = 1 ] && [ "$IMPLS" != trainer ]; then
        np=$(echo "$RANKS" | tr ' ' '\n' | sort -n | tail -1)
        for m in $MODELS; do
            tag=check.$m.np$np.trainer
            trainer_cmd "$tag" "$m" "$np" "$SEED" "$CHECK_STEPS" 10
            run check "$tag" "$m.np$np" trainer "$np" 1 "$SEED" "runs/$tag.jsonl" "${CMD[@]}"
            tag=check.$m.np$np.torch
            torch_cmd "$tag" "$m" "$np" "$SEED" "$CHECK_STEPS" 10 "$PYTHON" --match-trainer
            run check "$tag" "$m.np$np" torch "$np" 1 "$SEED" "runs/$tag.json" "${CMD[@]}"
        done
    fi
fi

has gemm && has train && gemm_run 2

# ---------------------------------------------------------------- ckpt
if has ckpt; then
    if [ -x "$CKPT_BIN" ]; then
        cdir=${CKPT_DIR:-${TMPDIR:-/tmp}/ddpc-ckpt-bench.$$}
        mpi_cmd 2
        # shellcheck disable=SC2086 # CKPT_ARGS: a list of words
        run ckpt ckpt.1 ckpt ckpt_bench 2 1 0 runs/ckpt.1.log "${CMD[@]}" "$CKPT_BIN" \
            --dir "$cdir" $CKPT_ARGS
        rm -rf "$cdir"
    else
        say "$CKPT_BIN not built (configure found no HDF5?): ckpt part skipped"
    fi
fi

# ---------------------------------------------------------------- ddp
if has ddp; then
    if [ "$QUICK" = 1 ]; then export ROUNDS=${ROUNDS:-1} NET=${NET:-0}; fi
    say "ddp: bench/ddp_bench.sh (log $BENCH_OUT/ddp_bench.log)"
    t0=$SECONDS
    LOG=$BENCH_OUT/ddp_bench.log top_builddir=$builddir top_srcdir=$srcdir \
        bash "$srcdir/bench/ddp_bench.sh" 2> >(tee "$BENCH_OUT/ddp_bench.err" >&2) |
        tee "$BENCH_OUT/ddp_bench.txt"
    rc=${PIPESTATUS[0]}
    printf 'ddp\tddp.1\tddp\tddp_bench\t2\t1\t0\t-\t-\t%s\t%s\tddp_bench.txt\n' "$rc" \
        "$((SECONDS - t0))" >> "$INDEX"
    [ "$rc" -eq 0 ] || { say "ddp_bench.sh failed (exit $rc): $(tail -n 3 "$BENCH_OUT/ddp_bench.err")"; failed=1; }
fi

# ---------------------------------------------------------------- pipe
if has pipe; then
    say "pipe: bench/pipe_bench.py (table in $BENCH_OUT/pipe_bench.txt)"
    t0=$SECONDS
    # shellcheck disable=SC2086
    NP=2 REPEATS=${PIPE_REPEATS:-$(q 1 3)} STEPS=${PIPE_STEPS:-$(q 20 40)} MS=${PIPE_MS:-$(q 4 "2 4 8")} \
        TRAINER=$TRAINER DATA=$DATA MPIEXEC=$MPIEXEC MPIEXEC_FLAGS="$MPIEXEC_FLAGS" \
        MPIEXEC_BIND="$MPIEXEC_BIND" BENCH_OUT=$BENCH_OUT RUN_TIMEOUT=$RUN_TIMEOUT \
        "$PYTHON" "$srcdir/bench/pipe_bench.py"
    rc=$?
    printf 'pipe\tpipe.1\tpipe\tpipe_bench\t2\t1\t0\t-\t-\t%s\t%s\tpipe_bench.txt\n' "$rc" \
        "$((SECONDS - t0))" >> "$INDEX"
    [ "$rc" -eq 0 ] || { say "pipe_bench.py failed (exit $rc)"; failed=1; }
fi

# ---------------------------------------------------------------- timeline
if has timeline; then
    say "timeline: bench/timeline_bench.py (in $BENCH_OUT/timeline_bench.txt, $BENCH_OUT/timeline.png)"
    t0=$SECONDS
    NP=2 REPEATS=${TL_REPEATS:-$(q 2 5)} STEPS=${TL_STEPS:-$(q 60 200)} TRAINER=$TRAINER DATA=$DATA \
        MPIEXEC=$MPIEXEC MPIEXEC_FLAGS="$MPIEXEC_FLAGS $MPIEXEC_BIND" BENCH_OUT=$BENCH_OUT \
        RUN_TIMEOUT=$RUN_TIMEOUT TOOL="$srcdir/src/tools/ddpc-timeline" \
        "$PYTHON" "$srcdir/bench/timeline_bench.py"
    rc=$?
    printf 'timeline\ttimeline.1\ttimeline\ttimeline_bench\t2\t1\t0\t-\t-\t%s\t%s\ttimeline_bench.txt\n' \
        "$rc" "$((SECONDS - t0))" >> "$INDEX"
    [ "$rc" -eq 0 ] || { say "timeline_bench.py failed (exit $rc)"; failed=1; }
fi

# ---------------------------------------------------------------- shard
if has shard; then
    say "shard: bench/shard_bench.py (in $BENCH_OUT/shard_bench.txt)"
    t0=$SECONDS
    NP=2 REPEATS=${SH_REPEATS:-$(q 1 3)} STEPS=${SH_STEPS:-$(q 60 150)} TRAINER=$TRAINER DATA=$DATA \
        MPIEXEC=$MPIEXEC MPIEXEC_FLAGS="$MPIEXEC_FLAGS $MPIEXEC_BIND" BENCH_OUT=$BENCH_OUT \
        RUN_TIMEOUT=$RUN_TIMEOUT "$PYTHON" "$srcdir/bench/shard_bench.py"
    rc=$?
    printf 'shard\tshard.1\tshard\tshard_bench\t2\t1\t0\t-\t-\t%s\t%s\tshard_bench.txt\n' \
        "$rc" "$((SECONDS - t0))" >> "$INDEX"
    [ "$rc" -eq 0 ] || { say "shard_bench.py failed (exit $rc)"; failed=1; }
    # ZeRO-2's gradients are the slice plus two stages of the largest bucket:
    # 1/N needs buckets small against the model, so a deep MLP (32 hidden
    # layers of 256, 0.5 MiB buckets) besides the wide one above
    say "shard: deep MLP, none and grads (in $BENCH_OUT/shard_deep_bench.txt)"
    t0=$SECONDS
    NP=2 REPEATS=${SH_REPEATS:-$(q 1 3)} STEPS=${SH_STEPS:-$(q 60 150)} TRAINER=$TRAINER DATA=$DATA \
        HIDDEN=$(printf '256,%.0s' $(seq 31))256 BUCKET_MB=0.5 SETTINGS=none,grads \
        NAME=shard_deep_bench MPIEXEC=$MPIEXEC MPIEXEC_FLAGS="$MPIEXEC_FLAGS $MPIEXEC_BIND" \
        BENCH_OUT=$BENCH_OUT RUN_TIMEOUT=$RUN_TIMEOUT "$PYTHON" "$srcdir/bench/shard_bench.py"
    rc=$?
    printf 'shard\tshard.2\tshard\tshard_deep_bench\t2\t1\t0\t-\t-\t%s\t%s\tshard_deep_bench.txt\n' \
        "$rc" "$((SECONDS - t0))" >> "$INDEX"
    [ "$rc" -eq 0 ] || { say "shard_bench.py (deep) failed (exit $rc)"; failed=1; }
fi

# ---------------------------------------------------------------- report
say "all parts done in $(( (SECONDS - t_bench + 30) / 60 )) min; report:"
"$PYTHON" "$srcdir/bench/plot.py" --out "$BENCH_OUT" --check-tol "$CHECK_TOL" \
    --mlp-hidden "$MLP_HIDDEN" --mlp-batch "$MLP_BATCH" --linear-batch "$LINEAR_BATCH" \
    --max-steps "$MAX_STEPS" --wall-s "$((SECONDS - t_bench))" || failed=1
exit $failed
