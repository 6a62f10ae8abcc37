#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-gpu.sh: the trainer with --device cuda on NP ranks (default 2)
# against the CPU trainer, on a GPU or under the device emulation (configure
# --with-cuda=emulate; its runs say "(emulated)" in the device line):
#  - fp32, bf16, fp16: each ends where the CPU trainer ends, within the
#    precision's tolerance (test loss and accuracy), every rank the same
#    parameters;
#  - --cuda-graph on (nccl: a GPU per rank): bitwise the eager run's result;
#  - --grad-accum 2 at half the batch: the same training up to rounding;
#  - stopped at step S and resumed: bitwise the uninterrupted run;
#  - --batchnorm and --sync-bn: each ends where the CPU trainer's ends;
#    --sync-bn with --cuda-graph on bitwise its eager run; a --batchnorm run
#    stopped and resumed is bitwise the uninterrupted one;
#  - a device checkpoint resumed by the CPU trainer, and a CPU checkpoint by
#    the CUDA trainer: each ends where the uninterrupted run of the other
#    kind ends (within tolerance), which needs the optimizer state to travel;
#  - pipelines (doc/pipeline.md) on cuda, 3 layers: 2 stages x 1 replica at
#    M = 2 and 4 micro-batches, 1f1b and gpipe, and 2 stages x 2 replicas
#    (NP >= 4, or 4 emulated devices), each bitwise the unsplit CUDA run with
#    --grad-accum M at --batch-size B/M (final line: test loss, accuracy,
#    steps, params_crc32); bf16 bitwise too under DDPC_TRAINER_GEMM=unfused
#    (the fused epilogue's bias gradient rounds otherwise at the boundary);
#    a pipeline stopped at a step and resumed unsplit: bitwise the
#    uninterrupted unsplit run.
# Skips (77) where the trainer has no CUDA model or sees no CUDA device.
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
NP=${TRAINER_GPU_NP:-2}
STEPS=${TRAINER_GPU_STEPS:-120}
HALF=$((STEPS / 2))
# lr 0.01: a stable stretch of training, where rounding differences between
# the kinds stay rounding (at the default 0.05 this MLP jumps about and two
# equal runs part after ~100 steps on the first different bit)
COMMON="--data $DATA --hidden 64 --batch-size 32 --threads 1 --seed 11 --lr 0.01 --quiet --print-crc-all"
TEST_TIMEOUT=${TEST_TIMEOUT_GPU:-300}

probe=$TMP/probe
mpirun_t 1 "$TRAINER" $COMMON --device cuda --max-steps 1 --ckpt-dir none >"$probe" 2>&1 || {
    grep -Eq 'built without the CUDA model|no CUDA device visible|no usable GPU' "$probe" &&
        skip "no CUDA trainer or device here: $(grep -E -m1 'cuda' "$probe")"
    cat "$probe"; fail "the 1-step CUDA probe failed"
}
kind=GPU
grep -q '(emulated)' "$probe" && kind="emulated GPU"
echo "trainer-gpu: on the $kind: $(grep -m1 'device cuda' "$probe")"

# final_field LOG FIELD: FIELD= of the final line
final_field() { sed -n "s/^final: .*$2=\([^ ]*\).*/\1/p" "$1" | tail -1; }
# run NAME ARGS...: NP ranks, the log in $TMP/NAME.log; every rank's checksum equal
run() {
    n=$1; shift
    mpirun_t "$NP" "$TRAINER" $COMMON "$@" >"$TMP/$n.log" 2>&1 || { cat "$TMP/$n.log"; fail "$n: exit $?"; }
    u=$(sed -n 's/^rank [0-9]*: params_crc32=//p' "$TMP/$n.log" | sort -u | wc -l)
    [ "$u" = 1 ] || { cat "$TMP/$n.log"; fail "$n: the ranks' parameters differ"; }
    echo "$n: $(grep '^final:' "$TMP/$n.log")"
}
# close NAME REF LOSS_TOL ACC_TOL: NAME's test loss (relative) and accuracy (absolute) near REF's
close() {
    python3 - "$1" "$2" "$(final_field "$TMP/$1.log" test_loss)" "$(final_field "$TMP/$2.log" test_loss)" \
        "$(final_field "$TMP/$1.log" test_acc)" "$(final_field "$TMP/$2.log" test_acc)" "$3" "$4" <<'EOF' || fail "$1 is not where $2 ends"
import sys
n, r, l, lr, a, ar, tl, ta = sys.argv[1:]
dl, da = abs(float(l) - float(lr)) / float(lr), abs(float(a) - float(ar))
print("%s vs %s: test loss %s vs %s (%.2g relative, tolerance %s), accuracy %s vs %s (%.4f, tolerance %s)"
      % (n, r, l, lr, dl, tl, a, ar, da, ta))
sys.exit(not (dl <= float(tl) and da <= float(ta)))
EOF
}
same_crc() { # NAME REF: bitwise the same parameters
    a=$(final_field "$TMP/$1.log" params_crc32) b=$(final_field "$TMP/$2.log" params_crc32)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "$1 ($a) is not bitwise $2 ($b)"
    echo "$1 = $2 bitwise (params_crc32=$a)"
}

