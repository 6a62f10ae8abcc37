#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-lock.sh: one checkpoint directory, two jobs; the stop marker.
# - a second trainer started on the directory of a running one is refused at
#   once (exit 1, one message naming the first one's host and pid), writes
#   nothing, and the first one's checkpoints are untouched;
# - the first one, stopped by SIGTERM (what Slurm sends), checkpoints, exits
#   3 and leaves <ckpt-dir>/trainer.stop saying exit=3, the signal, the step
#   and the checkpoint, for job scripts whose launcher loses the code;
# - the second one, started again, resumes from that checkpoint, removes the
#   marker at its start and leaves none at its end;
# - a job whose rank 0 was killed (SIGKILL) left its lock file naming it: the
#   next run takes the directory over with a warning naming the dead writer;
# - DDPC_CKPT_DIR over --ckpt-dir: the trainer's lines name the directory
#   written, not the option's;
# - the test hooks parse their numbers strictly (1e99 is not step 1).
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
COMMON="--data $DATA --hidden 32 --batch-size 32 --threads 1 --seed 3 --log-every 10"
CK="$TMP/ck"
steps_of() { sed -n 's/^trainer: stop signal: stopping at step \([0-9]*\) .*/\1/p' "$1"; }

# A: slowed down, so that it runs while B starts
DDPC_TRAINER_TEST_STEP_SLEEP=0.02 mpirun_t 2 "$TRAINER" $COMMON --max-steps 3000 --ckpt-every 40 \
    --ckpt-dir "$CK" --metrics "$TMP/a.jsonl" >"$TMP/a" 2>&1 &
a=$!
wait_for '"event":"checkpoint","step":40,' "$TMP/a.jsonl" 60 $a "$TMP/a" "run A never saved step 40"
holder=$(sed -n 's/^pid=//p' "$CK/ddpc.lock")
host=$(sed -n 's/^host=//p' "$CK/ddpc.lock")
[ -n "$holder" ] && [ -n "$host" ] || { cat "$CK/ddpc.lock"; fail "the lock file names no host and pid"; }
before=$(cd "$CK" && sha256sum ckpt-*.h5)

# B: the same directory while A runs
t0=$(date +%s.%N)
mpirun_t 2 "$TRAINER" $COMMON --max-steps 3000 --ckpt-dir "$CK" >"$TMP/b" 2>&1
rc=$?
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
cat "$TMP/b"
[ $rc -eq 1 ] || fail "the second job exited $rc, expected 1"
pat="ckpt: checkpoint directory \"$CK\" is in use by another job: host $host, pid $holder, since "
[ "$(grep -c "$pat" "$TMP/b")" -eq 1 ] || fail "expected one message naming host $host pid $holder"
! grep -q '^step\|^checkpoint:' "$TMP/b" || fail "the refused job trained or saved"
kill -0 $a 2>/dev/null || { cat "$TMP/a"; fail "run A did not survive the second job's start"; }
echo "ok: a second job on $CK refused in ${dt}s, naming host $host pid $holder"

# A stopped by SIGTERM: exit 3, the marker
kill -TERM "$holder" # rank 0 only: the stop vote brings every rank to the same step
wait $a; rc=$?
tail -5 "$TMP/a"
stopped=$(steps_of "$TMP/a")
[ -n "$stopped" ] || fail "run A did not stop on SIGTERM"
ckpt="$CK/ckpt-$(printf %08d "$stopped").h5"
[ -f "$ckpt" ] || { ls -l "$CK"; fail "no checkpoint of step $stopped"; }
case $rc in 3) ;; 0) echo "note: mpiexec returned 0 for ranks that exited 3 (hydra): the marker says 3" ;;
    *) fail "run A exited $rc, expected 3" ;; esac
m="$CK/trainer.stop"
cat "$m"
[ "$(sed -n 's/^exit=//p' "$m")" = 3 ] && [ "$(sed -n 's/^reason=//p' "$m")" = preempted ] &&
    [ "$(sed -n 's/^signal=//p' "$m")" = SIGTERM ] && [ "$(sed -n 's/^step=//p' "$m")" = "$stopped" ] &&
    [ "$(sed -n 's/^checkpoint=//p' "$m")" = "$ckpt" ] && [ "$(sed -n 's/^pid=//p' "$m")" = "$holder" ] ||
    fail "the stop marker does not say exit 3, SIGTERM, step $stopped, $ckpt, pid $holder"
