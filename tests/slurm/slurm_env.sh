# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=sh
# Sourced (POSIX sh or bash) by test scripts that need the Slurm testbed:
#   . "$top_srcdir/tests/slurm/slurm_env.sh"; testbed_up || exit $?   # 77 = SKIP
#   srun_t -N2 -n4 --mpi=pmix ./prog                                   # srun under timeout
#
# testbed_up   waits for other tests using the same testbed (flock on $STATE.lock,
#              held on fd 9 until this test exits), starts the cluster unless it
#              is running, and if it started it, stops it at exit (EXIT trap, run
#              before any EXIT trap set earlier); exports SLURM_CONF. Returns 77
#              with the reason on stderr where the testbed cannot run.
# testbed_down stops the cluster if testbed_up started it (for EXIT traps set later).
# srun_t ARGS  srun ARGS under `timeout` (DDPC_SRUN_TIMEOUT, default 120 s).
# job_state JOBID             JobState (RUNNING, PENDING, COMPLETED... for 60 s after the end)
# job_wait JOBID STATE [SEC]  wait (default 60 s) until job_state is STATE.

if [ -z "${DDPC_TESTBED:-}" ]; then
    # shellcheck disable=SC3028,SC3054  # bash knows where this file is; sh needs top_srcdir
    if [ -n "${BASH_SOURCE:-}" ]; then
        DDPC_TESTBED=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testbed.sh
    else
        DDPC_TESTBED=${top_srcdir:-.}/tests/slurm/testbed.sh
    fi
fi

testbed_up() {
    if [ -z "${_ddpc_locked:-}" ]; then
        _ddpc_lock=${DDPC_TESTBED_STATE:-${TMPDIR:-/tmp}/ddpc-slurm-${DDPC_TESTBED_PORT:-16917}}.lock
        exec 9>"$_ddpc_lock" || return 1
        if ! flock -w "${DDPC_TESTBED_LOCK_WAIT:-900}" 9; then
            echo "testbed_up: $_ddpc_lock held by another test for too long" >&2; return 1
        fi
        _ddpc_locked=1
    fi
    if ! "$DDPC_TESTBED" status >/dev/null 2>&1; then
        # 9>&-: the daemons must not inherit the lock
        _DDPC_TESTBED_LOCKED=1 "$DDPC_TESTBED" start 9>&- >/dev/null || return $?
        if [ -z "${_ddpc_owned:-}" ]; then
            _ddpc_owned=1
            _ddpc_chain_exit_trap testbed_down
        fi
    fi
    eval "$("$DDPC_TESTBED" env)"
}

testbed_down() {
    [ -n "${_ddpc_owned:-}" ] || return 0
    _ddpc_owned=
    _DDPC_TESTBED_LOCKED=1 "$DDPC_TESTBED" stop 9>&-
}

# _ddpc_chain_exit_trap CMD: EXIT trap runs CMD, then the EXIT trap set before
# (read from `trap` output through a file: sh reports no traps inside $(...))
_ddpc_t() { [ "$3" != EXIT ] || _ddpc_prev=$2; }
_ddpc_chain_exit_trap() {
    _ddpc_prev=
    _ddpc_f=$(mktemp) || return 1
    trap > "$_ddpc_f"
    eval "$(sed 's/^trap -- /_ddpc_t -- /' "$_ddpc_f")"
    rm -f "$_ddpc_f"
    # shellcheck disable=SC2064  # expand now
    trap "$1${_ddpc_prev:+; $_ddpc_prev}" EXIT
}

srun_t() { timeout -k 10 "${DDPC_SRUN_TIMEOUT:-120}" srun "$@"; }

job_state() {
    scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2
}

job_wait() {
    _ddpc_i=$((${3:-60} * 10))
    while [ "$_ddpc_i" -gt 0 ]; do
        [ "$(job_state "$1")" = "$2" ] && return 0
        sleep 0.1; _ddpc_i=$((_ddpc_i - 1))
    done
    echo "job_wait: job $1 is $(job_state "$1"), not $2, after ${3:-60} s" >&2
    return 1
}
