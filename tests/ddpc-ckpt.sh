#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ddpc-ckpt.sh: the checkpoint tool on real checkpoints (tests/mpi_ckpt_train,
# 2 ranks, AdamW and SGD, one large enough to be read in several pieces) and
# on damaged or hostile copies of them:
# - --help, --version, bad usage (exit 2 with a message);
# - ls: newest first, status=valid, the right steps; a leftover .tmp listed as
#   incomplete; a corrupt, truncated or non-HDF5 file invalid with its reason;
#   exit 0 with one valid file, 1 with none;
# - show: root metadata, optimizer, sampler, RNG and user attributes, the
#   tensor table (values checked against h5py, CRCs against zlib);
# - verify: passes; a byte flipped inside a dataset (its offset from h5py)
#   fails naming the dataset and both CRCs; truncated copies fail cleanly
#   (exit 1 or 2, never a signal); an external link is refused, not followed;
# - diff: a file with itself exits 0, two steps exit 1 naming the tensors
#   and attributes, the flipped copy differs in one element of one tensor;
# - export: tests/safetensors_ref.py, an independent reader, finds every
#   tensor bitwise equal to the HDF5 dataset (also a synthetic checkpoint
#   written by h5py alone with a 3-D and a scalar parameter); no overwrite
#   without --force; a corrupt checkpoint exports nothing. The reader itself
#   must reject a damaged export.
. "$(dirname "$0")/lib.sh"
TOOL="$top_builddir/ddpc-ckpt"
TRAIN="$top_builddir/tests/mpi_ckpt_train"
REF="$top_srcdir/tests/safetensors_ref.py"

# t RC NAME ARGS...: ddpc-ckpt ARGS must exit with RC; its output in $TMP/NAME
t() {
    t_rc=$1 t_name=$2; shift 2
    "$TOOL" "$@" >"$TMP/$t_name" 2>&1
    rc=$?
    [ "$rc" -lt 124 ] || { cat "$TMP/$t_name"; fail "ddpc-ckpt $*: killed or crashed (exit $rc)"; }
    [ "$rc" -eq "$t_rc" ] || { cat "$TMP/$t_name"; fail "ddpc-ckpt $*: exit $rc, expected $t_rc"; }
}
# has NAME PATTERN...: each pattern (grep -E) is on a line of $TMP/NAME
has() {
    name=$1; shift
    for pat in "$@"; do
        grep -Eq -- "$pat" "$TMP/$name" || { cat "$TMP/$name"; fail "$name: no line /$pat/"; }
    done
}
train() {
    out=$1; shift
    mpirun_t 2 "$TRAIN" "$@" >"$out" 2>&1 || { cat "$out"; fail "mpiexec -n 2 mpi_ckpt_train $*"; }
}

# ---------------------------------------------------------------- usage
t 0 help --help
has help '^usage: ddpc-ckpt COMMAND' '^  ls DIR' '^  show FILE' '^  verify FILE' '^  diff A B' \
    '^  export FILE OUT \[--force\]' '^exit status:' '^  0  ok' '^  1  ' '^  2  usage error'
t 0 version --version
grep -qx "ddpc-ckpt (ddpc) $(cat "$top_srcdir/VERSION")" "$TMP/version" || { cat "$TMP/version"; fail "--version"; }
t 2 u1
t 2 u2 verify
t 2 u3 frobnicate x
t 2 u4 ls a b
t 2 u5 --bogus verify x
t 2 u6 show --force x
for u in u1 u2 u3 u4 u5 u6; do has $u '^ddpc-ckpt: usage: .*--help'; done
has u2 'ddpc-ckpt verify FILE'
has u3 'unknown command "frobnicate"'
has u5 'unknown option "--bogus"'
t 2 nofile verify "$TMP/nonexistent.h5"
has nofile "^ddpc-ckpt: $TMP/nonexistent.h5: cannot open: No such file or directory$"
t 2 nodir ls "$TMP/nonexistent"
echo "ok: --help, --version, usage errors exit 2 with a message"

# ---------------------------------------------------------------- real checkpoints
CK="$TMP/ck"
train "$TMP/adamw.out" --dir "$CK" --steps 12 --save-every 4 --keep 0 --optim adamw
train "$TMP/sgd.out" --dir "$TMP/sgd" --steps 4 --save-every 4 --optim sgd
train "$TMP/big.out" --dir "$TMP/big" --steps 2 --save-every 2 --optim sgd --dim 1500000
F4="$CK/ckpt-00000004.h5" F8="$CK/ckpt-00000008.h5" F12="$CK/ckpt-00000012.h5"
BIG="$TMP/big/ckpt-00000002.h5"
for f in "$F4" "$F8" "$F12" "$TMP/sgd/ckpt-00000004.h5" "$BIG"; do [ -f "$f" ] || fail "no $f"; done

