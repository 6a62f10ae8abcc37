#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# mpirun.sh FILE.mpi: the LOG_COMPILER of multi-rank tests. FILE.mpi sets
# PROGRAM (relative to the build dir), NP (rank counts, default "1 2 4") and
# optionally ARGS; the program runs under the configured launcher once per
# rank count, under a timeout, with CK_FORK=no. Exit: first failure, or 77 if
# every run skipped. DDPC_TEST_NP replaces NP (tests/tsan.sh: fewer runs of a
# slow suite).
set -u
spec=$1
. "$(dirname "$0")/lib.sh"
PROGRAM= NP="1 2 4" ARGS=
. "$spec"
NP=${DDPC_TEST_NP:-$NP}
[ -n "$PROGRAM" ] || { echo "mpirun.sh: $spec sets no PROGRAM" >&2; exit 99; }
skips=0 runs=0
for np in $NP; do
    runs=$((runs + 1))
    echo "== $MPIEXEC -n $np $PROGRAM $ARGS"
    # shellcheck disable=SC2086
    mpirun_t "$np" "$top_builddir/$PROGRAM" $ARGS
    rc=$?
    case $rc in
        0) ;;
        77) skips=$((skips + 1)) ;;
        124|137) echo "FAIL: $PROGRAM with $np ranks timed out after ${TEST_TIMEOUT}s" >&2; exit 1 ;;
        *) echo "FAIL: $PROGRAM with $np ranks exited $rc" >&2; exit "$rc" ;;
    esac
done
[ "$skips" -eq "$runs" ] && exit 77
exit 0
