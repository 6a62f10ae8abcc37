#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-pipeline-faults.sh: a pipeline (2 stages x 2 replicas, 4 ranks)
# whose rank 1 (stage 1 of replica 0: its neighbour waits for its gradients,
# its column partner for its all-reduce) fails, ends, never hangs:
#  - frozen (SIGSTOP): the ranks waiting for it time out (DDPC_TIMEOUT=3),
#    the message says where they waited (a transfer of the pipeline or the
#    stage's all-reduce) and names rank 1 as the one at fault; the job ends
#    within 30 s;
#  - killed (SIGKILL): the launcher ends the job non-zero within 30 s, no
#    rank left running (a killed rank is the launcher's to report: MPICH's
#    hydra ends every rank within a second);
#  - the checkpoint written before the fault is intact: the next run resumes
#    from it.
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
COMMON="--data $DATA --device cpu --hidden 32,16 --threads 1 --epochs 50 --batch-size 16 --micro-batches 2
 --pipeline-stages 2 --log-every 5"

# start NAME: the 4-rank pipeline in the background ($job), until step 10
start() {
    rm -f "$TMP/$1.jsonl"
    # shellcheck disable=SC2086
    (export DDPC_TIMEOUT=3 DDPC_TRAINER_TEST_STEP_SLEEP=0.02
     mpirun_t 4 "$TRAINER" $COMMON --metrics "$TMP/$1.jsonl" --ckpt-dir "$TMP/ck-$1" \
         --ckpt-every 5 >"$TMP/$1" 2>&1) &
    job=$!
    wait_for '"step":10,' "$TMP/$1.jsonl" 60 $job "$TMP/$1" "$1: no progress"
    victim=$(rank_pid $job 1)
    [ -n "$victim" ] || { kill $job; fail "$1: cannot find rank 1"; }
}
# ended NAME: the job ended non-zero, within 30 s (the test's timeout is longer)
ended() {
    t0=$(date +%s)
    wait $job; rc=$?
    dt=$(($(date +%s) - t0))
    kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null
    [ $rc -ne 0 ] || { cat "$TMP/$1"; fail "$1: the job exited 0"; }
    # (not rc 124/137 for a hang: Open MPI's mpirun exits 137 for a rank
    # killed by signal 9; a hang is the test's timeout, long after 30 s)
    [ "$dt" -lt 30 ] || { cat "$TMP/$1"; fail "$1: the job took ${dt}s to end (hung?)"; }
}
# resumes NAME: a checkpoint written before the fault loads
resumes() {
    # shellcheck disable=SC2086
    mpirun_t 4 "$TRAINER" $COMMON --max-steps 12 --ckpt-dir "$TMP/ck-$1" >"$TMP/$1.2" 2>&1 \
        || { cat "$TMP/$1.2"; fail "$1: the run after the fault failed"; }
    grep -q "^trainer: resumed from $TMP/ck-$1/ckpt-" "$TMP/$1.2" || { cat "$TMP/$1.2"; fail "$1: did not resume"; }
    echo "ok: $1: the next run $(grep -m1 '^trainer: resumed from' "$TMP/$1.2")"
}

# --- frozen
start frozen
kill -STOP "$victim"
ended frozen
cat "$TMP/frozen"
# every survivor's timeout says where it waited; one names rank 1 as stopped
# (the others may wait for a rank that waits for rank 1)
grep -E 'did not complete within 3s' "$TMP/frozen" >"$TMP/lines" || fail "frozen: no timeout message"
while IFS= read -r l; do
    printf '%s\n' "$l" | grep -Eq '^ddpc\[rank [0-9]/4 [^]]*\] trainer: (pipeline|ddp|stop vote|log|checksum|checkpoint|agreement)' ||
        fail "frozen: a message does not say where the rank waited: $l"
done <"$TMP/lines"
line=$(grep -E 'rank 1 on [^:]+: no heartbeat for [0-9.]+s: stopped' "$TMP/lines" | head -n1)
[ -n "$line" ] || fail "frozen: no timeout message names rank 1 as stopped"
echo "ok: frozen rank 1: ended in ${dt}s (exit $rc) with: $line"
resumes frozen

# --- killed: the launcher ends the job (MPICH's hydra within a second,
# even with -disable-auto-cleanup; Open MPI's mpirun names the rank); no rank
# may be left running
start killed
kill -9 "$victim"
ended killed
cat "$TMP/killed"
grep -Eq 'Killed \(signal 9\)|signal 9|rank 1 with PID|rank 1 on [^:]+: its side channel closed' "$TMP/killed" ||
    fail "killed: nothing says that a rank was killed"
left=$(pgrep -f "trainer .*--metrics $TMP/killed.jsonl" || true)
[ -z "$left" ] || { ps -o pid,args -p "$(echo $left | tr ' ' ,)"; fail "killed: ranks left running: $left"; }
echo "ok: killed rank 1: the job ended in ${dt}s (exit $rc), no rank left"
resumes killed