run cpu --device cpu --max-steps "$STEPS" --ckpt-dir none
run fp32 --device cuda --max-steps "$STEPS" --ckpt-dir none
grep -q 'device cuda' "$TMP/fp32.log" || { cat "$TMP/fp32.log"; fail "fp32: not on the device"; }
close fp32 cpu 0.01 0.01
run bf16 --device cuda --precision bf16 --max-steps "$STEPS" --ckpt-dir none
close bf16 cpu 0.05 0.03
run fp16 --device cuda --precision fp16 --max-steps "$STEPS" --ckpt-dir none
close fp16 cpu 0.05 0.03

# CUDA graphs: the nccl backend, so a GPU per rank
run graphs --device cuda --max-steps "$STEPS" --ckpt-dir none --cuda-graph on
if grep -q 'without CUDA graphs' "$TMP/graphs.log"; then
    echo "graphs: not captured here: $(grep -m1 'without CUDA graphs' "$TMP/graphs.log")"
    [ "${TRAINER_GPU_NEED_GRAPHS:-0}" = 1 ] && fail "graphs were required"
else
    same_crc graphs fp32
fi

# accumulation: 2 micro-steps of 16 are one step of 32, up to rounding
run accum --device cuda --max-steps "$STEPS" --ckpt-dir none --grad-accum 2 --batch-size 16
close accum fp32 0.005 0.01

# stop at HALF and resume: bitwise the uninterrupted run (checkpoints at the end of each)
run whole --device cuda --precision bf16 --max-steps "$STEPS" --ckpt-dir "$TMP/c1"
run first --device cuda --precision bf16 --max-steps "$HALF" --ckpt-dir "$TMP/c2"
run resumed --device cuda --precision bf16 --max-steps "$STEPS" --ckpt-dir "$TMP/c2"
grep -Eq 'resum' "$TMP/resumed.log" || { cat "$TMP/resumed.log"; fail "resumed: no resume said"; }
same_crc resumed whole

# BatchNorm1d (--hidden 64,32: two BN layers): cuda ends where the cpu ends,
# per rank's own statistics and with --sync-bn (statistics through the device
# communicator); a cuda --batchnorm run stopped at HALF and resumed is bitwise
# the uninterrupted one (the running statistics travel in the checkpoint:
# the evaluation, which reads them, is equal too)
run bncpu --device cpu --hidden 64,32 --batchnorm --max-steps "$STEPS" --ckpt-dir none
run bn --device cuda --hidden 64,32 --batchnorm --max-steps "$STEPS" --ckpt-dir "$TMP/bn1"
close bn bncpu 0.01 0.01
run sbcpu --device cpu --hidden 64,32 --batchnorm --sync-bn --max-steps "$STEPS" --ckpt-dir none
run sb --device cuda --hidden 64,32 --batchnorm --sync-bn --max-steps "$STEPS" --ckpt-dir none
close sb sbcpu 0.01 0.01
run sbgraphs --device cuda --hidden 64,32 --batchnorm --sync-bn --max-steps "$STEPS" --ckpt-dir none \
    --cuda-graph on
if grep -q 'without CUDA graphs' "$TMP/sbgraphs.log"; then
    echo "sbgraphs: not captured here: $(grep -m1 'without CUDA graphs' "$TMP/sbgraphs.log")"
else
    same_crc sbgraphs sb # the statistics' all-gather and the backward's all-reduce captured too
