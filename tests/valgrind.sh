#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# valgrind.sh: in a plain build (not --enable-sanitizers; CI runs it in
# build/ after make check): the single-process unit suites under valgrind's
# memcheck, CK_FORK=no (check_core forks per test anyway: one MPI_Init per
# process, and valgrind follows). Fails on any memory error and on any block
# definitely lost; tests/valgrind.supp names only MPI, UCX, PMIx, hwloc, HDF5
# and libc frames. Each process's report is in valgrind-reports/, printed here
# when it has an error.
#   cd build && sh ../tests/valgrind.sh
set -u
top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f Makefile ] || [ ! -x libtool ]; then
    echo "valgrind.sh: run it in a configured build directory" >&2
    exit 99
fi
if grep -q '^DDPC_CFLAGS = .*-fsanitize' Makefile; then
    echo "valgrind.sh: this build has sanitizers (--enable-sanitizers or --enable-fuzzing): valgrind needs a plain one" >&2
    exit 99
fi
command -v valgrind >/dev/null ||
    { echo "valgrind.sh: no valgrind (apt-get install valgrind)" >&2; exit 99; }
rm -rf valgrind-reports
mkdir valgrind-reports || exit 99
# libtool --mode=execute runs the real program where a test is a libtool wrapper
vg="--mode=execute valgrind --error-exitcode=1 --leak-check=full --show-leak-kinds=definite"
vg="$vg --errors-for-leak-kinds=definite --num-callers=30 --suppressions=$top_srcdir/tests/valgrind.supp"
vg="$vg --log-file=$(pwd)/valgrind-reports/vg.%p"
unit="tests/check_core tests/check_sampler tests/check_data tests/check_ckpt_crc tests/check_trainer tests/check_fmnist"
rc=0
# Check's per-test timeouts (4 s unless a test sets its own) are for native
# speed: memcheck runs 20 to 50 times slower
CK_FORK=no CK_TIMEOUT_MULTIPLIER=25 make -j"$(nproc)" check TESTS="$unit" LOG_COMPILER="$(pwd)/libtool" AM_LOG_FLAGS="$vg" || rc=1
for f in valgrind-reports/vg.*; do
    grep -q 'ERROR SUMMARY: [1-9]' "$f" 2>/dev/null || continue
    echo "valgrind.sh: a memcheck report ($f):"
    cat "$f"
    rc=1
done
[ $rc = 0 ] && echo "valgrind.sh: no memcheck error and no definite leak in: $unit"
exit $rc