t 0 ls ls "$CK"
[ "$(wc -l <"$TMP/ls")" -eq 3 ] || { cat "$TMP/ls"; fail "ls: expected 3 lines"; }
for s in 12 8 4; do
    echo "$CK/ckpt-000000$(printf %02d $s).h5 step=$s epoch=0 world_size=2 created=[0-9T:-]+Z status=valid"
done >"$TMP/ls.want"
i=0
while read -r want; do
    i=$((i + 1))
    sed -n "${i}p" "$TMP/ls" | grep -Eqx -- "$want" || { cat "$TMP/ls"; fail "ls line $i is not /$want/"; }
done <"$TMP/ls.want"
echo "ok: ls lists steps 12, 8, 4 valid, newest first"

t 0 show show "$F8"
has show "^file: $F8$" '^format: "ddpc-checkpoint"$' '^format_version: 1$' \
    "^ddpc_version: \"$(cat "$top_srcdir/VERSION")\"$" '^step: 8$' '^epoch: 0$' '^world_size: 2$' \
    '^created: "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z"$' \
    '^model_fingerprint: [0-9a-f]{16} \(matches the parameters' '^parameters: 2$' \
    '^model.names: \["fc.weight", "fc.bias"\]$' '^optim.type: "adamw"$' '^optim.lr: 0.01$' \
    '^optim.beta1: 0.9$' '^optim.beta2: 0.999$' '^optim.eps: 1e-08$' '^optim.weight_decay: 0.001$' \
    '^optim.loss_scale: 1$' '^optim.step: 8$' '^sampler.seed: 12345$' '^sampler.consumed: 64$' \
    '^sampler.dataset_size: 4096$' '^sampler.shuffle: 1$' '^rng.state: 8 bytes [0-9a-f]{16}$' \
    '^tensors: 6 \(51 elements, 204 bytes\)$' \
    '^tensor /model/fc.weight dtype=float32 shape=\[1,16\] numel=16 crc32=[0-9a-f]{8}$' \
    '^tensor /model/fc.bias dtype=float32 shape=\[1\] numel=1 crc32=[0-9a-f]{8}$' \
    '^tensor /optim/exp_avg_sq/fc.weight dtype=float32 shape=\[1,16\] numel=16 crc32=[0-9a-f]{8}$'
t 0 showsgd show "$TMP/sgd/ckpt-00000004.h5"
has showsgd '^optim.type: "sgd"$' '^optim.momentum: 0.9$' '^optim.lr: 0.05$' \
    '^tensor /optim/momentum_buffer/fc.weight dtype=float32 shape=\[1,16\]'
echo "ok: show prints the metadata and the tensor table"

for f in "$F4" "$F8" "$F12" "$TMP/sgd/ckpt-00000004.h5"; do
    t 0 verify verify "$f"
    has verify "^ok: $f: [46] datasets, (204|136) bytes verified$"
done
t 0 verify verify "$BIG"
has verify "^ok: $BIG: 4 datasets, 12000008 bytes verified$"
echo "ok: verify passes on all of them (the large one in several pieces)"

# ---------------------------------------------------------------- damaged copies
truncate_to() { head -c "$2" "$1" >"$3"; }
for n in 0 7 100 1000 2000 $(($(wc -c <"$F8") / 2)) $(($(wc -c <"$F8") - 1)); do
    truncate_to "$F8" "$n" "$TMP/trunc.h5"
    for cmd in verify show; do
        "$TOOL" $cmd "$TMP/trunc.h5" >"$TMP/tr" 2>&1
        rc=$?
        [ $rc -eq 1 ] || [ $rc -eq 2 ] || { cat "$TMP/tr"; fail "$cmd of $F8 truncated to $n bytes: exit $rc"; }
        grep -q "^ddpc-ckpt: $TMP/trunc.h5: " "$TMP/tr" || { cat "$TMP/tr"; fail "$cmd truncated to $n: no message"; }
    done
