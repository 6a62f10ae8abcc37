#!/bin/sh
# ckpt-full.sh: saving to a full or read-only file system (a 1 MiB tmpfs;
# needs root) fails with a clear error on every rank, removes its .tmp, and
# leaves the training state and the older checkpoints unharmed: training
# goes on to the same final state as a run that never saved, and a restart
# resumes from the newest checkpoint that was written. Sync and async saves.
. "$(dirname "$0")/lib.sh"
TRAIN="$top_builddir/tests/mpi_ckpt_train"
mnt="$TMP/mnt"
mkdir -p "$mnt"
mount -t tmpfs -o size=1m tmpfs "$mnt" 2>"$TMP/mount.err" ||
    skip "cannot mount a 1 MiB tmpfs at $mnt: $(cat "$TMP/mount.err") (needs root)"
trap 'umount "$mnt"; rm -rf "$TMP"' EXIT
# 24000 inputs: ~290 KiB per checkpoint (AdamW: parameters and 2 states), 3 fit
set -- --steps 12 --dim 24000 --optim adamw
mpirun_t 2 "$TRAIN" --dir "$TMP/ref" "$@" >"$TMP/ref.out" 2>&1 || { cat "$TMP/ref.out"; fail "reference run"; }
ref=$(sed -n 's/^final step=12 state=//p' "$TMP/ref.out")

for mode in sync async; do
    a=; [ $mode = async ] && a=--async
    d="$mnt/$mode"
    mpirun_t 2 "$TRAIN" --dir "$d" --save-every 2 --keep 0 $a "$@" >"$TMP/full.out" 2>&1
    rc=$?
    [ $rc -eq 3 ] || { cat "$TMP/full.out"; fail "$mode: expected exit 3 (a save failed, training went on), got $rc"; }
    grep -q "^save failed step=[0-9]*: ddpc\[rank 0/2 .*\] ckpt: .*ckpt-000000[0-9][0-9].h5.tmp.*No space left on device" "$TMP/full.out" ||
        { cat "$TMP/full.out"; fail "$mode: no clear 'No space left on device' error"; }
    grep -q "^final step=12 state=$ref$" "$TMP/full.out" ||
        { cat "$TMP/full.out"; fail "$mode: the failed saves changed the training state (want $ref)"; }
    ls "$d" >"$TMP/ls"
    ! grep -q '\.tmp$' "$TMP/ls" || { cat "$TMP/ls"; fail "$mode: a .tmp was left on the full file system"; }
    n=$(grep -c '^ckpt-000000[0-9][0-9]\.h5$' "$TMP/ls")
    [ "$n" -ge 1 ] && [ "$n" -lt 6 ] || { cat "$TMP/ls"; fail "$mode: expected some but not all 6 checkpoints, got $n"; }
    newest=$(tail -1 "$TMP/ls" | sed 's/^ckpt-0*\([0-9]*\)\.h5$/\1/')
    sums=$(cd "$d" && sha256sum ckpt-*.h5)
    echo "ok: $mode: $(grep -c '^save failed' "$TMP/full.out") saves failed with ENOSPC, $n kept, training unharmed"

    # read-only: a save fails clearly, nothing changes, a restart still loads
    mount -o remount,ro "$mnt" || fail "remount read-only"
    mpirun_t 2 "$TRAIN" --dir "$d" --save-every 1 $a "$@" >"$TMP/ro.out" 2>&1
    rc=$?
    mount -o remount,rw "$mnt" || fail "remount read-write"
    [ $rc -eq 3 ] || { cat "$TMP/ro.out"; fail "$mode read-only: expected exit 3, got $rc"; }
    grep -q "^resumed step=$newest " "$TMP/ro.out" || { cat "$TMP/ro.out"; fail "$mode: no resume from step $newest"; }
    grep -q "^save failed step=[0-9]*: .*Read-only file system" "$TMP/ro.out" ||
        { cat "$TMP/ro.out"; fail "$mode: no clear 'Read-only file system' error"; }
    grep -q "^final step=12 state=$ref$" "$TMP/ro.out" || { cat "$TMP/ro.out"; fail "$mode: resumed run ends elsewhere"; }
    [ "$(cd "$d" && sha256sum ckpt-*.h5)" = "$sums" ] || fail "$mode: checkpoints changed"
    echo "ok: $mode: read-only directory: clear error, resumed from step $newest, final state $ref"
    cat "$TMP/full.out" "$TMP/ro.out" | grep "^save failed" | head -3
    rm -rf "$d"
done
