#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ckpt-faults.sh: faults around checkpoints, 2 ranks, separate processes.
# - rank 0 killed with SIGKILL in the middle of writing (sync and async save):
#   the previous checkpoint is untouched and a restart resumes from it and
#   ends where an uninterrupted run ends; the partial
#   ckpt-<step>.h5.tmp.<pid>.<host> is ignored, then removed by the next save
#   (which holds the directory's lock, taken over from the killed job with a
#   warning naming it), like the stale temporaries of steps that run does not
#   write (other *.h5.tmp files are left alone);
# - a truncated or bit-flipped newest checkpoint is skipped with a warning;
# - a hostile one (an external or soft link, a virtual dataset, external raw
#   storage in place of a parameter) is refused before any data is read; so
#   is one whose attributes hold more values than one (format, crc32) or
#   whose optimizer state holds a NaN learning rate;
# - a checkpoint of another model is refused, naming the parameter;
# - retention (--keep) counts valid checkpoints only: skipped corrupt files are
#   moved aside as .corrupt.
. "$(dirname "$0")/lib.sh"
TRAIN="$top_builddir/tests/mpi_ckpt_train"
run() {
    out=$1; shift
    mpirun_t 2 "$TRAIN" "$@" >"$out" 2>&1 || { cat "$out"; fail "mpiexec -n 2 mpi_ckpt_train $*"; }
}
sum() { sha256sum "$1" | cut -d' ' -f1; }

run "$TMP/ref" --dir "$TMP/ref.d" --steps 20
ref=$(sed -n 's/^final step=20 state=//p' "$TMP/ref")

for mode in sync async; do
    a=; [ $mode = async ] && a=--async
    d="$TMP/kill-$mode"
    run "$TMP/first" --dir "$d" --steps 20 --stop-at 10 --save-every 5 $a
    before=$(sum "$d/ckpt-00000010.h5")
    # resume and stall in the middle of writing step 15; kill rank 0 there
    k="$TMP/killed-$mode" pid="$TMP/pid-$mode"
    DDPC_CKPT_TEST_STALL=60 mpirun_t 2 "$TRAIN" --dir "$d" --steps 20 --save-every 5 --pidfile "$pid" $a \
        >"$k" 2>&1 &
    job=$!
    i=0
    until [ -s "$pid" ] && grep -q "DDPC_CKPT_TEST_STALL: stalling" "$k" 2>/dev/null; do
        i=$((i + 1)); [ $i -lt 300 ] || { cat "$k"; fail "$mode: the writer never reached the stall"; }
        sleep 0.1
    done
    kill -9 "$(cat "$pid")"
    wait $job && fail "$mode: the killed job exited 0"
    part=$(ls "$d"/ckpt-00000015.h5.tmp.* 2>/dev/null)
    [ -f "$part" ] || { ls -l "$d"; fail "$mode: no partial ckpt-00000015.h5.tmp.<pid>.<host>: was rank 0 killed mid-write?"; }
    grep -q "^pid=$(cat "$pid")$" "$d/ddpc.lock" || { cat "$d/ddpc.lock"; fail "$mode: the lock file does not name the killed rank 0 (pid $(cat "$pid"))"; }
    [ ! -e "$d/ckpt-00000015.h5" ] || fail "$mode: a killed save left ckpt-00000015.h5"
    [ "$(sum "$d/ckpt-00000010.h5")" = "$before" ] || fail "$mode: the previous checkpoint changed"
    # a .tmp of a step this run never writes (step 15's is written again, so
    # its absence alone says nothing), and a file that is not a checkpoint's
    : >"$d/ckpt-00000012.h5.tmp"
    : >"$d/ckpt-00000013.h5.tmp.4242.another-host"
    : >"$d/notes.h5.tmp"
    run "$TMP/again" --dir "$d" --steps 20 --save-every 5 $a
    grep -q "^resumed step=10 " "$TMP/again" || { cat "$TMP/again"; fail "$mode: did not resume from step 10"; }
    grep -q "^final step=20 state=$ref$" "$TMP/again" || { cat "$TMP/again"; fail "$mode: resumed run ends elsewhere than $ref"; }
    grep -q "warning: ckpt: $d/ddpc.lock: the previous writer (host [^,]*, pid $(cat "$pid"), since .*) ended without releasing" "$TMP/again" ||
        { cat "$TMP/again"; fail "$mode: no warning naming the killed writer when the lock was taken over"; }
    [ ! -e "$part" ] || fail "$mode: the stale $part was not removed by the next save"
    [ ! -e "$d/ckpt-00000013.h5.tmp.4242.another-host" ] || fail "$mode: another host's stale temporary was not removed under the lock"
    [ ! -s "$d/ddpc.lock" ] || { cat "$d/ddpc.lock"; fail "$mode: the lock file was not emptied at the end of the run"; }
    [ ! -e "$d/ckpt-00000012.h5.tmp" ] || { ls -l "$d"; fail "$mode: the stale ckpt-00000012.h5.tmp was not removed by the next save"; }
    [ -e "$d/notes.h5.tmp" ] || fail "$mode: a save removed notes.h5.tmp, which is not a checkpoint's"
    echo "ok: $mode save killed mid-write: ckpt-00000010.h5 intact, resumed from it, final state $ref"
