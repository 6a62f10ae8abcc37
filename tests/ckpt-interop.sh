#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ckpt-interop.sh: a checkpoint written by 2 ranks is readable without ddpc:
# h5dump lists the documented groups, datasets and attributes; Python's h5py
# reads a parameter equal to the bytes ddpc dumped, every dataset's crc32
# attribute equals zlib.crc32 of its data, and the model fingerprint
# recomputed as doc/checkpoint.md describes equals the stored one; a
# pipelined trainer's checkpoint is bitwise the unsplit trainer's (and torch,
# where installed, loads its model); with torch installed, a trainer's
# --batchnorm checkpoint loads strictly into a torch module of Linear,
# BatchNorm1d and ReLU layers, which in eval mode scores the trainer's test
# accuracy on the test set, sample for sample.
. "$(dirname "$0")/lib.sh"
TRAIN="$top_builddir/tests/mpi_ckpt_train"
mpirun_t 2 "$TRAIN" --dir "$TMP/ck" --steps 6 --save-every 6 --optim adamw --dim 37 \
    --dump "$TMP/w.bin" >"$TMP/train.out" 2>&1 || { cat "$TMP/train.out"; fail "training run"; }
f="$TMP/ck/ckpt-00000006.h5"
[ -f "$f" ] || { ls -l "$TMP/ck"; fail "no $f"; }
checked=0

if command -v h5dump >/dev/null; then
    h5dump -H "$f" >"$TMP/h5" || fail "h5dump -H $f"
    for want in 'GROUP "/"' 'ATTRIBUTE "format"' 'ATTRIBUTE "format_version"' 'ATTRIBUTE "ddpc_version"' \
        'ATTRIBUTE "step"' 'ATTRIBUTE "epoch"' 'ATTRIBUTE "world_size"' 'ATTRIBUTE "created"' \
        'ATTRIBUTE "model_fingerprint"' 'GROUP "model"' 'ATTRIBUTE "names"' 'DATASET "fc.weight"' \
        'DATASET "fc.bias"' 'ATTRIBUTE "crc32"' 'GROUP "optim"' 'ATTRIBUTE "type"' 'ATTRIBUTE "lr"' \
        'GROUP "exp_avg"' 'GROUP "exp_avg_sq"' 'GROUP "sampler"' 'ATTRIBUTE "consumed"' \
        'GROUP "rng"' 'ATTRIBUTE "state"' 'GROUP "user"' 'DATASPACE  SIMPLE { ( 1, 37 ) / ( 1, 37 ) }'; do
        grep -qF "$want" "$TMP/h5" || { cat "$TMP/h5"; fail "h5dump -H shows no $want"; }
    done
    h5dump -a /format "$f" | grep -q '"ddpc-checkpoint"' || fail "h5dump: format attribute"
    h5dump -d /optim/exp_avg_sq/fc.weight "$f" >/dev/null || fail "h5dump cannot read a state tensor"
    echo "ok: h5dump lists the layout"
    checked=$((checked + 1))
else
    echo "SKIP part: no h5dump (apt-get install hdf5-tools)"
fi

PY=
for p in python3 /usr/bin/python3; do
    "$p" -c 'import h5py, numpy' 2>/dev/null && { PY=$p; break; }
done
if [ -n "$PY" ]; then
    "$PY" - "$f" "$TMP/w.bin" <<'PYEOF' || fail "h5py check"
import sys, zlib
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["format"] == b"ddpc-checkpoint", f.attrs["format"]
assert f.attrs["format_version"] == 1 and f.attrs["step"] == 6 and f.attrs["world_size"] == 2
w = f["model/fc.weight"]
assert w.dtype == np.dtype("<f4") and w.shape == (1, 37), (w.dtype, w.shape)
want = np.fromfile(sys.argv[2], dtype="<f4").reshape(1, 37)
assert w[...].tobytes() == want.tobytes(), "fc.weight differs from what ddpc dumped"
names = [n.decode() for n in f["model"].attrs["names"]]
assert names == ["fc.weight", "fc.bias"], names
seen = []
def crc(name, obj):
    if isinstance(obj, h5py.Dataset):
        got = zlib.crc32(obj[...].astype("<f4").tobytes())
        assert got == obj.attrs["crc32"], (name, got, obj.attrs["crc32"])
        seen.append(name)
