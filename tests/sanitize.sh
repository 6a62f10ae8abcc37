#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# sanitize.sh: in a build configured with --enable-sanitizers (CI's fourth
# build): the unit suites and the multi-rank suites under AddressSanitizer +
# UndefinedBehaviorSanitizer (any report fails: -fno-sanitize-recover), with
# LeakSanitizer on and tests/sanitizers.supp, which names only MPI, UCX, PMIx,
# hwloc and HDF5 frames. The sanitizer runtime is preloaded into the test
# programs only (not into make, the shell or mpiexec, which are not built
# with it), with tests/no_dlclose.c so that plugins stay mapped.
#   cd build-asan && sh ../tests/sanitize.sh
set -u
top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
grep -q 'fsanitize=address' Makefile 2>/dev/null ||
    { echo "sanitize.sh: run it in a build configured with --enable-sanitizers" >&2; exit 99; }
asan=$(${CC:-gcc} -print-file-name=libasan.so)
[ -f "$asan" ] || { echo "sanitize.sh: no libasan.so ($asan)" >&2; exit 99; }
${CC:-gcc} -shared -fPIC -O2 -o no_dlclose.so "$top_srcdir/tests/no_dlclose.c" || exit 99
pre="$asan:$(pwd)/no_dlclose.so"
opts="ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_odr_violation=0"
opts="$opts LSAN_OPTIONS=suppressions=$top_srcdir/tests/sanitizers.supp:print_suppressions=0"
opts="$opts UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
unit="tests/check_core tests/check_sampler tests/check_data tests/check_ckpt_crc tests/check_trainer tests/check_fmnist"
multi="tests/comm.mpi tests/groups.mpi tests/ddp.mpi tests/sampler.mpi tests/ckpt.mpi"
rc=0
# shellcheck disable=SC2086
make check TESTS="$unit" LOG_COMPILER=env AM_LOG_FLAGS="LD_PRELOAD='$pre' $opts CK_FORK=no" || rc=1
# shellcheck disable=SC2086
DDPC_TEST_WRAP="env LD_PRELOAD=$pre $opts" make check TESTS="$multi" || rc=1
for t in $unit $multi; do
    if grep -q -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "${t%.*}.log" 2>/dev/null; then
        echo "sanitize.sh: a sanitizer report in ${t%.*}.log:"
        grep -E -A12 'ERROR: (Address|Leak)Sanitizer|runtime error:' "${t%.*}.log" | head -60
        rc=1
    fi
done
[ $rc = 0 ] && echo "sanitize.sh: no sanitizer report in: $unit $multi"
exit $rc
