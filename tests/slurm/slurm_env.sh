# shellcheck shell=bash
# Sourced by test scripts that need the Slurm testbed (tests/slurm/testbed.sh):
#   . "$srcdir/tests/slurm/slurm_env.sh"; testbed_up || exit $?   # 77 = SKIP
#   srun_t -N2 -n4 --mpi=pmix ./prog                               # srun under timeout
#
# testbed_up   serialises tests that use the same testbed (flock on $STATE.lock,
#              held until the test exits), starts the cluster unless it is
#              already running, and then stops it at exit (EXIT trap) only if it
#              started it; exports SLURM_CONF. Returns 77 with the reason on
#              stderr when the testbed cannot run here.
# testbed_down stops the cluster if testbed_up started it (for your own EXIT trap).
# srun_t ARGS  srun ARGS under `timeout` (DDPC_SRUN_TIMEOUT, default 120 s).
# job_state JOBID; job_wait JOBID STATE [SECONDS]: wait (60 s) for RUNNING, COMPLETED...

DDPC_TESTBED=${DDPC_TESTBED:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testbed.sh}

testbed_up() {
    local port=${DDPC_TESTBED_PORT:-16917} rc prev
    local lock=${DDPC_TESTBED_STATE:-${TMPDIR:-/tmp}/ddpc-slurm-$port}.lock
    [ -n "${_ddpc_lock_fd:-}" ] || exec {_ddpc_lock_fd}>"$lock" || return 1
    if ! flock -w "${DDPC_TESTBED_LOCK_WAIT:-900}" "$_ddpc_lock_fd"; then
        echo "testbed_up: another test held $lock too long" >&2; return 1
    fi
    if ! "$DDPC_TESTBED" status >/dev/null 2>&1; then
        # the daemons must not inherit the lock
        "$DDPC_TESTBED" start {_ddpc_lock_fd}>&- >/dev/null; rc=$?
        [ "$rc" = 0 ] || return "$rc"
        if [ -z "${_ddpc_testbed_owned:-}" ]; then
            _ddpc_testbed_owned=1
            eval "prev=($(trap -p EXIT))"          # keep an EXIT trap set earlier
            # shellcheck disable=SC2154,SC2064  # prev is set by the eval; expand now
            trap "testbed_down${prev[2]:+; ${prev[2]}}" EXIT
        fi
    fi
    eval "$("$DDPC_TESTBED" env)"
}

testbed_down() {
    [ -n "${_ddpc_testbed_owned:-}" ] || return 0
    _ddpc_testbed_owned=
    "$DDPC_TESTBED" stop {_ddpc_lock_fd}>&-
}

srun_t() { timeout -k 10 "${DDPC_SRUN_TIMEOUT:-120}" srun "$@"; }

job_state() {  # JobState of JOBID (also COMPLETED/FAILED/... for MinJobAge=60 s)
    scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2
}

job_wait() {
    local i
    for ((i = 0; i < ${3:-60} * 10; i++)); do
        [ "$(job_state "$1")" = "$2" ] && return 0
        sleep 0.1
    done
    echo "job_wait: job $1 is $(job_state "$1"), not $2, after ${3:-60} s" >&2
    return 1
}