f.visititems(crc)
assert len(seen) == 6, seen   # 2 parameters x (model, exp_avg, exp_avg_sq)
h = 0xcbf29ce484222325
def fnv(b):
    global h
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
for n in names:
    ds = f["model/" + n]
    fnv(n.encode() + b"\0" + b"float32\0")
    fnv(len(ds.shape).to_bytes(8, "little"))
    for e in ds.shape:
        fnv(e.to_bytes(8, "little"))
assert h == int(f.attrs["model_fingerprint"]), (hex(h), f.attrs["model_fingerprint"])
assert f["optim"].attrs["type"] == b"adamw" and f["optim"].attrs["step"] == 6
assert f["sampler"].attrs["consumed"] == 48 and len(f["rng"].attrs["state"]) == 8
print("ok: h5py reads fc.weight equal to ddpc's dump; %d CRCs and the fingerprint check" % len(seen))
PYEOF
    checked=$((checked + 1))
else
    echo "SKIP part: no Python with h5py and numpy (apt-get install python3-h5py)"
fi
# --- a pipeline's checkpoint (the trainer, 2 stages x 1 replica, AdamW) is
# the unsplit model's file: every dataset of the unsplit trainer's checkpoint
# at the same step, with the same names, shapes, bytes and CRCs; with torch
# installed, nn.Sequential's load_state_dict takes its model group
TRAINER="$top_builddir/trainer"
DATA=${DDPC_TEST_DATA:-/usr/share/datasets/fashion-mnist}
if [ -z "$PY" ] || [ ! -x "$TRAINER" ] ||
    { [ ! -e "$DATA/train-labels-idx1-ubyte.gz" ] && [ ! -e "$DATA/train-labels-idx1-ubyte" ]; }; then
    echo "SKIP part: the pipelined checkpoint (needs h5py, the trainer and Fashion-MNIST in $DATA)"
else
    T="--data $DATA --device cpu --hidden 32,16 --threads 1 --seed 3 --optimizer adamw --max-steps 6 --ckpt-every 6 --quiet"
    # shellcheck disable=SC2086
    mpirun_t 1 "$TRAINER" $T --batch-size 8 --grad-accum 4 --ckpt-dir "$TMP/unsplit" >"$TMP/u.out" 2>&1 ||
        { cat "$TMP/u.out"; fail "unsplit trainer run"; }
    # shellcheck disable=SC2086
    mpirun_t 2 "$TRAINER" $T --batch-size 32 --micro-batches 4 --pipeline-stages 2 --ckpt-dir "$TMP/pipe" \
        >"$TMP/p.out" 2>&1 || { cat "$TMP/p.out"; fail "pipelined trainer run"; }
    "$PY" - "$TMP/pipe/ckpt-00000006.h5" "$TMP/unsplit/ckpt-00000006.h5" <<'PYEOF' || fail "pipelined checkpoint check"
import sys, zlib
import h5py, numpy as np
p, u = (h5py.File(x, "r") for x in sys.argv[1:])
names = [n.decode() for n in p["model"].attrs["names"]]
assert names == [n.decode() for n in u["model"].attrs["names"]], names
assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"], names
assert p.attrs["model_fingerprint"] == u.attrs["model_fingerprint"]
n = 0
for grp in ("model", "optim/exp_avg", "optim/exp_avg_sq"):
    for k in names:
        a, b = p[grp + "/" + k], u[grp + "/" + k]
        assert a.shape == b.shape and a.dtype == b.dtype, (grp, k, a.shape, b.shape)
        assert a[...].tobytes() == b[...].tobytes(), (grp, k, "differs from the unsplit run's")
        assert zlib.crc32(a[...].tobytes()) == a.attrs["crc32"], (grp, k)
        n += 1
assert p["optim"].attrs["step"] == u["optim"].attrs["step"] == 6
assert p["sampler"].attrs["consumed"] == u["sampler"].attrs["consumed"]
msg = "ok: the pipeline's checkpoint holds the unsplit run's %d tensors, bitwise" % n
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    m = torch.nn.Sequential()
    dims = [784, 32, 16, 10]
    for i in range(3):
        m.add_module("fc%d" % (i + 1), torch.nn.Linear(dims[i], dims[i + 1]))
    sd = {k: torch.from_numpy(p["model/" + k][...]) for k in names}
    m.load_state_dict(sd, strict=True)
    assert torch.equal(m.fc2.weight.detach(), sd["fc2.weight"])
    msg += "; torch %s's load_state_dict takes it" % torch.__version__