done
truncate_to "$F8" $(($(wc -c <"$F8") / 2)) "$TMP/trunc.h5"
t 1 trunc verify "$TMP/trunc.h5"
has trunc "^ddpc-ckpt: $TMP/trunc.h5: truncated: the file has [0-9]+ bytes, its superblock records [0-9]+$"
t 2 truncdiff diff "$F8" "$TMP/trunc.h5"
t 1 truncexp export "$TMP/trunc.h5" "$TMP/trunc.safetensors"
[ ! -e "$TMP/trunc.safetensors" ] && [ ! -e "$TMP/trunc.safetensors.tmp" ] || fail "export of a truncated file left output"
printf 'not a checkpoint\n' >"$TMP/text.h5"
t 1 text verify "$TMP/text.h5"
has text "^ddpc-ckpt: $TMP/text.h5: not an HDF5 file"
echo "ok: truncated and non-HDF5 files fail cleanly"

PY=
for p in python3 /usr/bin/python3; do
    "$p" -c 'import h5py, numpy' 2>/dev/null && { PY=$p; break; }
done
if [ -z "$PY" ]; then
    echo "SKIP part: no Python with h5py and numpy (apt-get install python3-h5py): no byte flips, user attributes, safetensors checks"
    exit 0
fi

# the crc32 attributes and data of every tensor, as h5py and zlib see them:
# every tensor line of show must carry the attribute, and it must be zlib's CRC
"$PY" - "$F8" >"$TMP/crcs" <<'EOF' || fail "h5py cannot read $F8"
import sys, zlib, h5py
f = h5py.File(sys.argv[1], "r")
def p(name, o):
    if isinstance(o, h5py.Dataset):
        assert zlib.crc32(o[...].astype("<f4").tobytes()) == int(o.attrs["crc32"]), name
        print("tensor /%s dtype=float32 shape=[%s] numel=%d crc32=%08x"
              % (name, ",".join(map(str, o.shape)), o.size, int(o.attrs["crc32"])))
f.visititems(p)
EOF
grep '^tensor ' "$TMP/show" | sort >"$TMP/show.t"
sort "$TMP/crcs" | cmp -s - "$TMP/show.t" || { diff "$TMP/crcs" "$TMP/show.t"; fail "show's tensor table differs from h5py's"; }
echo "ok: show's tensor table equals h5py's (shapes, sizes, crc32 = zlib's CRC-32)"

# user attributes (set by h5py on a copy: attributes do not touch the data)
cp "$F8" "$TMP/user.h5"
"$PY" - "$TMP/user.h5" <<'EOF' || fail "h5py: user attributes"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "a") as f:
    f["user"].attrs["best_loss"] = np.float64(0.125)
    f["user"].attrs["run"] = np.bytes_('exp "7"')
    f["user"].attrs["note"] = "variable-length string"
EOF
t 0 showuser show "$TMP/user.h5"
has showuser '^user.best_loss: 0.125$' '^user.note: "variable-length string"$' '^user.run: "exp \\"7\\""$'
t 0 verifyuser verify "$TMP/user.h5"
echo "ok: show prints user attributes (double, fixed and variable-length strings)"

# a byte flipped inside /optim/exp_avg/fc.weight's data
D="$TMP/flipdir"
mkdir -p "$D"
cp "$F4" "$F8" "$D/"
FL="$D/ckpt-00000008.h5"
"$PY" - "$FL" /optim/exp_avg/fc.weight >"$TMP/flip.want" <<'EOF' || fail "h5py: flipping a byte"
import sys, zlib, h5py
path, ds = sys.argv[1], sys.argv[2]
with h5py.File(path, "r") as f:
    off, want = f[ds].id.get_offset(), int(f[ds].attrs["crc32"])
with open(path, "r+b") as fh:
    fh.seek(off + 9)
    b = fh.read(1)
    fh.seek(off + 9)
    fh.write(bytes([b[0] ^ 0x20]))
with h5py.File(path, "r") as f:
    found = zlib.crc32(f[ds][...].astype("<f4").tobytes())
print("%08x %08x" % (want, found))
EOF
read -r crc_want crc_found <"$TMP/flip.want"
t 1 flip verify "$FL"
has flip "^ddpc-ckpt: $FL: /optim/exp_avg/fc.weight is corrupt: CRC-32 expected $crc_want \(its crc32 attribute\), found $crc_found$"
t 0 flipls ls "$D"
has flipls "^$FL step=8 .* status=invalid: /optim/exp_avg/fc.weight is corrupt: CRC-32 expected $crc_want" \
    "^$D/ckpt-00000004.h5 step=4 .* status=valid$"