done

# the newest file truncated, then bit-flipped inside a dataset: the previous one is used
d="$TMP/corrupt"
run "$TMP/first" --dir "$d" --steps 20 --stop-at 10 --save-every 5
f="$d/ckpt-00000010.h5"
cp "$f" "$TMP/good.h5"
truncate -s $(($(wc -c <"$f") / 2)) "$f"
run "$TMP/trunc" --dir "$d" --steps 20
grep -q "^resumed step=5 " "$TMP/trunc" || { cat "$TMP/trunc"; fail "truncated: did not fall back to step 5"; }
grep -q "warning: ckpt: cannot open $f: truncated file.*skipping it for the previous checkpoint" "$TMP/trunc" ||
    { cat "$TMP/trunc"; fail "truncated: no warning naming $f"; }
grep -q "^final step=20 state=$ref$" "$TMP/trunc" || { cat "$TMP/trunc"; fail "truncated: final state is not $ref"; }
echo "ok: truncated newest skipped with a warning"
cp "$TMP/good.h5" "$f"
if command -v h5dump >/dev/null; then
    off=$(h5dump -p -H -d /optim/momentum_buffer/fc.weight "$f" | sed -n 's/^ *OFFSET \([0-9]*\)$/\1/p')
    [ -n "$off" ] || fail "no offset from h5dump -p"
    byte=$(od -An -tu1 -j "$((off + 20))" -N1 "$f" | tr -d ' ')
    printf "\\$(printf %o $((byte ^ 4)))" | dd of="$f" bs=1 seek=$((off + 20)) conv=notrunc 2>/dev/null
    run "$TMP/flip" --dir "$d" --steps 20
    grep -q "^resumed step=5 " "$TMP/flip" || { cat "$TMP/flip"; fail "bit flip: did not fall back to step 5"; }
    grep -q "warning: ckpt: /optim/momentum_buffer/fc.weight in $f is corrupt: its CRC-32 is" "$TMP/flip" ||
        { cat "$TMP/flip"; fail "bit flip: no warning naming the dataset"; }
    echo "ok: bit-flipped newest skipped with a warning"
else
    echo "SKIP part: no h5dump to find a dataset's offset (apt-get install hdf5-tools)"
fi

# hostile files (HDF5 is not designed for crafted input): the newest checkpoint
# with a parameter that is an external link, a soft link, a virtual dataset or
# stored in an external raw file is refused before any data is read, with a
# warning, and the previous one is used; the linked file is never opened
cp "$TMP/good.h5" "$f"
PY=
for p in python3 /usr/bin/python3; do
    "$p" -c 'import h5py, numpy' 2>/dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || fail "no python3 with h5py to build hostile checkpoints (apt-get install python3-h5py)"
for kind in external soft virtual rawfile; do
    cp "$TMP/good.h5" "$f"
    "$PY" - "$f" "$kind" "$TMP" <<'PY' || fail "$kind: could not build the hostile file"
import sys, h5py, numpy as np
path, kind, tmp = sys.argv[1:]
with h5py.File(path, "r+") as h:
    name = "/model/fc.weight"
    data = h[name][...]
    del h[name]
    if kind == "external":
        with h5py.File(tmp + "/elsewhere.h5", "w") as o:
            o["w"] = data
        h[name] = h5py.ExternalLink(tmp + "/elsewhere.h5", "/w")
    elif kind == "soft":
        h["/model/hidden"] = data
        h[name] = h5py.SoftLink("/model/hidden")
    elif kind == "virtual":
        with h5py.File(tmp + "/elsewhere.h5", "w") as o:
            o["w"] = data
        lay = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
        lay[...] = h5py.VirtualSource(tmp + "/elsewhere.h5", "w", shape=data.shape)
        h.create_virtual_dataset(name, lay)
    else:
        data.tofile(tmp + "/raw.bin")
        h.create_dataset(name, shape=data.shape, dtype=data.dtype,
                         external=[(tmp + "/raw.bin", 0, data.nbytes)])