else:
    msg += " (no torch here: load_state_dict not tried)"
print(msg)
PYEOF
    checked=$((checked + 1))
fi

# --- batchnorm: torch's nn.BatchNorm1d takes the trainer's parameters and
# running statistics by their state_dict names and evaluates as the trainer
TPY=
for p in python3 /usr/bin/python3; do
    "$p" -c 'import torch, h5py, numpy' 2>/dev/null && { TPY=$p; break; }
done
if [ -z "$TPY" ] || [ ! -x "$TRAINER" ] ||
    { [ ! -e "$DATA/t10k-labels-idx1-ubyte.gz" ] && [ ! -e "$DATA/t10k-labels-idx1-ubyte" ]; }; then
    echo "SKIP part: the batchnorm checkpoint in torch (needs torch with h5py, the trainer and Fashion-MNIST in $DATA)"
else
    mpirun_t 2 "$TRAINER" --data "$DATA" --device cpu --hidden 32,16 --batchnorm --threads 1 --seed 4 \
        --batch-size 32 --max-steps 60 --ckpt-every 60 --ckpt-dir "$TMP/bn" --quiet >"$TMP/bn.out" 2>&1 ||
        { cat "$TMP/bn.out"; fail "--batchnorm trainer run"; }
    acc=$(sed -n 's/^final: test_acc=\([0-9.]*\) .*/\1/p' "$TMP/bn.out")
    [ -n "$acc" ] || { cat "$TMP/bn.out"; fail "no final line"; }
    "$TPY" - "$TMP/bn/ckpt-00000060.h5" "$DATA" "$acc" <<'PYEOF' || fail "torch BatchNorm1d check"
import gzip, os, sys
import h5py, numpy as np, torch
from torch import nn
f = h5py.File(sys.argv[1], "r")
class Net(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.n = len(dims) - 1
        for i in range(self.n):
            setattr(self, "fc%d" % (i + 1), nn.Linear(dims[i], dims[i + 1]))
            if i < self.n - 1:
                setattr(self, "bn%d" % (i + 1), nn.BatchNorm1d(dims[i + 1]))
    def forward(self, x):
        for i in range(1, self.n):
            x = torch.relu(getattr(self, "bn%d" % i)(getattr(self, "fc%d" % i)(x)))
        return getattr(self, "fc%d" % self.n)(x)
m = Net([784, 32, 16, 10])
sd = {k: torch.from_numpy(np.array(f["model/" + k][...])) for k in f["model"].keys()}
assert sorted(sd) == sorted(m.state_dict()), (sorted(sd), sorted(m.state_dict()))
assert sd["bn1.num_batches_tracked"].dim() == 0 and float(sd["bn1.num_batches_tracked"]) == 60
m.load_state_dict(sd, strict=True)
assert torch.equal(m.bn2.running_var, sd["bn2.running_var"])
def idx(name):
    p = os.path.join(sys.argv[2], name)
    raw = gzip.open(p + ".gz").read() if os.path.exists(p + ".gz") else open(p, "rb").read()
    return raw
img, lab = idx("t10k-images-idx3-ubyte"), idx("t10k-labels-idx1-ubyte")
n = int.from_bytes(lab[4:8], "big")
y = np.frombuffer(lab, np.uint8, n, 8)
# the trainer's normalization, in float32 as idx.c computes it
lut = (np.arange(256, dtype=np.float32) / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)
x = lut[np.frombuffer(img, np.uint8, n * 784, 16)].reshape(n, 784)
m.eval()
with torch.no_grad():
    hits = int((m(torch.from_numpy(x)).argmax(1).numpy() == y).sum())
want = round(float(sys.argv[3]) * n)
print("torch %s, eval mode: %d of %d test samples right, the trainer's test_acc %s (%d)"
      % (torch.__version__, hits, n, sys.argv[3], want))
assert hits == want, (hits, want)
PYEOF
    echo "ok: torch's BatchNorm1d loads the --batchnorm checkpoint strictly and scores test_acc $acc"
    checked=$((checked + 1))
fi
[ $checked -gt 0 ] || skip "neither h5dump nor Python's h5py is installed"