: >"$D/ckpt-00000016.h5.tmp"
t 0 flipls2 ls "$D"
head -1 "$TMP/flipls2" | grep -qx "$D/ckpt-00000016.h5.tmp status=incomplete (leftover of an interrupted save)" ||
    { cat "$TMP/flipls2"; fail "ls: the leftover .tmp is not listed first as incomplete"; }
rm "$D/ckpt-00000004.h5"
t 1 flipls3 ls "$D"
echo "ok: a flipped byte fails verify naming /optim/exp_avg/fc.weight ($crc_want expected, $crc_found found); ls shows it invalid"

# an external link is reported, never followed
cp "$F8" "$TMP/elink.h5"
"$PY" - "$TMP/elink.h5" <<'EOF' || fail "h5py: external link"
import sys, h5py
with h5py.File(sys.argv[1], "a") as f:
    f["model/evil"] = h5py.ExternalLink("/etc/passwd", "/x")
EOF
t 1 elink verify "$TMP/elink.h5"
has elink '/model/evil is an external link to /etc/passwd:/x \(a checkpoint has none; not followed\)'
t 0 elinkshow show "$TMP/elink.h5"
has elinkshow '^object /model/evil: external link to /etc/passwd:/x \(not followed\)$'
echo "ok: an external link is refused by verify and listed, not followed, by show"

# ---------------------------------------------------------------- diff
t 0 diffsame diff "$F8" "$F8"
has diffsame '^tensor /model/fc.weight: identical \(16 elements\)$'
tail -1 "$TMP/diffsame" | grep -q '^summary: 6 tensors: 6 identical, 0 differ.*: identical$' ||
    { cat "$TMP/diffsame"; fail "diff of a file with itself: summary"; }
t 1 diffsteps diff "$F4" "$F8"
has diffsteps '^tensor /model/fc.weight: 16 of 16 elements differ, max \|a-b\| = [0-9.e-]+$' \
    '^tensor /optim/exp_avg_sq/fc.bias: 1 of 1 element differ' '^attr step: 4 in A, 8 in B$' \
    '^attr optim.step: 4 in A, 8 in B$' '^attr sampler.consumed: 32 in A, 64 in B$'
tail -1 "$TMP/diffsteps" | grep -q '^summary: 6 tensors: 0 identical, 6 differ.*: different$' ||
    { cat "$TMP/diffsteps"; fail "diff of two steps: summary"; }
t 1 diffflip diff "$F8" "$FL"
has diffflip '^tensor /optim/exp_avg/fc.weight: 1 of 16 elements differ' '^summary: 6 tensors: 5 identical, 1 differ'
t 1 diffopt diff "$F4" "$TMP/sgd/ckpt-00000004.h5"
has diffopt '^tensor /optim/exp_avg/fc.weight: only in A$' '^tensor /optim/momentum_buffer/fc.weight: only in B$' \
    '^attr optim.type: "adamw" in A, "sgd" in B$'
t 2 diffmissing diff "$F8" "$TMP/nonexistent.h5"
echo "ok: diff: identical 0, different 1 naming tensors and attributes, unreadable 2"

# ---------------------------------------------------------------- export
# the reader must reject damage first, or its passes mean nothing
check_export() { # FILE OUT
    t 0 export export "$1" "$2"
    has export "^exported $1: [0-9]+ tensors, [0-9]+ bytes of float32 to $2$"
    [ ! -e "$2.tmp" ] || fail "export left $2.tmp"
    "$PY" "$REF" "$2" "$1" >"$TMP/ref" 2>&1 || { cat "$TMP/ref"; fail "safetensors_ref.py $2 $1"; }
    cat "$TMP/ref"
}
ST="$TMP/m8.safetensors"
check_export "$F8" "$ST"
cp "$ST" "$TMP/bad.safetensors"
printf '\377' | dd of="$TMP/bad.safetensors" bs=1 seek=$(($(wc -c <"$ST") - 2)) conv=notrunc 2>/dev/null
"$PY" "$REF" "$TMP/bad.safetensors" "$F8" >"$TMP/refbad" 2>&1 && { cat "$TMP/refbad"; fail "safetensors_ref.py accepted a flipped data byte"; }
grep -q 'data differs' "$TMP/refbad" || { cat "$TMP/refbad"; fail "safetensors_ref.py: wrong complaint about a flipped byte"; }
"$PY" - "$ST" "$TMP/pad.safetensors" <<'EOF' || fail "python: re-padding"
import struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = raw[8:8 + n].rstrip(b" ") + b" " * 9   # too much padding, misaligned
open(sys.argv[2], "wb").write(struct.pack("<Q", len(head)) + head + raw[8 + n:])
EOF
"$PY" "$REF" "$TMP/pad.safetensors" "$F8" >"$TMP/refpad" 2>&1 && { cat "$TMP/refpad"; fail "safetensors_ref.py accepted bad padding"; }
"$PY" "$REF" "$ST" "$F4" >"$TMP/refother" 2>&1 && { cat "$TMP/refother"; fail "safetensors_ref.py accepted another checkpoint"; }
echo "ok: safetensors_ref.py rejects a flipped byte, bad padding and another checkpoint"

