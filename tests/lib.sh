# SPDX-License-Identifier: BSD-3-Clause
# lib.sh: sourced by the test scripts. Paths, the MPI launcher, assertions.
# Exit codes follow automake: 0 pass, 77 skip (always with a reason), 99 hard error.
: "${top_builddir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_srcdir:=$top_builddir}"
. "$top_builddir/tests/testenv.sh"
export CK_FORK=no
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ddpc-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

# need_fmnist: DATA = the Fashion-MNIST directory, or skip with the reason.
need_fmnist() {
    DATA=${DDPC_TEST_DATA:-/usr/share/datasets/fashion-mnist}
    [ -f "$DATA/train-images-idx3-ubyte.gz" ] || [ -f "$DATA/train-images-idx3-ubyte" ] \
        || skip "no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)"
}

# The srun MPI plugin that wires this build's MPI: Debian's MPICH has no
# PMIx client (pmi2); an MPI with one (Open MPI) uses pmix.
PLUGIN=pmix
[ "$DDPC_MPI_FLAVOR" = mpich ] && PLUGIN=pmi2

# mpirun_t NP CMD...: the configured launcher under a timeout (never hang).
# All ranks are on this host: UCX (MPICH's ch4:ucx) may use the loopback only,
# so that its start does not fail with "No such device" when the Slurm
# testbed adds or removes its network interfaces at the same moment
# (make -j check; about 4% of starts without this).
# DDPC_TEST_WRAP (tests/sanitize.sh): a command prefix for the ranks only
# (env LD_PRELOAD=... for the sanitizer runs), not for the launcher.
mpirun_t() {
    local np=$1; shift
    # shellcheck disable=SC2086
    timeout -k 5 "$TEST_TIMEOUT" env -u SLURM_CONF UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" \
        $MPIEXEC $MPIEXEC_FLAGS -n "$np" ${DDPC_TEST_WRAP:-} "$@"
}

# wait_for PATTERN FILE SECONDS JOB OUT WHAT: poll FILE every 0.1 s until a
# line matches PATTERN (grep -E); after SECONDS, kill JOB, show OUT (may be
# "") and fail saying WHAT.
wait_for() {
    local pat=$1 file=$2 n=$(($3 * 10)) job=$4 out=$5 what=$6 i=0
    until grep -Eq -- "$pat" "$file" 2>/dev/null; do
        sleep 0.1; i=$((i + 1))
        [ $i -lt $n ] || { kill "$job" 2>/dev/null; [ -z "$out" ] || cat "$out"; fail "$what"; }
    done
}

# descendants PID: every process below PID; rank_pid LAUNCHER RANK: the one
# of them whose environment gives it that rank (MPICH's or Open MPI's name)
descendants() { for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
rank_pid() {
    for p in $(descendants "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
            grep -Eq "^(PMI_RANK|OMPI_COMM_WORLD_RANK)=$2\$" && { echo "$p"; return; }
    done
}

# expect_fail_msg "PATTERN" CMD...: CMD must exit non-zero (not by timeout)
# and print PATTERN (grep -E) on stdout or stderr.
expect_fail_msg() {
    local pat=$1 rc; shift
    "$@" >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "expected failure: $*"; }
    rc=$?
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$TMP/out"; fail "timed out (hang): $*"; }
    grep -Eq -- "$pat" "$TMP/out" || { cat "$TMP/out"; fail "no message /$pat/ from: $*"; }
    echo "ok (rc=$rc): $* -> $(grep -E -m1 -- "$pat" "$TMP/out")"
}
