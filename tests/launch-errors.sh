#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# launch-errors.sh: ddpc-info started with a wrong launch environment or a
# malformed option fails fast with one clear message, never a hang.
. "$(dirname "$0")/lib.sh"
INFO="$top_builddir/ddpc-info"
T="timeout -k 2 30"
export CK_FORK
expect_fail_msg 'RANK=5, WORLD_SIZE=2: expected 0 <= rank < size' env RANK=5 WORLD_SIZE=2 $T "$INFO"
expect_fail_msg 'DDPC_TIMEOUT="-3": expected a number' env DDPC_TIMEOUT=-3 $T "$INFO"
expect_fail_msg 'DDPC_BACKEND="gloo": expected one of auto\|mpi\|nccl' env DDPC_BACKEND=gloo $T "$INFO"
expect_fail_msg 'SLURM_NTASKS="four"' env SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=four $T "$INFO"
expect_fail_msg 'unknown option "--bogus"' $T "$INFO" --bogus
# An environment claiming 2 ranks for a process that MPI knows as a singleton:
# a real program (here the comm test) must refuse to run as a 1-rank job.
expect_fail_msg 'torchrun says rank 0 of 2 but MPI_COMM_WORLD says rank 0 of 1' \
    env RANK=0 WORLD_SIZE=2 $T "$top_builddir/tests/mpi_comm"
# ddpc-info reports the disagreement instead of failing
env RANK=0 WORLD_SIZE=1 $T "$INFO" >"$TMP/ok" 2>&1 || { cat "$TMP/ok"; fail "ddpc-info with a 1-rank torchrun env"; }
grep -q 'rank=0 size=1 local_rank=0 local_size=1 node=0 host=.* source=torchrun backend=mpi' "$TMP/ok" \
    || { cat "$TMP/ok"; fail "unexpected ddpc-info line"; }
echo "ok: all launch errors reported"
