#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-pmix.sh: DDPC_BACKEND=nccl srun -N2 -n4 --mpi=pmix trainer --device
# cuda on the Slurm testbed with Debian's MPICH, which has no PMIx client:
# MPI is not wired (each process is a 1-rank MPI job), the gradients go
# through NCCL, whose id travels through PMIx, and the trainer's control
# messages (agreement, evaluation and log sums, the stop vote, checkpoint
# statuses) through the device communicator (the setup's first agreements
# through the key exchange, PMIx). On the device emulation
# (configure --with-cuda=emulate; its NCCL needs no MPI either), so every
# result here is emulated:
#  - the launch trains to the end, every rank the same parameters, and ends
#    bitwise where the same run launched with MPI wired (--mpi=pmi2) ends;
#  - a run stopped by SIGUSR1 (the stop vote without MPI) checkpoints and
#    exits 3; rerun, it resumes and ends bitwise where the uninterrupted run
#    ends.
. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/slurm/slurm_env.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
[ "$DDPC_CUDA_EMULATED" = yes ] ||
    skip "needs the device emulation (configure --with-cuda=emulate): this machine has no GPU for the nccl backend"
[ "$DDPC_MPI_FLAVOR" = mpich ] ||
    skip "$DDPC_MPI_FLAVOR has a PMIx client: srun --mpi=pmix wires its MPI (the unwired launch is MPICH's)"
testbed_up || exit $?
export DDPC_SRUN_TIMEOUT=${DDPC_SRUN_TIMEOUT:-240}
# two ranks per node, an emulated GPU each; the nccl backend
export DDPC_BACKEND=nccl DDPC_EMU_DEVICES=2
STEPS=60
COMMON="--data $DATA --device cuda --hidden 64 --batch-size 32 --threads 1 --seed 11 --lr 0.01 --print-crc-all --log-every 10"

final_field() { sed -n "s/^final: .*$2=\([^ ]*\).*/\1/p" "$1" | tail -1; }
# check NAME: four ranks, the same parameters on each
check() {
    u=$(sed -n 's/^rank [0-3]: params_crc32=//p' "$TMP/$1" | sort -u)
    [ "$(sed -n 's/^rank \([0-3]\): params_crc32=.*/\1/p' "$TMP/$1" | sort -u | wc -l)" = 4 ] &&
        [ "$(echo "$u" | wc -l)" = 1 ] || { cat "$TMP/$1"; fail "$1: not 4 ranks with the same parameters"; }
    echo "$1: $(grep '^final:' "$TMP/$1")"
}

# shellcheck disable=SC2086
srun_t -N2 -n4 --mpi=pmix "$TRAINER" $COMMON --max-steps $STEPS --ckpt-dir "$TMP/c1" >"$TMP/whole" 2>&1 ||
    { cat "$TMP/whole"; fail "srun --mpi=pmix trainer --device cuda: exit $?"; }
check whole
grep -q '^trainer: 4 rank(s) on 2 node(s) via pmix, device cuda .*(emulated).*all-reduce nccl' "$TMP/whole" ||
    { cat "$TMP/whole"; fail "whole: not 4 ranks on 2 nodes, emulated GPUs, nccl"; }
grep -q 'stop vote: .* through the device communicator' "$TMP/whole" ||
    { cat "$TMP/whole"; fail "whole: the stop vote did not go through the device communicator"; }
[ "$(final_field "$TMP/whole" steps)" = $STEPS ] || fail "whole: not $STEPS steps"
grep 'stop vote' "$TMP/whole"

# the same training with MPI wired (--mpi=pmi2): the control path changes nothing
# shellcheck disable=SC2086
srun_t -N2 -n4 --mpi=pmi2 "$TRAINER" $COMMON --max-steps $STEPS --ckpt-dir none >"$TMP/wired" 2>&1 ||
    { cat "$TMP/wired"; fail "srun --mpi=pmi2: exit $?"; }
check wired
grep 'stop vote' "$TMP/wired"
[ "$(final_field "$TMP/wired" params_crc32)" = "$(final_field "$TMP/whole" params_crc32)" ] ||
    fail "the unwired launch's parameters differ from the wired launch's"
echo "ok: unwired (pmix) = wired (pmi2) bitwise"

# stopped by SIGUSR1 mid-run: the vote through the device, a checkpoint, exit 3
# shellcheck disable=SC2086
DDPC_TRAINER_TEST_STEP_SLEEP=0.05 srun_t -N2 -n4 --mpi=pmix -J ddpc-pmix-stop "$TRAINER" $COMMON \
    --max-steps $STEPS --ckpt-dir "$TMP/c2" >"$TMP/first" 2>&1 &
pid=$!
i=0
until grep -q 'step 20/' "$TMP/first" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 1200 ] || { kill $pid; cat "$TMP/first"; fail "the run to stop never reached step 20"; }
    kill -0 $pid 2>/dev/null || { cat "$TMP/first"; fail "the run to stop ended before step 20"; }
    sleep 0.1
done
scancel --signal=USR1 -n ddpc-pmix-stop || fail "scancel --signal=USR1"
wait $pid
rc=$?
[ $rc = 3 ] || { cat "$TMP/first"; fail "the stopped run exited $rc, expected 3 (preempted)"; }
grep -q 'stopping at step' "$TMP/first" || { cat "$TMP/first"; fail "no stop said"; }
echo "stopped: $(grep -m1 'stopping at step' "$TMP/first")"

# shellcheck disable=SC2086
srun_t -N2 -n4 --mpi=pmix "$TRAINER" $COMMON --max-steps $STEPS --ckpt-dir "$TMP/c2" >"$TMP/resumed" 2>&1 ||
    { cat "$TMP/resumed"; fail "the resumed run: exit $?"; }
check resumed
grep -Eq 'resum' "$TMP/resumed" || { cat "$TMP/resumed"; fail "resumed: no resume said"; }
[ "$(final_field "$TMP/resumed" params_crc32)" = "$(final_field "$TMP/whole" params_crc32)" ] ||
    fail "the resumed run is not bitwise the uninterrupted run"
echo "ok (emulated): srun --mpi=pmix without MPI: trained, stopped by the vote, resumed bitwise"