fi
run bnfirst --device cuda --hidden 64,32 --batchnorm --max-steps "$HALF" --ckpt-dir "$TMP/bn2"
run bnresumed --device cuda --hidden 64,32 --batchnorm --max-steps "$STEPS" --ckpt-dir "$TMP/bn2"
same_crc bnresumed bn
[ "$(final_field "$TMP/bnresumed.log" test_loss)" = "$(final_field "$TMP/bn.log" test_loss)" ] ||
    fail "bnresumed: the evaluation differs from the uninterrupted run's (running statistics?)"

# across kinds, SGD with momentum: the state must travel with the parameters
run gfirst --device cuda --max-steps "$HALF" --ckpt-dir "$TMP/g"
run g2c --device cpu --max-steps "$STEPS" --ckpt-dir "$TMP/g"
close g2c cpu 0.01 0.01
run cfirst --device cpu --max-steps "$HALF" --ckpt-dir "$TMP/c"
run c2g --device cuda --max-steps "$STEPS" --ckpt-dir "$TMP/c"
close c2g fp32 0.01 0.01

# --- pipelines: the final line (test loss, accuracy, steps, checksum) bitwise
# the unsplit trainer's with --grad-accum M at --batch-size B/M
PSTEPS=${TRAINER_GPU_PIPE_STEPS:-40}
PHALF=$((PSTEPS / 2))
PIPE="--hidden 64,32 --max-steps $PSTEPS"
# prun NP NAME ARGS...: NAME on NP ranks, on the device, every rank the same checksum
prun() {
    np=$1 n=$2; shift 2
    mpirun_t "$np" "$TRAINER" $COMMON "$@" >"$TMP/$n.log" 2>&1 || { cat "$TMP/$n.log"; fail "$n: exit $?"; }
    grep -q 'device cuda' "$TMP/$n.log" || { cat "$TMP/$n.log"; fail "$n: not on the device"; }
    u=$(sed -n 's/^rank [0-9]*: params_crc32=//p' "$TMP/$n.log" | sort -u | wc -l)
    [ "$u" = 1 ] || { cat "$TMP/$n.log"; fail "$n: the ranks' parameters differ"; }
}
pfinal() { sed -n 's/^final: \(test_acc=[^ ]* test_loss=[^ ]* steps=[0-9]*\) .*\(params_crc32=[0-9a-f]*\)$/\1 \2/p' "$TMP/$1.log"; }
same_final() { # NAME REF: the same final line, bitwise
    a=$(pfinal "$1") b=$(pfinal "$2")
    [ -n "$a" ] && [ "$a" = "$b" ] || { cat "$TMP/$1.log"; fail "$1 ('$a') is not bitwise $2 ('$b')"; }
    echo "$1 = $2 bitwise ($a)"
}
# On a GPU the unsplit model fuses the boundary's ReLU and bias gradient
# into cuBLASLt's DRELU_BGRAD epilogue, whose sums are not the split's
# kernel's: there the bitwise checks run on the unfused path (under the
# emulation the epilogue sums as the kernel does, so the default runs)
if [ "$kind" = GPU ]; then
    DDPC_TRAINER_GEMM=unfused
    export DDPC_TRAINER_GEMM
    echo "pipelines on a GPU: DDPC_TRAINER_GEMM=unfused for the bitwise checks"
fi
for M in 2 4; do
    prun 1 "ref$M" --device cuda $PIPE --ckpt-dir none --batch-size $((32 / M)) --grad-accum $M
    for sched in 1f1b gpipe; do
        prun 2 "pipe$M$sched" --device cuda $PIPE --ckpt-dir none --batch-size 32 --micro-batches $M \
            --pipeline-stages 2 --schedule $sched
        grep -q "^pipeline: 2 stage(s) x 1 replica(s) ($sched, $M micro-batch(es) of $((32 / M)))" \
            "$TMP/pipe$M$sched.log" || { cat "$TMP/pipe$M$sched.log"; fail "pipe$M$sched: no pipeline line"; }
        same_final "pipe$M$sched" "ref$M"
    done
done
# bf16: the activations and their gradients cross in bf16; on the unfused
# path (DDPC_TRAINER_GEMM=unfused) the boundary is the whole model's arithmetic
(export DDPC_TRAINER_GEMM=unfused
 prun 1 refbf16 --device cuda --precision bf16 $PIPE --ckpt-dir none --batch-size 8 --grad-accum 4
 prun 2 pipebf16 --device cuda --precision bf16 $PIPE --ckpt-dir none --batch-size 32 --micro-batches 4 \
     --pipeline-stages 2
 same_final pipebf16 refbf16) || exit 1
