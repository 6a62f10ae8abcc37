#!/bin/sh
# trainer-preempt.sh: preemption on the Slurm testbed, the way a cluster does
# it. slurm/train-preemptible.sbatch runs the trainer on 2 nodes; in the
# middle of epoch 1 (of 2) its batch shell gets SIGUSR1 (what --signal=B:USR1@90
# sends before the time limit: scancel --signal=USR1 --batch). The shell
# forwards it to the step, the trainer checkpoints and exits 3, the shell
# requeues the job, the second run resumes and finishes. Its final parameters
# must be bitwise identical to those of an uninterrupted run (same seed, same
# world size).
. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/slurm/slurm_env.sh"
TRAINER="$top_builddir/trainer"
DATA=${DDPC_TEST_DATA:-/usr/share/datasets/fashion-mnist}
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || [ -f "$DATA/train-images-idx3-ubyte" ] \
    || skip "no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)"
testbed_up || exit $?
PLUGIN=pmix
[ "$DDPC_MPI_FLAVOR" = mpich ] && PLUGIN=pmi2
ARGS="--data $DATA --epochs 2 --hidden 128 --batch-size 64 --threads 1 --seed 5"

# the uninterrupted run
# shellcheck disable=SC2086
srun_t -N2 -n2 --mpi=$PLUGIN "$TRAINER" $ARGS --ckpt-dir none --quiet >"$TMP/ref" 2>&1 \
    || { cat "$TMP/ref"; fail "reference run"; }
cat "$TMP/ref"
ref=$(sed -n 's/^final: .*steps=\([0-9]*\) .*params_crc32=\([0-9a-f]\{8\}\)$/\1 \2/p' "$TMP/ref")
[ -n "$ref" ] || fail "no final line in the reference run"
steps=${ref% *} ref=${ref#* }

# the preemptible job
out="$TMP/job.out"
# shellcheck disable=SC2086
job=$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$out" --chdir "$TMP" \
      --export=ALL,DDPC_TRAINER="$TRAINER",DDPC_SRUN_MPI=$PLUGIN,DDPC_TRAINER_TEST_STEP_SLEEP=0.01 \
      "$top_srcdir/slurm/train-preemptible.sbatch" $ARGS --ckpt-dir "$TMP/ck" --log-every 20 \
      --metrics "$TMP/job.jsonl") || fail "sbatch"
echo "job $job submitted"
i=0
while [ $i -lt 1200 ]; do # 100 of 469 steps done: signal the batch shell
    grep -q '"event":"log","epoch":1,"step":100,' "$TMP/job.jsonl" 2>/dev/null && break
    sleep 0.1
    i=$((i + 1))
done
[ $i -lt 1200 ] || { cat "$out"; scancel "$job"; fail "job never reached step 100"; }
scancel --signal=USR1 --batch "$job" || fail "scancel --signal=USR1 --batch $job"
echo "SIGUSR1 sent to the batch shell of job $job"
i=0
while [ $i -lt 1200 ]; do # requeued, run again, done
    grep -q '^final: ' "$out" 2>/dev/null && [ "$(job_state "$job")" = COMPLETED ] && break
    sleep 0.1
    i=$((i + 1))
done
cat "$out"
[ $i -lt 1200 ] || { scancel "$job"; fail "job $job did not complete after its requeue ($(job_state "$job"))"; }
grep -q 'SIGUSR1: forwarding to the training step' "$out" || fail "the batch shell did not forward SIGUSR1"
stopped=$(sed -n 's/^trainer: stop signal: stopping at step \([0-9]*\).*/\1/p' "$out")
[ -n "$stopped" ] && [ "$stopped" -lt "$steps" ] || fail "the trainer did not stop early (step '$stopped' of $steps)"
grep -q "checkpoint: $TMP/ck/ckpt-$(printf %08d "$stopped").h5 (stop signal" "$out" || fail "no checkpoint at the stop"
grep -q 'checkpointed after a stop signal: requeueing' "$out" || fail "the job did not requeue itself"
grep -q '^.* job [0-9]*: run 2: ' "$out" || fail "no second run"
grep -q "resumed from $TMP/ck/ckpt-$(printf %08d "$stopped").h5: step $stopped" "$out" || fail "the second run did not resume"
grep -q "^final: .*steps=$steps .*params_crc32=$ref$" "$out" \
    || fail "the resumed job's parameters differ from the uninterrupted run's ($ref)"
echo "ok: job $job stopped at step $stopped of $steps, requeued, resumed: params_crc32=$ref as uninterrupted"
