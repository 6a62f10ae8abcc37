#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-resume.sh: a resume with other hyper-parameters than the checkpoint's.
#  - --lr: this run's rate is the one trained with (the banner, the metrics'
#    "lr" and the result agree), with a warning naming both values;
#  - --batch-size, --grad-accum, --clip: accepted, each with a warning naming
#    the checkpoint's value and this run's.
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
COMMON="--data $DATA --hidden 32 --threads 1 --seed 3 --log-every 5"

CK="$TMP/ck"
mpirun_t 2 "$TRAINER" $COMMON --batch-size 32 --lr 0.05 --max-steps 10 --ckpt-dir "$CK" \
    >"$TMP/first" 2>&1 || { cat "$TMP/first"; fail "first run"; }
[ -f "$CK/ckpt-00000010.h5" ] || { ls -l "$CK"; fail "no checkpoint of step 10"; }
cp -r "$CK" "$TMP/ck-same"

# --- another --lr
mpirun_t 2 "$TRAINER" $COMMON --batch-size 32 --lr 0.01 --max-steps 20 --ckpt-dir "$CK" \
    --metrics "$TMP/lr.jsonl" >"$TMP/lr" 2>&1 || { cat "$TMP/lr"; fail "resume with --lr 0.01"; }
cat "$TMP/lr"
grep -q "resumed from $CK/ckpt-00000010.h5: step 10" "$TMP/lr" || fail "did not resume"
grep -q "warning: trainer: $CK/ckpt-00000010.h5 was saved with --lr 0.05; continuing with --lr 0.01" \
    "$TMP/lr" || fail "no warning naming both learning rates"
python3 - "$TMP/lr.jsonl" <<'PY' || fail "the metrics do not show the new learning rate"
import json, sys
lrs = [json.loads(l)["lr"] for l in open(sys.argv[1]) if '"event":"log"' in l]
print("lr in the metrics:", lrs)
assert lrs and all(abs(x - 0.01) < 1e-12 for x in lrs), lrs
PY
# the same resume with the checkpoint's rate: no warning, another result
mpirun_t 2 "$TRAINER" $COMMON --batch-size 32 --lr 0.05 --max-steps 20 --ckpt-dir "$TMP/ck-same" \
    >"$TMP/same" 2>&1 || { cat "$TMP/same"; fail "resume with --lr 0.05"; }
if grep -q "was saved with" "$TMP/same"; then cat "$TMP/same"; fail "a warning with unchanged options"; fi
a=$(sed -n 's/^final: .*params_crc32=\([0-9a-f]*\)$/\1/p' "$TMP/lr")
b=$(sed -n 's/^final: .*params_crc32=\([0-9a-f]*\)$/\1/p' "$TMP/same")
[ -n "$a" ] && [ -n "$b" ] || fail "no final lines"
[ "$a" != "$b" ] || fail "--lr 0.01 on resume trained as --lr 0.05 did (params_crc32=$a)"
echo "ok: --lr on resume: warned, in the metrics, and trained with ($a vs $b)"

# --- another --batch-size, --grad-accum, --clip
cp -r "$TMP/ck-same" "$TMP/ck-bs"
mpirun_t 2 "$TRAINER" $COMMON --batch-size 16 --grad-accum 2 --clip 1 --lr 0.05 --max-steps 30 \
    --ckpt-dir "$TMP/ck-bs" >"$TMP/bs" 2>&1 || { cat "$TMP/bs"; fail "resume with --batch-size 16"; }
cat "$TMP/bs"
grep -q "was saved with --batch-size 32; continuing with --batch-size 16" "$TMP/bs" || fail "no --batch-size warning"
grep -q "was saved with --grad-accum 1; continuing with --grad-accum 2" "$TMP/bs" || fail "no --grad-accum warning"
grep -q "was saved with clip_norm 0; continuing with 1" "$TMP/bs" || fail "no --clip warning"
echo "ok: --batch-size, --grad-accum, --clip on resume: warned"
