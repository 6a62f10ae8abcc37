#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-preempt.sh: preemption on the Slurm testbed, the way a cluster does
# it. slurm/train-preemptible.sbatch runs the trainer on 2 nodes; in the
# middle of epoch 1 (of 2) its batch shell gets SIGUSR1 (what --signal=B:USR1@90
# sends before the time limit: scancel --signal=USR1 --batch). The shell
# forwards it to the step, the trainer checkpoints and exits 3, the shell
# requeues the job, the second run resumes and finishes. Its final parameters
# must be bitwise identical to those of an uninterrupted run (same seed, same
# world size). The same once more through a launcher that loses the exit
# code (it always exits 0): the script reads the trainer's stop marker.
# Then the same job is preempted by Slurm itself: a job in the `urgent`
# partition takes both nodes (PreemptMode=REQUEUE), Slurm sends SIGTERM, the
# trainer checkpoints within KillWait and exits 3, Slurm requeues the job, and
# it again ends with the uninterrupted run's parameters.
. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/slurm/slurm_env.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
testbed_up || exit $?
ARGS="--data $DATA --epochs 2 --hidden 128 --batch-size 64 --threads 1 --seed 5"

# the uninterrupted run
# shellcheck disable=SC2086
srun_t -N2 -n2 --mpi=$PLUGIN "$TRAINER" $ARGS --ckpt-dir none --quiet >"$TMP/ref" 2>&1 \
    || { cat "$TMP/ref"; fail "reference run"; }
