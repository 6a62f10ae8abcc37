#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-sigint.sh: Ctrl-C, the way a terminal sends it: SIGINT to the whole
# process group of `mpiexec -n 2 trainer` (the launcher and every rank), in
# the middle of a run, several times. Every rank must stop after the same
# step, rank 0 writes a checkpoint of it, and every rank exits 130 (128 +
# SIGINT; not 3, which asks a requeue script to start the run again), with
# no final line; a rerun resumes from that checkpoint.
# The ranks' own exit codes are recorded by a wrapper: MPICH's hydra 4.0
# loses them once it was itself signalled (it reports 0 for a rank that
# exited 130, in about 1 of 4 trials here, also for a plain program), so
# mpiexec's code is printed and counted, and must be 130 or that 0.
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
command -v python3 >/dev/null || skip "python3 is needed to start the job in its own process group"
# Open MPI's mpirun does not pass SIGINT on: it sends the ranks SIGTERM (then
# SIGKILL), so they stop as for a preemption (exit 3: tests/trainer-preempt.sh)
[ "$DDPC_MPI_FLAVOR" = mpich ] || skip "Open MPI's mpirun turns Ctrl-C into SIGTERM for the ranks (a preemption, exit 3); this test is hydra's SIGINT"
COMMON="--data $DATA --hidden 32 --batch-size 32 --threads 1 --seed 7 --max-steps 2000"
TRIALS=${TRIALS:-4}
# run_pg OUT CMD...: CMD in the background in a process group of its own,
# with SIGINT at its default (a shell's background jobs ignore it); PGID=$!
run_pg() {
    out=$1; shift
    python3 -c 'import os, signal, sys
os.setsid(); signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$@" >"$out" 2>&1 &
}
# the wrapper records a rank's exit code (130 also for a death by SIGINT: the
# stop and exit lines tell them apart); it traps SIGINT, so that it waits
# for the trainer (which gets SIGINT at its default, not ignored)
WRAP='trap : INT; "$@"; rc=$?; echo $rc >"$RCDIR/rc.${PMI_RANK:-$OMPI_COMM_WORLD_RANK}"; exit $rc'
zero=0
i=1
while [ $i -le "$TRIALS" ]; do
    CK="$TMP/ck$i" RCDIR="$TMP/rc$i"
    mkdir -p "$RCDIR"
    export RCDIR
    # (not under timeout(1): it sends the SIGINT it gets to its group again,
    # and hydra takes a second SIGINT for "force abort")
    DDPC_TRAINER_TEST_STEP_SLEEP=0.02 run_pg "$TMP/out$i" env -u SLURM_CONF UCX_NET_DEVICES=lo \
        $MPIEXEC $MPIEXEC_FLAGS -n 2 sh -c "$WRAP" sh "$TRAINER" $COMMON \
        --ckpt-dir "$CK" --log-every 10 --metrics "$TMP/m$i.jsonl"
    pg=$!
    (sleep "$TEST_TIMEOUT"; kill -KILL -$pg) 2>/dev/null &
    dog=$!
    n=0
    until grep -q '"step":30,' "$TMP/m$i.jsonl" 2>/dev/null; do
        sleep 0.05; n=$((n + 1))
        [ $n -lt 1200 ] || { kill -KILL -$pg; kill $dog; cat "$TMP/out$i"; fail "trial $i: no progress"; }
    done
    t0=$(date +%s.%N)
    kill -INT -$pg
    wait $pg; rc=$?
    kill $dog 2>/dev/null
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    cat "$TMP/out$i"
    for r in 0 1; do
        [ "$(cat "$RCDIR/rc.$r" 2>/dev/null)" = 130 ] ||
            fail "trial $i: rank $r exited '$(cat "$RCDIR/rc.$r" 2>/dev/null)' (killed, or no code), expected 130"
    done
    case $rc in
    130) ;;
    0) zero=$((zero + 1)); echo "note: trial $i: mpiexec returned 0 for ranks that exited 130 (hydra)" ;;
    *) fail "trial $i: mpiexec exited $rc, expected 130" ;;
    esac
    if grep -q '^final:' "$TMP/out$i"; then fail "trial $i: a final line after SIGINT"; fi
    stopped=$(sed -n 's/^trainer: stop signal (SIGINT): stopping at step \([0-9]*\) .*/\1/p' "$TMP/out$i")
    [ -n "$stopped" ] || fail "trial $i: no stop line naming SIGINT"
    [ -f "$CK/ckpt-$(printf %08d "$stopped").h5" ] || { ls -l "$CK"; fail "trial $i: no checkpoint of step $stopped"; }
    grep -q "^trainer: interrupted (SIGINT): exit 130" "$TMP/out$i" || fail "trial $i: no exit line"
    grep -q '"event":"interrupted"' "$TMP/m$i.jsonl" || fail "trial $i: no interrupted event in the metrics"
    echo "ok: trial $i: SIGINT at step >= 30, stopped at $stopped, checkpointed, ranks exit 130, mpiexec $rc, ${dt}s from the signal to the exit"
    i=$((i + 1))
done
echo "mpiexec returned 0 in $zero of $TRIALS trials (the ranks: 130 in all)"

# the rerun resumes from the last trial's checkpoint
mpirun_t 2 "$TRAINER" $COMMON --max-steps $((stopped + 10)) --ckpt-dir "$CK" >"$TMP/again" 2>&1 ||
    { cat "$TMP/again"; fail "the rerun after SIGINT"; }
grep -q "resumed from $CK/ckpt-$(printf %08d "$stopped").h5: step $stopped" "$TMP/again" ||
    { cat "$TMP/again"; fail "the rerun did not resume from step $stopped"; }
echo "ok: the rerun resumed from step $stopped"
