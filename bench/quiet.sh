# SPDX-License-Identifier: BSD-3-Clause
# quiet.sh: sourced by the benchmark scripts (ddp_bench.sh, train_bench.sh).
# The machine is shared: before each measurement they wait for it to be
# idle. Uses QUIET_IDLE (%) and QUIET_WAIT (s), which the caller sets.

# idle_pct: CPU idle % over one second (all CPUs; iowait counts as idle)
idle_pct() {
    local a b
    a=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
    sleep 1
    b=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
    echo "$a $b" | awk '{d = $4 - $2; print (d > 0 ? int(100 * ($3 - $1) / d) : 0)}'
}

# wait_quiet: wait (up to QUIET_WAIT s) for QUIET_IDLE % idle; sets $idle
wait_quiet() {
    local t0=$SECONDS
    idle=$(idle_pct)
    while [ "$idle" -lt "$QUIET_IDLE" ] && [ $((SECONDS - t0)) -lt "$QUIET_WAIT" ]; do
        sleep 2
        idle=$(idle_pct)
    done
}
