#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-bn.sh: the trainer's --batchnorm and --sync-bn on the cpu:
#  - --batchnorm trains at 2 ranks to a sensible accuracy, every rank's
#    checksum equal, and its checkpoint holds the running statistics as buffers
#  - a run stopped at step 150 and resumed to 300 ends bitwise as the
#    uninterrupted run: parameters (params_crc32) and the test accuracy and
#    loss, which the running statistics decide (eval mode)
#  - --sync-bn: 2 ranks x batch 32 train as 1 rank x batch 64 (the sampler
#    deals the same global batches): the test loss equal within 1e-4 after 10
#    steps, where plain --batchnorm (each rank's own statistics) differs
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
COMMON="--data $DATA --device cpu --hidden 64,32 --threads 1 --seed 5 --batchnorm"

final() { # the final line's field $2 of file $1
    sed -n "s/^final: .*$2=\([^ ]*\).*$/\1/p" "$1"
}

# --- training at 2 ranks
mpirun_t 2 "$TRAINER" $COMMON --batch-size 32 --max-steps 300 --ckpt-dir "$TMP/full" \
    --ckpt-every 150 --print-crc-all --log-every 100 >"$TMP/full.out" 2>&1 ||
    { cat "$TMP/full.out"; fail "--batchnorm run"; }
cat "$TMP/full.out"
grep -q "^trainer: model mlp 784-64-32-10 batchnorm " "$TMP/full.out" || fail "the model line does not say batchnorm"
crc=$(final "$TMP/full.out" params_crc32)
acc=$(final "$TMP/full.out" test_acc)
[ -n "$crc" ] || fail "no final line"
[ "$(grep -c "^rank [01]: params_crc32=$crc$" "$TMP/full.out")" -eq 2 ] || fail "ranks' checksums differ"
awk -v a="$acc" 'BEGIN { exit !(a > 0.75) }' || fail "test_acc $acc after 300 steps: expected > 0.75"
echo "ok: --batchnorm at 2 ranks: test_acc $acc"
if command -v h5dump >/dev/null; then
    h5dump -H "$TMP/full/ckpt-00000300.h5" >"$TMP/h5" || fail "h5dump"
    for ds in bn1.weight bn1.bias bn1.running_mean bn1.running_var bn1.num_batches_tracked \
              bn2.running_var fc3.weight; do
        grep -q "DATASET \"$ds\"" "$TMP/h5" || fail "the checkpoint has no /model/$ds"
    done
    h5dump -d /model/bn1.num_batches_tracked "$TMP/full/ckpt-00000300.h5" | grep -q "300" ||
        fail "bn1.num_batches_tracked is not 300"
    echo "ok: the checkpoint holds bn1/bn2's parameters and buffers"
fi

# --- stop at 150, resume to 300: bitwise the uninterrupted run
mpirun_t 2 "$TRAINER" $COMMON --batch-size 32 --max-steps 150 --ckpt-dir "$TMP/part" \
    >"$TMP/p1.out" 2>&1 || { cat "$TMP/p1.out"; fail "first half"; }
mpirun_t 2 "$TRAINER" $COMMON --batch-size 32 --max-steps 300 --ckpt-dir "$TMP/part" \
    >"$TMP/p2.out" 2>&1 || { cat "$TMP/p2.out"; fail "resumed half"; }
grep -q "resum" "$TMP/p2.out" || { cat "$TMP/p2.out"; fail "the second run did not resume"; }
[ "$(final "$TMP/p2.out" params_crc32)" = "$crc" ] || { cat "$TMP/p2.out"; fail "resumed parameters differ"; }
[ "$(final "$TMP/p2.out" test_acc)" = "$acc" ] &&
    [ "$(final "$TMP/p2.out" test_loss)" = "$(final "$TMP/full.out" test_loss)" ] ||
    { cat "$TMP/p2.out"; fail "resumed evaluation differs (running statistics not restored?)"; }
echo "ok: stopped at 150 and resumed: params_crc32=$crc and test_acc $acc as uninterrupted"

# --- --sync-bn: 2 x 32 as 1 x 64
run() { # name ranks batch [options]
    n=$1; r=$2; b=$3; shift 3
    # shellcheck disable=SC2086
    mpirun_t "$r" "$TRAINER" $COMMON --batch-size "$b" --max-steps 10 --ckpt-dir none "$@" \
        --metrics "$TMP/$n.jsonl" >"$TMP/$n.out" 2>&1 || { cat "$TMP/$n.out"; fail "run $n"; }
}
run one 1 64
run sync 2 32 --sync-bn
run local 2 32
python3 - "$TMP/one.jsonl" "$TMP/sync.jsonl" "$TMP/local.jsonl" <<'PY' || fail "--sync-bn at 2 x 32 differs from 1 x 64"
import json, sys
one, sync, loc = ([json.loads(l) for l in open(f)][-1] for f in sys.argv[1:])
ds, dl = abs(one["test_loss"] - sync["test_loss"]), abs(one["test_loss"] - loc["test_loss"])
print("test_loss after 10 steps: 1 x 64 %.7f, 2 x 32 --sync-bn %.7f (difference %.2g), "
      "2 x 32 --batchnorm alone %.7f (difference %.2g)"
      % (one["test_loss"], sync["test_loss"], ds, loc["test_loss"], dl))
assert ds < 1e-4, "sync-bn differs by %g" % ds
assert abs(one["test_acc"] - sync["test_acc"]) <= 5e-4, (one["test_acc"], sync["test_acc"])
assert dl > 10 * ds and dl > 1e-4, "each rank's own statistics should differ from the global ones"
PY
echo "ok: --sync-bn at 2 x 32 trains as 1 x 64"
