#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# run.sh SRCDIR BUILDDIR: each libFuzzer target for FUZZ_SECONDS (default 60)
# from its committed seeds (SRCDIR/seeds/<target>), corpus in a temporary
# directory. A crash, a leak, a sanitizer report or a failed check (abort)
# fails, printing the input (base64) that did it: add it to the seeds, fix
# the bug, and it stays a regression input.
set -u
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) # the runs happen elsewhere: absolute paths
secs=${FUZZ_SECONDS:-60}
rc=0
for t in idx options ckpt; do
    work=$(mktemp -d "${TMPDIR:-/tmp}/ddpc-fuzz-$t.XXXXXX")
    echo "== fuzz_$t: ${secs}s from $(ls "$src/seeds/$t" | wc -l) seed(s)"
    (cd "$work" && "$build/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$work" "$src/seeds/$t") >"$work/log" 2>&1
    r=$?
    grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log" | tail -n 3
    if [ $r -ne 0 ]; then
        rc=1
        echo "fuzz_$t: FAILED (exit $r):"
        if grep -q -E 'ERROR|runtime error|deadly signal' "$work/log"; then
            grep -E -A30 'ERROR|runtime error|deadly signal' "$work/log" | head -60
        else
            tail -n 20 "$work/log"
        fi
        for c in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do
            [ -f "$c" ] && { echo "input $(basename "$c") (base64):"; base64 "$c"; }
        done
    fi
    rm -rf "$work"
done
[ $rc = 0 ] && echo "fuzz: no crash in ${secs}s per target"
exit $rc