PY
    run "$TMP/$kind" --dir "$d" --steps 20
    grep -q "^resumed step=5 " "$TMP/$kind" || { cat "$TMP/$kind"; fail "$kind: did not fall back to step 5"; }
    grep -q "warning: ckpt: $f is refused: /model/fc.weight is .*skipping it for the previous checkpoint" "$TMP/$kind" ||
        { cat "$TMP/$kind"; fail "$kind: no warning naming the hostile dataset"; }
    grep -q "^final step=20 state=$ref$" "$TMP/$kind" || { cat "$TMP/$kind"; fail "$kind: final state is not $ref"; }
    echo "ok: $kind: $(grep -o 'refused: [^(]*' "$TMP/$kind" | head -n1)"
done
# attributes that HDF5 would read into a buffer for one value although they
# hold more (found by tests/fuzz/fuzz_ckpt.c: a stack overflow), and an
# optimizer state that would install a NaN learning rate: skipped the same way
for kind in format-array crc-array lr-nan; do
    cp "$TMP/good.h5" "$f"
    "$PY" - "$f" "$kind" <<'PY' || fail "$kind: could not build the hostile file"
import sys, h5py, numpy as np
path, kind = sys.argv[1:]
with h5py.File(path, "r+") as h:
    if kind == "format-array":
        del h.attrs["format"]
        h.attrs.create("format", [b"ddpc-checkpoint", b"ddpc-checkpoint"], dtype="S16")
    elif kind == "crc-array":
        d = h["/model/fc.weight"]
        c = int(d.attrs["crc32"])
        del d.attrs["crc32"]
        d.attrs.create("crc32", [c, c], dtype="<u4")
    else:
        h["/optim"].attrs["lr"] = np.float64("nan")
PY
    case $kind in
    format-array) pat="$f is not a ddpc checkpoint: no attribute format = \"ddpc-checkpoint\" \(attribute \"format\" holds 2 values, expected one\)" ;;
    crc-array) pat="cannot read /model/fc.weight \(or its crc32\) from $f: attribute \"crc32\" holds 2 values, expected one" ;;
    lr-nan) pat="$f: /optim holds lr nan, loss_scale [0-9.]+, scale_good_steps [0-9]+: expected a finite lr >= 0" ;;
    esac
    run "$TMP/$kind" --dir "$d" --steps 20
    grep -q "^resumed step=5 " "$TMP/$kind" || { cat "$TMP/$kind"; fail "$kind: did not fall back to step 5"; }
    grep -Eq "warning: ckpt: .*$pat.*; skipping it for the previous checkpoint" "$TMP/$kind" ||
        { cat "$TMP/$kind"; fail "$kind: no warning /$pat/"; }
    echo "ok: $kind: $(grep -E -o "$pat" "$TMP/$kind" | head -n1 | sed "s|$f|the newest|")"
done
cp "$TMP/good.h5" "$f"

# another model: the same run with 17 inputs instead of 16
expect_fail_msg 'ckpt-00000020.h5 does not match: /model/fc.weight is float32\[1, 17\] here but float32\[1, 16\] in the checkpoint' \
    mpirun_t 2 "$TRAIN" --dir "$TMP/kill-sync" --steps 30 --dim 17

# retention counts valid checkpoints only: a corrupt newer file that a load
# skipped is moved aside as <file>.corrupt (never deleted), and --keep 2
# keeps two valid ones; it used to count the corrupt file and delete a valid
# checkpoint in its place (left: the corrupt one and the newest)
d="$TMP/retain"
run "$TMP/r1" --dir "$d" --steps 20 --stop-at 10 --save-every 5 --keep 2
head -c 4096 /dev/urandom >"$d/ckpt-00000100.h5"
run "$TMP/r2" --dir "$d" --steps 20 --save-every 5 --keep 2
grep -q "^resumed step=10 " "$TMP/r2" || { cat "$TMP/r2"; fail "retention: did not resume from step 10"; }
grep -q "ckpt: moved $d/ckpt-00000100.h5 aside to $d/ckpt-00000100.h5.corrupt" "$TMP/r2" ||
    { cat "$TMP/r2"; fail "retention: no message moving the corrupt file aside"; }
left=$(cd "$d" && ls | grep -v '^ddpc\.lock$' | tr '\n' ' ')
[ "$left" = "ckpt-00000015.h5 ckpt-00000020.h5 ckpt-00000100.h5.corrupt " ] ||
    fail "retention: left $left, expected the two newest valid checkpoints and the corrupt file aside"
echo "ok: a skipped corrupt checkpoint moved aside, --keep 2 kept two valid ones: $left"
