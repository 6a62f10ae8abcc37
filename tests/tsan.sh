#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tsan.sh: in a build configured with --enable-sanitizers=thread (CI's fifth
# build): the suites where ddpc runs threads, under ThreadSanitizer: the
# communicator's progress thread and concurrent waits (comm.mpi, ddp.mpi; groups.mpi at 2 ranks), the
# loader thread (check_data, check_fmnist, sampler.mpi), the asynchronous
# checkpoint writer (ckpt.mpi, 2 ranks only: 1 and 4 add a minute and no
# thread that 2 lacks), the side channel's thread (check_core, monitor.sh).
# check_ckpt_crc starts no thread and is left out. Any report fails: reports
# go to tsan-reports/ (monitor.sh keeps the ranks' output to itself) and are
# printed here. tests/tsan.supp names only MPI, UCX, PMIx, hwloc, HDF5 and
# libc frames, which are not instrumented.
#   cd build-tsan && sh ../tests/tsan.sh
set -u
top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
grep -q 'fsanitize=thread' Makefile 2>/dev/null ||
    { echo "tsan.sh: run it in a build configured with --enable-sanitizers=thread" >&2; exit 99; }

# gcc 12's TSan runtime expects the layout of at most 28 bits of mmap
# randomness; kernels with more (vm.mmap_rnd_bits = 32 on recent Ubuntu and
# Fedora kernels) make every instrumented program die at start with "FATAL:
# ThreadSanitizer: unexpected memory mapping". A probe finds out: then the
# runs go under `setarch -R` (no randomization, inherited by mpiexec and the
# ranks), or, where a container forbids that personality, as root with
# vm.mmap_rnd_bits=28.
echo 'int main(void) { return 0; }' >tsan_probe.c
${CC:-gcc} -fsanitize=thread -o tsan_probe tsan_probe.c || exit 99
norand=
if ! ./tsan_probe 2>tsan_probe.err; then
    grep -q 'unexpected memory mapping' tsan_probe.err || { cat tsan_probe.err >&2; exit 99; }
    if setarch "$(uname -m)" -R ./tsan_probe 2>/dev/null; then
        norand="setarch $(uname -m) -R"
        echo "tsan.sh: $(cat /proc/sys/vm/mmap_rnd_bits) bits of mmap randomness: running under $norand"
    elif [ "$(id -u)" = 0 ] && echo 28 2>/dev/null >/proc/sys/vm/mmap_rnd_bits && ./tsan_probe; then
        echo "tsan.sh: set vm.mmap_rnd_bits=28 (TSan's layout; setarch -R is not allowed here)"
    else
        echo "tsan.sh: ThreadSanitizer cannot start here (unexpected memory mapping): run" \
            "\`sysctl vm.mmap_rnd_bits=28\` as root, or allow setarch -R" >&2
        exit 99
    fi
fi
rm -f tsan_probe tsan_probe.c tsan_probe.err

rm -rf tsan-reports
mkdir tsan-reports || exit 99
# UCX's memory hooks (UCX_MEM_EVENTS) catch the madvise that glibc calls as a
# thread ends, after TSan has let go of that thread: SIGSEGV without it.
TSAN_OPTIONS="halt_on_error=0:exitcode=66:log_path=$(pwd)/tsan-reports/tsan"
TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$top_srcdir/tests/tsan.supp:print_suppressions=0"
UCX_MEM_EVENTS=no
CK_FORK=no
export TSAN_OPTIONS UCX_MEM_EVENTS CK_FORK
unit="tests/check_core tests/check_sampler tests/check_data tests/check_trainer tests/check_fmnist"
multi="tests/comm.mpi tests/ddp.mpi tests/sampler.mpi tests/monitor.sh"
rc=0
# shellcheck disable=SC2086
$norand make -j"$(nproc)" check TESTS="$unit $multi" || rc=1
# shellcheck disable=SC2086
DDPC_TEST_NP=2 $norand make check TESTS=tests/ckpt.mpi || rc=1
# groups at 2 ranks too: at 4, its 12 MiB transfers take minutes under TSan
DDPC_TEST_NP=2 $norand make check TESTS=tests/groups.mpi || rc=1
for f in tsan-reports/tsan.*; do
    [ -f "$f" ] || continue
    echo "tsan.sh: a ThreadSanitizer report ($f):"
    cat "$f"
    rc=1
done
[ $rc = 0 ] && echo "tsan.sh: no ThreadSanitizer report in: $unit $multi tests/ckpt.mpi tests/groups.mpi"
exit $rc