cat "$TMP/ref"
ref=$(sed -n 's/^final: .*steps=\([0-9]*\) .*params_crc32=\([0-9a-f]\{8\}\)$/\1 \2/p' "$TMP/ref")
[ -n "$ref" ] || fail "no final line in the reference run"
steps=${ref% *} ref=${ref#* }

# submit JOBNAME [TRAINER]: the preemptible job (each step sleeps 10 ms so
# that the signal reliably arrives mid-run); prints the job id
submit() {
    # shellcheck disable=SC2086
    sbatch --parsable -N2 --ntasks-per-node=1 -o "$TMP/$1.out" --chdir "$TMP" \
        --export=ALL,DDPC_TRAINER="${2:-$TRAINER}",DDPC_SRUN_MPI=$PLUGIN,DDPC_TRAINER_TEST_STEP_SLEEP=0.01 \
        "$top_srcdir/slurm/train-preemptible.sbatch" $ARGS --ckpt-dir "$TMP/$1.ck" --log-every 20 \
        --metrics "$TMP/$1.jsonl"
}
# wait_step NAME JOB: until 100 of 469 steps are done
wait_step() {
    i=0
    until grep -q '"event":"log","epoch":1,"step":100,' "$TMP/$1.jsonl" 2>/dev/null; do
        sleep 0.1; i=$((i + 1))
        [ $i -lt 1200 ] || { cat "$TMP/$1.out"; scancel "$2"; fail "job $2 never reached step 100"; }
    done
}
# wait_done NAME JOB: requeued, run again, completed
wait_done() {
    i=0
    until grep -q '^final: ' "$TMP/$1.out" 2>/dev/null && [ "$(job_state "$2")" = COMPLETED ]; do
        sleep 0.1; i=$((i + 1))
        [ $i -lt 1200 ] || { cat "$TMP/$1.out"; scancel "$2"; fail "job $2 did not complete after its requeue ($(job_state "$2"))"; }
    done
    cat "$TMP/$1.out"
}
# check_resumed NAME: stopped early with a checkpoint, resumed, same parameters
check_resumed() {
    out="$TMP/$1.out"
    stopped=$(sed -n 's/^trainer: stop signal: stopping at step \([0-9]*\).*/\1/p' "$out")
    [ -n "$stopped" ] && [ "$stopped" -lt "$steps" ] || fail "$1: the trainer did not stop early (step '$stopped' of $steps)"
    grep -q "checkpoint: $TMP/$1.ck/ckpt-$(printf %08d "$stopped").h5 (stop signal" "$out" || fail "$1: no checkpoint at the stop"
    grep -q '^.* job [0-9]*: run 2: ' "$out" || fail "$1: no second run"
    grep -q "resumed from $TMP/$1.ck/ckpt-$(printf %08d "$stopped").h5: step $stopped" "$out" \
        || fail "$1: the second run did not resume"
    grep -q "^final: .*steps=$steps .*params_crc32=$ref$" "$out" \
        || fail "$1: the resumed job's parameters differ from the uninterrupted run's ($ref)"
}

# 1. SIGUSR1 to the batch shell, as --signal=B:USR1@90 sends it
job=$(submit usr1) || fail "sbatch"
echo "job $job submitted"
wait_step usr1 "$job"
scancel --signal=USR1 --batch "$job" || fail "scancel --signal=USR1 --batch $job"
echo "SIGUSR1 sent to the batch shell of job $job"
wait_done usr1 "$job"
grep -q 'SIGUSR1: forwarding to the training step' "$TMP/usr1.out" || fail "the batch shell did not forward SIGUSR1"
grep -q 'checkpointed after a stop signal: requeueing' "$TMP/usr1.out" || fail "the job did not requeue itself"
check_resumed usr1
echo "ok: SIGUSR1: job $job stopped at step $stopped of $steps, requeued itself, resumed: params_crc32=$ref as uninterrupted"

# 1b. the same through a launcher that loses the exit code (mpiexec may
# return 0 for ranks that exited 3): the stop marker tells the script
cat >"$TMP/lossy" <<EOS
#!/bin/sh
# passes the signals on, and always exits 0
"$TRAINER" "\$@" & p=\$!
trap 'kill -USR1 \$p' USR1
trap 'kill -TERM \$p' TERM
while kill -0 \$p 2>/dev/null; do wait \$p; done
exit 0
EOS
chmod +x "$TMP/lossy"
job=$(submit lossy "$TMP/lossy") || fail "sbatch"
echo "job $job submitted (a launcher that always exits 0)"
wait_step lossy "$job"
scancel --signal=USR1 --batch "$job" || fail "scancel --signal=USR1 --batch $job"
wait_done lossy "$job"
grep -q "srun exited 0, but $TMP/lossy.ck/trainer.stop says the trainer exited 3 (SIGUSR1 at step [0-9]*): taking 3" "$TMP/lossy.out" ||
    fail "the script did not read the stop marker when the launcher lost the exit code"
grep -q 'checkpointed after a stop signal: requeueing' "$TMP/lossy.out" || fail "the job did not requeue itself on the marker"
check_resumed lossy
[ ! -e "$TMP/lossy.ck/trainer.stop" ] || fail "the completed run left the stop marker"
echo "ok: lost exit code: job $job requeued on its stop marker, resumed: params_crc32=$ref as uninterrupted"

# 2. preempted by a job of a higher-priority partition: SIGTERM, Slurm requeues
job=$(submit term) || fail "sbatch"
echo "job $job submitted"
wait_step term "$job"
urgent=$(sbatch --parsable -p urgent -N2 --exclusive -o "$TMP/urgent.out" --wrap "sleep 1") \
    || fail "sbatch -p urgent"
echo "job $urgent submitted to the urgent partition"
wait_done term "$job"
grep -q 'CANCELLED AT .* DUE TO PREEMPTION' "$TMP/term.out" || fail "job $job was not preempted"
grep -q 'stopped by SIGTERM with a checkpoint' "$TMP/term.out" || fail "the trainer did not stop on SIGTERM with exit 3"
check_resumed term
echo "ok: preemption: job $job stopped at step $stopped of $steps, requeued by Slurm, resumed: params_crc32=$ref as uninterrupted"

# 3. a crashed rank, restarted in the allocation (DDPC_MAX_RESTARTS): the last
# rank exits 1 after step 150 (once: a marker file); srun --kill-on-bad-exit=1
# ends the step at once (not after DDPC_TIMEOUT, 600 s here), the script runs
# it again, the trainer resumes from the checkpoint of step 150 and ends with
# the uninterrupted run's parameters
# submit_failing NAME EXTRA-ENV: the preemptible job with checkpoints every 50 steps
submit_failing() {
    # shellcheck disable=SC2086
    sbatch --parsable -N2 --ntasks-per-node=1 -o "$TMP/$1.out" --chdir "$TMP" \
        --export=ALL,DDPC_TRAINER="$TRAINER",DDPC_SRUN_MPI=$PLUGIN,DDPC_TIMEOUT=600,$2 \
        "$top_srcdir/slurm/train-preemptible.sbatch" $ARGS --ckpt-dir "$TMP/$1.ck" --ckpt-every 50 \
        --quiet
}
# wait_end JOB: until it left the queue; prints its state
wait_end() {
    i=0
    while :; do
        st=$(job_state "$1")
        case $st in COMPLETED|FAILED|CANCELLED*|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$st"; return ;; esac
        sleep 0.2; i=$((i + 1))
        [ $i -lt 900 ] || { scancel "$1"; echo "STUCK($st)"; return; }
    done
}
t0=$(date +%s)
job=$(submit_failing crash "DDPC_MAX_RESTARTS=2,DDPC_TRAINER_TEST_FAIL_AT_STEP=150:$TMP/crash.marker") || fail "sbatch"
st=$(wait_end "$job")
dt=$(($(date +%s) - t0))
cat "$TMP/crash.out"
[ "$st" = COMPLETED ] || fail "crash: job $job ended $st"
grep -q 'DDPC_TRAINER_TEST_FAIL_AT_STEP=150:.*exiting 1 after step 150' "$TMP/crash.out" || fail "crash: the rank did not crash"
grep -q 'the step failed (exit [0-9]*): restart 1 of 2 in this allocation, from .*ckpt-00000150.h5' "$TMP/crash.out" ||
    fail "crash: no restart from the checkpoint of step 150"
grep -q "resumed from $TMP/crash.ck/ckpt-00000150.h5: step 150" "$TMP/crash.out" || fail "crash: the restart did not resume"
grep -q "^final: .*steps=$steps .*params_crc32=$ref$" "$TMP/crash.out" || fail "crash: parameters differ from the uninterrupted run's ($ref)"
[ "$dt" -lt 120 ] || fail "crash: the job took ${dt}s (the crashed step must end at once, not after DDPC_TIMEOUT)"
echo "ok: a crashed rank: the step ended, restarted in the allocation, resumed at 150: params_crc32=$ref; ${dt}s for the whole job"

# 4. a crash that repeats before any new checkpoint: restarts stop with exit 4
t0=$(date +%s)
job=$(submit_failing loop "DDPC_MAX_RESTARTS=3,DDPC_TRAINER_TEST_FAIL_AT_STEP=120") || fail "sbatch"
st=$(wait_end "$job")
dt=$(($(date +%s) - t0))
cat "$TMP/loop.out"
[ "$st" = FAILED ] || fail "loop: job $job ended $st, expected FAILED"
grep -q 'the step failed again (exit [0-9]*) with no checkpoint newer than .*ckpt-00000100.h5: no progress, giving up (exit 4)' "$TMP/loop.out" ||
    fail "loop: no 'no progress' verdict"
[ "$(grep -c 'restart [0-9] of 3' "$TMP/loop.out")" -eq 1 ] || fail "loop: expected exactly one restart before giving up"
code=$(sacct -n -X -j "$job" -o ExitCode 2>/dev/null | tr -d ' ' | head -n1)
[ -z "$code" ] || [ "$code" = 4:0 ] || fail "loop: exit code $code, expected 4:0"
echo "ok: a crash loop: one restart, then exit 4 (no progress) after ${dt}s"


# 5. scontrol suspend / resume, end to end: the whole job stopped for three
# times its timeout (DDPC_TIMEOUT=2, 6 s) resumes and ends with the
# uninterrupted run's parameters (the timeouts count the time the processes
# run; tests/monitor.sh stops a job in the middle of a wait, which fails
# without that rule)
job=$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$TMP/susp.out" --chdir "$TMP" \
    --export=ALL,DDPC_TRAINER="$TRAINER",DDPC_SRUN_MPI=$PLUGIN,DDPC_TIMEOUT=2,DDPC_TRAINER_TEST_STEP_SLEEP=0.01 \
    "$top_srcdir/slurm/train-preemptible.sbatch" $ARGS --ckpt-dir "$TMP/susp.ck" --log-every 20 \
    --metrics "$TMP/susp.jsonl") || fail "sbatch"
wait_step susp "$job"
scontrol suspend "$job" || fail "scontrol suspend $job"
sleep 6
[ "$(job_state "$job")" = SUSPENDED ] || fail "job $job is $(job_state "$job") after scontrol suspend"
scontrol resume "$job" || fail "scontrol resume $job"
st=$(wait_end "$job")
cat "$TMP/susp.out"
[ "$st" = COMPLETED ] || fail "suspend: job $job ended $st"
if grep -q 'did not complete within' "$TMP/susp.out"; then fail "suspend: a spurious timeout"; fi
grep -q "^final: .*steps=$steps .*params_crc32=$ref$" "$TMP/susp.out" || fail "suspend: parameters differ ($ref)"
echo "ok: suspended 6 s with DDPC_TIMEOUT=2, resumed, no timeout: params_crc32=$ref"