t 2 exists export "$F8" "$ST"
has exists "^ddpc-ckpt: $ST: exists \(use --force to replace it\)$"
t 0 force export --force "$F12" "$ST"
"$PY" "$REF" "$ST" "$F12" >"$TMP/ref" 2>&1 || { cat "$TMP/ref"; fail "safetensors_ref.py after --force"; }
check_export "$BIG" "$TMP/big.safetensors"
# a corrupt parameter: nothing exported
cp "$F8" "$TMP/badmodel.h5"
"$PY" - "$TMP/badmodel.h5" <<'EOF' || fail "h5py: flipping a parameter byte"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f["model/fc.weight"].id.get_offset()
with open(sys.argv[1], "r+b") as fh:
    fh.seek(off)
    b = fh.read(1)
    fh.seek(off)
    fh.write(bytes([b[0] ^ 1]))
EOF
t 1 expbad export "$TMP/badmodel.h5" "$TMP/badmodel.safetensors"
has expbad '/model/fc.weight is corrupt: CRC-32 expected [0-9a-f]{8} \(its crc32 attribute\), found [0-9a-f]{8}; nothing exported'
[ ! -e "$TMP/badmodel.safetensors" ] && [ ! -e "$TMP/badmodel.safetensors.tmp" ] || fail "a corrupt export left a file"
echo "ok: export: no overwrite without --force, a corrupt parameter exports nothing"

# a checkpoint written by h5py alone from doc/checkpoint.md: a 3-D parameter
# read in pieces along its middle dimension, a scalar, no optimizer
SY="$TMP/synthetic.h5"
"$PY" - "$SY" <<'EOF' || fail "h5py: synthetic checkpoint"
import sys, zlib, h5py, numpy as np
rng = np.random.default_rng(7)
params = [("layer/cube", rng.standard_normal((3, 5, 250000)).astype("<f4")),
          ("scale", np.array(1.5, dtype="<f4"))]
h = 0xcbf29ce484222325
def fnv(b):
    global h
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
with h5py.File(sys.argv[1], "w", libver=("v108", "v108")) as f:
    for k, v in [("format", b"ddpc-checkpoint"), ("ddpc_version", b"0.1.0"),
                 ("created", b"2025-01-31T12:00:00Z")]:
        f.attrs[k] = np.bytes_(v)
    f.attrs["format_version"] = np.int32(1)
    f.attrs["step"], f.attrs["epoch"] = np.uint64(42), np.uint64(3)
    f.attrs["world_size"] = np.int32(8)
    f.create_group("rng"), f.create_group("user")
    g = f.create_group("model")
    g.attrs["names"] = np.array([n.encode() for n, _ in params], dtype="S")
    for n, v in params:
        d = g.create_dataset(n, data=v)
        d.attrs["crc32"] = np.uint32(zlib.crc32(v.tobytes()))
        fnv(n.encode() + b"\0" + b"float32\0")
        fnv(v.ndim.to_bytes(8, "little"))
        for e in v.shape:
            fnv(e.to_bytes(8, "little"))
    f.attrs["model_fingerprint"] = np.uint64(h)
EOF
t 0 verifysy verify "$SY"
has verifysy "^ok: $SY: 2 datasets, 15000004 bytes verified$"
t 0 showsy show "$SY"
has showsy '^model_fingerprint: [0-9a-f]{16} \(matches' '^optim: none \(parameters only\)$' \
    '^tensor /model/layer/cube dtype=float32 shape=\[3,5,250000\] numel=3750000 crc32=' \
    '^tensor /model/scale dtype=float32 shape=\[\] numel=1 crc32='
t 0 diffsy diff "$SY" "$SY"
check_export "$SY" "$TMP/synthetic.safetensors"
echo "ok: a checkpoint written by h5py from the documentation verifies, diffs and exports"
