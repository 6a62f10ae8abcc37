#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# gpu-groups-timeout.sh: on nccl, a send without its receive (tests/gpu_groups
# timeout-nccl), in a process run of its own at 2 and 4 ranks: the watchdog
# aborts every NCCL communicator of rank 0, whose next call says why, with
# the side channel's word on the peer (rank 1: alive). The run exits 0, on
# a GPU and under the emulation (whose NCCL has its own sockets, no MPI).
. "$(dirname "$0")/lib.sh"
[ -x "$top_builddir/tests/gpu_groups" ] || skip "built without CUDA (configure --with-cuda)"
skips=0
for np in 2 4; do
    echo "== $MPIEXEC -n $np tests/gpu_groups timeout-nccl"
    mpirun_t "$np" "$top_builddir/tests/gpu_groups" timeout-nccl >"$TMP/out" 2>&1
    rc=$?
    cat "$TMP/out"
    case $rc in
        0) ;;
        77) skips=$((skips + 1)); continue ;;
        124|137) fail "$np ranks: timed out after ${TEST_TIMEOUT}s (hang)" ;;
        *) fail "$np ranks: exit $rc" ;;
    esac
    grep -q "^gpu_groups: $np rank(s): ok$" "$TMP/out" || fail "$np ranks: the checks did not pass"
    grep -q "the watchdog aborted after" "$TMP/out" || fail "$np ranks: no timeout seen"
    grep -Eq "the matching transfer .*; the peer: rank 1 on [^:]+: alive" "$TMP/out" ||
        fail "$np ranks: the watchdog's message does not say how the peer (rank 1) is"
done
[ "$skips" -eq 2 ] && skip "no GPU per rank for nccl (the emulation: DDPC_EMU_DEVICES=4)"
exit 0
