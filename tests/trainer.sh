#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer.sh: the trainer under mpiexec, outside Slurm:
#  - bad command lines: exit 2 and one message (rank 0's) naming the option
#  - a missing data directory, --device cuda without the CUDA model: exit 1, clear message
#  - 2 ranks, --max-steps: a final line, every rank's checksum equal, a valid metrics file
#  - --grad-accum 2 with half the batch gives the same step (up to rounding)
#  - SIGUSR1 to one rank mid-epoch: all stop at the same step, checkpoint, exit 3;
#    the rerun resumes and ends bitwise identical to the uninterrupted run
#  - a checkpoint of another model is refused with the difference named
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
# small and quick; 1 BLAS thread per rank (2 cores here)
COMMON="--data $DATA --hidden 64 --batch-size 32 --threads 1 --seed 11"

# --- bad command lines
expect_fail_msg '^trainer: --lr "fast": expected a number' mpirun_t 2 "$TRAINER" --lr fast
[ "$(grep -c 'expected a number' "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "message not printed once"; }
mpirun_t 1 "$TRAINER" --epochs 0 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "bad option: exit $rc, expected 2"
expect_fail_msg 'unknown option "--epoch"' mpirun_t 1 "$TRAINER" --epoch 1
expect_fail_msg 'hidden "8,x"' "$TRAINER" --hidden 8,x
"$TRAINER" --help >"$TMP/help" || fail "--help exit $?"
for o in --data --model --hidden --epochs --max-steps --batch-size --optimizer --lr --momentum \
         --weight-decay --grad-accum --clip --seed --ckpt-dir --ckpt-every --ckpt-keep --resume \
         --metrics --device; do
    grep -q -- "$o" "$TMP/help" || fail "--help does not show $o"
done

# --- errors at start
expect_fail_msg "--data \"$TMP/none\": not a directory" mpirun_t 2 "$TRAINER" --data "$TMP/none"
mpirun_t 1 "$TRAINER" --data "$TMP/none" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "missing data: exit $rc, expected 1"
expect_fail_msg '--device cuda: (this trainer was built without the CUDA model|no CUDA device visible)' \
    mpirun_t 1 "$TRAINER" $COMMON --device cuda --ckpt-dir none

# --- a short run on 2 ranks
mpirun_t 2 "$TRAINER" $COMMON --max-steps 300 --ckpt-dir none --print-crc-all \
    --metrics "$TMP/m.jsonl" --log-every 100 >"$TMP/ref" 2>&1 || { cat "$TMP/ref"; fail "2-rank run"; }
cat "$TMP/ref"
ref=$(sed -n 's/^final: .* steps=300 .*params_crc32=\([0-9a-f]\{8\}\)$/\1/p' "$TMP/ref")
[ -n "$ref" ] || fail "no final line with steps=300"
[ "$(grep -c "^rank [01]: params_crc32=$ref$" "$TMP/ref")" -eq 2 ] || fail "ranks' checksums differ"
python3 - "$TMP/m.jsonl" <<'PY' || fail "metrics file"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
kinds = [e["event"] for e in ev]
assert kinds.count("log") == 3 and kinds[-1] == "final", kinds
assert ev[-1]["steps"] == 300 and 0 < ev[-1]["test_acc"] <= 1, ev[-1]
assert all(e["loss"] > 0 and e["samples_per_s"] > 0 for e in ev if e["event"] == "log")
PY
echo "ok: metrics file"

