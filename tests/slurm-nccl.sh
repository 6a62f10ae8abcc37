#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# slurm-nccl.sh: DDPC_BACKEND=nccl srun -N2 -n4 --mpi=pmix on the Slurm
# testbed (tests/slurm/testbed.sh) with this build's MPI. With MPICH, which
# has no PMIx client, MPI is a singleton in each rank: the nccl backend
# still discovers the world through PMIx and exchanges the GPU checks and
# the ncclUniqueId through PMIx, so every rank must stop with one clear "no
# usable GPU" message (this machine has none), not the MPI singleton
# refusal, and not a hang.
. "$(dirname "$0")/lib.sh"
[ -x "$top_builddir/tests/gpu_boot" ] || skip "built without NCCL (configure --with-nccl)"
. "$top_srcdir/tests/slurm/slurm_env.sh"
testbed_up || exit $?

export DDPC_BACKEND=nccl
expect_fail_msg 'comm: backend nccl: no usable GPU on 4 of 4 rank\(s\): 0 \([^)]+\), 1 \([^)]+\), 2 \([^)]+\), 3 \([^)]+\); here: device: no usable GPU' \
    srun_t -N2 -n4 --mpi=pmix "$top_builddir/tests/gpu_boot"
out=$TMP/out
[ "$(grep -c 'no usable GPU on 4 of 4' "$out")" -eq 4 ] || { cat "$out"; fail "expected the message on each of the 4 ranks"; }
for r in 0 1 2 3; do
    grep -Eq "^gpu_boot: rank $r of 4, local $((r % 2)) of 2, node $((r / 2)) of 2, world from pmix" "$out" \
        || { cat "$out"; fail "rank $r did not find its place through PMIx"; }
done
if [ "$DDPC_MPI_FLAVOR" = mpich ]; then
    grep -q 'MPI not wired' "$out" || { cat "$out"; fail "expected MPICH to be unwired under --mpi=pmix"; }
fi
if grep -q 'MPI_COMM_WORLD says' "$out"; then cat "$out"; fail "the MPI singleton refusal on the nccl path"; fi
cat "$out"
echo "ok: srun --mpi=pmix with the nccl backend: world from PMIx, id exchanged, one clear error"

# the trainer on such a launch: its control messages would go through PMIx,
# but its gradients need MPI on the cpu and NCCL needs a GPU: one clear
# message from rank 0 (every rank reaches the same verdict), no crash or hang
if [ "$DDPC_MPI_FLAVOR" = mpich ]; then
    expect_fail_msg 'trainer: MPI is not wired in this launch .*a rank has no usable GPU .*srun --mpi=pmi2' \
        srun_t -N2 -n4 --mpi=pmix "$top_builddir/trainer" --epochs 1
    [ "$(grep -c 'MPI is not wired' "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "expected 1 message"; }
    expect_fail_msg 'trainer: MPI is not wired in this launch .*--device cpu reduces its gradients through MPI' \
        srun_t -N2 -n4 --mpi=pmix "$top_builddir/trainer" --epochs 1 --device cpu
    [ "$(grep -c 'MPI is not wired' "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "expected 1 message"; }
    expect_fail_msg "trainer: MPI is not wired in this launch .*a pipeline's stages pass activations through MPI" \
        srun_t -N2 -n4 --mpi=pmix "$top_builddir/trainer" --epochs 1 --device cuda --pipeline-stages 2
    [ "$(grep -c 'MPI is not wired' "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "expected 1 message"; }
    # --device cuda without a GPU: each rank names its missing GPU, once
    expect_fail_msg 'trainer.*(no CUDA device visible|no usable GPU)' \
        srun_t -N2 -n4 --mpi=pmix "$top_builddir/trainer" --epochs 1 --device cuda
    cat "$TMP/out"
fi