[ ! -s "$CK/ddpc.lock" ] || { cat "$CK/ddpc.lock"; fail "run A ended without emptying its lock file"; }
echo "$before" | (cd "$CK" && sha256sum -c --quiet -) 2>/dev/null ||
    echo "note: retention removed some of A's early checkpoints (expected with --ckpt-keep)"
echo "ok: SIGTERM: run A stopped at step $stopped, exit $rc, marker $m"

# B again: resumes, the marker goes at its start and none is left at its end
mpirun_t 2 "$TRAINER" $COMMON --max-steps $((stopped + 20)) --ckpt-dir "$CK" >"$TMP/b2" 2>&1 ||
    { cat "$TMP/b2"; fail "the second job after A's end"; }
grep -q "resumed from $ckpt: step $stopped" "$TMP/b2" || { cat "$TMP/b2"; fail "did not resume from $ckpt"; }
[ ! -e "$m" ] || fail "a completed run left the stop marker"
echo "ok: the next run resumed from step $stopped and removed the marker"

# rank 0 killed: the lock file names it; the next run takes over, warning
DDPC_TRAINER_TEST_STEP_SLEEP=0.02 mpirun_t 2 "$TRAINER" $COMMON --max-steps 3000 --ckpt-dir "$CK" \
    --metrics "$TMP/k.jsonl" >"$TMP/k" 2>&1 &
k=$!
wait_for '"event":"log"' "$TMP/k.jsonl" 60 $k "" "the run to kill never logged"
dead=$(sed -n 's/^pid=//p' "$CK/ddpc.lock")
kill -KILL "$dead"
wait $k
mpirun_t 2 "$TRAINER" $COMMON --max-steps $((stopped + 30)) --ckpt-dir "$CK" >"$TMP/c" 2>&1 ||
    { cat "$TMP/c"; fail "the run after a killed one"; }
grep -q "warning: ckpt: $CK/ddpc.lock: the previous writer (host $host, pid $dead, since .*) ended without releasing" "$TMP/c" ||
    { cat "$TMP/c"; fail "no warning naming the killed writer (pid $dead)"; }
echo "ok: a killed writer's lock (pid $dead) was taken over with a warning"

# DDPC_CKPT_DIR wins over --ckpt-dir: the lines name the directory written
DDPC_CKPT_DIR="$TMP/env" mpirun_t 2 "$TRAINER" $COMMON --max-steps 5 --ckpt-dir "$TMP/opt" >"$TMP/e" 2>&1 ||
    { cat "$TMP/e"; fail "DDPC_CKPT_DIR run"; }
grep -q "^checkpoint: $TMP/env/ckpt-00000005.h5 " "$TMP/e" && [ -f "$TMP/env/ckpt-00000005.h5" ] &&
    grep -q "checkpoints in $TMP/env (DDPC_CKPT_DIR, over --ckpt-dir $TMP/opt)" "$TMP/e" ||
    { cat "$TMP/e"; fail "the trainer's lines do not name DDPC_CKPT_DIR's directory"; }
echo "ok: DDPC_CKPT_DIR: the checkpoint line names $TMP/env"

# the test hooks: strict numbers
for v in "DDPC_TRAINER_TEST_STEP_SLEEP=1e99" "DDPC_TRAINER_TEST_STEP_SLEEP=0.1s" \
         "DDPC_TRAINER_TEST_FAIL_AT_STEP=1e99" "DDPC_TRAINER_TEST_FAIL_AT_STEP=-4"; do
    (export "$v"; mpirun_t 2 "$TRAINER" $COMMON --max-steps 5 --ckpt-dir none >"$TMP/h" 2>&1)
    rc=$?
    [ $rc -eq 2 ] && [ "$(grep -c "trainer: ${v%%=*}=\"${v#*=}\": expected" "$TMP/h")" -eq 1 ] ||
        { cat "$TMP/h"; fail "$v: exit $rc, expected 2 with one message naming it"; }
    echo "ok: $v refused: $(grep -m1 expected "$TMP/h")"
done