# --- gradient accumulation: 2 micro-batches of 32 make the step one batch of
# 64 makes (the sampler deals the same samples); equal up to rounding
for a in "64 1" "32 2"; do
    # shellcheck disable=SC2086
    mpirun_t 2 "$TRAINER" $COMMON --batch-size ${a% *} --grad-accum ${a#* } --max-steps 3 \
        --ckpt-dir none --metrics "$TMP/acc${a#* }.jsonl" >"$TMP/acc" 2>&1 || { cat "$TMP/acc"; fail "accumulation run"; }
done
python3 - "$TMP/acc1.jsonl" "$TMP/acc2.jsonl" <<'PY' || fail "--grad-accum 2 differs from one batch twice the size"
import json, sys
a, b = ([json.loads(l) for l in open(f)][-1] for f in sys.argv[1:])
print("test_loss: batch 64: %.7f, 2 x 32 accumulated: %.7f" % (a["test_loss"], b["test_loss"]))
assert abs(a["test_loss"] - b["test_loss"]) < 1e-5 and a["test_acc"] == b["test_acc"]
PY
echo "ok: gradient accumulation"

# --- preemption: SIGUSR1 to rank 1 only, then resume
CK="$TMP/ck"
# (each step sleeps 20 ms: the signal arrives mid-run however fast the machine)
(export DDPC_TRAINER_TEST_STEP_SLEEP=0.02
 mpirun_t 2 "$TRAINER" $COMMON --max-steps 300 --ckpt-dir "$CK" --log-every 10 \
     --metrics "$TMP/p.jsonl" >"$TMP/p1" 2>&1) &
mpx=$!
# wait for step 30, then signal rank 1
wait_for '"step":30,' "$TMP/p.jsonl" 60 $mpx "$TMP/p1" "no progress"
r1=$(rank_pid $mpx 1)
[ -n "$r1" ] || { kill $mpx; fail "cannot find rank 1 among $(descendants $mpx)"; }
kill -USR1 "$r1"
wait $mpx; rc=$?
cat "$TMP/p1"
[ $rc -eq 3 ] || fail "signalled run: exit $rc, expected 3 (preempted)"
grep -q 'stop signal: stopping at step' "$TMP/p1" || fail "no stop message"
stopped=$(sed -n 's/^trainer: stop signal: stopping at step \([0-9]*\).*/\1/p' "$TMP/p1")
[ "$stopped" -lt 300 ] || fail "stopped at step $stopped: signal came too late"
[ -f "$CK/ckpt-$(printf %08d "$stopped").h5" ] || { ls -l "$CK"; fail "no checkpoint of step $stopped"; }
mpirun_t 2 "$TRAINER" $COMMON --max-steps 300 --ckpt-dir "$CK" --print-crc-all >"$TMP/p2" 2>&1 \
    || { cat "$TMP/p2"; fail "resumed run"; }
cat "$TMP/p2"
grep -q "resumed from $CK/ckpt-$(printf %08d "$stopped").h5: step $stopped" "$TMP/p2" || fail "did not resume"
grep -q "^final: .* steps=300 .*params_crc32=$ref$" "$TMP/p2" || fail "resumed run differs from the uninterrupted one"
echo "ok: preempted at step $stopped, resumed, bitwise identical ($ref)"

# --- a checkpoint of another model is refused, naming the first difference
expect_fail_msg 'does not match: /model/fc1.weight is float32\[32, 784\] here but float32\[64, 784\] in the checkpoint' \
    mpirun_t 2 "$TRAINER" $COMMON --hidden 32 --max-steps 300 --ckpt-dir "$CK"
grep -q 'use the same --model/--hidden/--optimizer, another --ckpt-dir, or --resume never' "$TMP/out" \
    || fail "no advice with the model mismatch"

# --- a frozen rank (SIGSTOP): the other rank's timeout ends the job with one
# message that names the bucket, the operation and the frozen rank, and one
# rank prefix
DDPC_TIMEOUT=3 mpirun_t 2 "$TRAINER" $COMMON --epochs 50 --ckpt-dir none --seed 4711 >"$TMP/frozen" 2>&1 &
job=$!
wait_for '^epoch 1/50 step' "$TMP/frozen" 30 $job "$TMP/frozen" "frozen-rank run never started"
victim=$(pgrep -n -f "trainer .*seed 4711") # the newest process of the run: a rank
[ -n "$victim" ] || { cat "$TMP/frozen"; fail "no rank process found to freeze"; }
kill -STOP "$victim"
t0=$(date +%s)
wait $job && { cat "$TMP/frozen"; fail "the run with a frozen rank exited 0"; }
dt=$(($(date +%s) - t0))
kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null
# the survivor waits in a bucket's all-reduce, or (under load) in the step's
# unready-parameter check or the stop vote after it: each names its place
line=$(grep -E 'trainer: (ddp: bucket [0-9]+ of [0-9]+ \(parameters [0-9]+\.\.[0-9]+, [0-9]+ floats\)|ddp: unready-parameter check|stop vote|log): comm: allreduce #[0-9]+ \([0-9]+ x (float32|int64|int32|float64), root 0\) did not complete within 3s' "$TMP/frozen" | head -n1)
[ -n "$line" ] || { cat "$TMP/frozen"; fail "no timeout message naming where the all-reduce was"; }
[ "$(printf '%s\n' "$line" | grep -o 'ddpc\[rank ' | wc -l)" -eq 1 ] || fail "more than one rank prefix in: $line"
[ "$dt" -lt 30 ] || fail "the job took ${dt}s to end after the rank froze (timeout 3s)"
# the side channel names the frozen rank (never entered, or entered and stopped)
printf '%s\n' "$line" | grep -Eq 'rank [01] on [^:]+: (no heartbeat for [0-9.]+s: stopped|alive)' ||
    fail "the timeout message does not name the frozen rank: $line"
echo "ok: a frozen rank: ended in ${dt}s with: $line"