# 2 replicas x 2 stages: 4 ranks, a GPU each
if [ "$NP" -ge 4 ] || { [ "$kind" = "emulated GPU" ] && [ "${DDPC_EMU_DEVICES:-1}" -ge 4 ]; }; then
    prun 2 ref2x --device cuda $PIPE --ckpt-dir none --batch-size 16 --grad-accum 2
    prun 4 pipe2x2 --device cuda $PIPE --ckpt-dir none --batch-size 32 --micro-batches 2 --pipeline-stages 2
    grep -q "^pipeline: 2 stage(s) x 2 replica(s)" "$TMP/pipe2x2.log" || { cat "$TMP/pipe2x2.log"; fail "pipe2x2: no pipeline line"; }
    same_final pipe2x2 ref2x
else
    echo "pipelines: 2 replicas x 2 stages not run (4 ranks with a GPU each: TRAINER_GPU_NP=4, or DDPC_EMU_DEVICES=4 under the emulation)"
fi
# a pipeline's checkpoint (the unsplit format, SGD's momentum with it)
# resumed unsplit: bitwise the uninterrupted unsplit run (ref4)
prun 2 pfirst --device cuda $PIPE --max-steps "$PHALF" --ckpt-dir "$TMP/p" --batch-size 32 --micro-batches 4 \
    --pipeline-stages 2
ls "$TMP/p"/ckpt-*.h5 >/dev/null 2>&1 || { cat "$TMP/pfirst.log"; fail "pfirst: no checkpoint"; }
prun 1 presumed --device cuda $PIPE --ckpt-dir "$TMP/p" --batch-size 8 --grad-accum 4
grep -q "^trainer: resumed from $TMP/p/ckpt-0*$PHALF.h5" "$TMP/presumed.log" || { cat "$TMP/presumed.log"; fail "presumed: did not resume at step $PHALF"; }
same_final presumed ref4

# a timeline of the CUDA trainer (DDPC_TIMELINE): with nccl, each bucket's
# all-reduce on the NCCL stream's track, timed by its events, after its issue
DDPC_TIMELINE="$TMP/tl" DDPC_OVERLAP=1 DDPC_BUCKET_MB=0.01 DDPC_FIRST_BUCKET_MB=0.01 \
    run tl --device cuda --max-steps 10 --ckpt-dir none
python3 "$top_srcdir/src/tools/ddpc-timeline" merge "$TMP/tl" &&
    python3 "$top_srcdir/src/tools/ddpc-timeline" check "$TMP/tl/timeline.json" ||
    fail "the CUDA trainer's timeline breaks the format"
if grep -q 'all-reduce nccl' "$TMP/tl.log"; then
    python3 - "$TMP/tl/timeline.json" "$NP" <<'EOF' || fail "the CUDA trainer's timeline"
import json, sys
doc = json.load(open(sys.argv[1]))
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
         if e["ph"] == "M" and e["name"] == "thread_name"}
for r in range(int(sys.argv[2])):
    ev = [e for e in doc["traceEvents"] if e["ph"] != "M" and e["pid"] == r]
    issued = {e["args"]["seq"]: e for e in ev if e["name"] == "bucket issued"}
    gpu = [e for e in ev if names.get((r, e["tid"]), "").endswith("nccl stream")
           and e["name"] == "allreduce" and e.get("args", {}).get("seq") in issued]
    assert len(issued) >= 10 and len(gpu) == len(issued), (r, len(issued), len(gpu))
    late = [e for e in gpu if e["ts"] + e["dur"] < issued[e["args"]["seq"]]["ts"]]
    assert not late, (r, "an all-reduce ends before its bucket was issued", late[:2])
    print("timeline: rank %d: %d bucket all-reduces on the NCCL stream's track" % (r, len(gpu)))
EOF
else
    echo "timeline: not nccl here ($(grep -m1 'all-reduce' "$TMP/tl.log")): no NCCL stream track to check"
fi

echo "ok: the trainer on the $kind, $NP rank(s): precisions, graphs, accumulation, resume, checkpoints across kinds, pipelines, timeline"
