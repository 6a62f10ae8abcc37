#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ckpt-resume.sh: training stopped at K/2 with a checkpoint, resumed in new
# processes (a separate mpiexec) and run to K ends bitwise where an
# uninterrupted run of K steps ends: 1, 2 and 4 ranks, SGD with momentum and
# AdamW, sync and async saves. Then a checkpoint saved by 2 ranks resumes on
# 1 and 4 ranks with the identical state.
. "$(dirname "$0")/lib.sh"
TRAIN="$top_builddir/tests/mpi_ckpt_train"
K=20 H=10

# run NP OUT ARGS...: the training program under mpiexec; OUT keeps its output
run() {
    np=$1 out=$2; shift 2
    mpirun_t "$np" "$TRAIN" "$@" >"$out" 2>&1 || { cat "$out"; fail "mpiexec -n $np mpi_ckpt_train $*"; }
}
state() { sed -n "s/^$1 step=$2 state=\([0-9a-f]*\).*/\1/p" "$3"; }

for np in 1 2 4; do
    for optim in sgd adamw; do
        for mode in sync async; do
            a=; [ $mode = async ] && a=--async
            d="$TMP/$np-$optim-$mode"
            run "$np" "$d.full" --dir "$d/full" --steps $K --optim $optim $a
            run "$np" "$d.first" --dir "$d/ckpt" --steps $K --stop-at $H --save-every $H --optim $optim $a
            run "$np" "$d.second" --dir "$d/ckpt" --steps $K --optim $optim $a
            saved=$(state saved $H "$d.first") resumed=$(state resumed $H "$d.second")
            full=$(state final $K "$d.full") again=$(state final $K "$d.second")
            [ -n "$saved" ] && [ "$saved" = "$resumed" ] ||
                { cat "$d.first" "$d.second"; fail "$np ranks $optim $mode: saved state $saved, resumed $resumed"; }
            [ -n "$full" ] && [ "$full" = "$again" ] ||
                { cat "$d.full" "$d.second"; fail "$np ranks $optim $mode: uninterrupted $full, resumed $again"; }
            echo "ok: $np ranks, $optim, $mode save: resumed at $H with $resumed, final $full in both runs"
        done
    done
done

# another world size: the state saved by 2 ranks is what 1 and 4 ranks resume with
saved=$(state saved $H "$TMP/2-adamw-sync.first")
for np in 1 4; do
    cp -r "$TMP/2-adamw-sync/ckpt" "$TMP/ws$np"
    rm -f "$TMP/ws$np"/ckpt-000000$K.h5
    run "$np" "$TMP/ws$np.out" --dir "$TMP/ws$np" --steps $K --optim adamw
    grep -q "^resumed step=$H state=$saved .*saved_by=2$" "$TMP/ws$np.out" ||
        { cat "$TMP/ws$np.out"; fail "$np ranks did not resume the 2-rank state $saved"; }
    grep -q "^final step=$K " "$TMP/ws$np.out" || { cat "$TMP/ws$np.out"; fail "$np ranks did not finish"; }
    echo "ok: saved by 2 ranks, resumed by $np with state $saved"
done
