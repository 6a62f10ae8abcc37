#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-pipeline.sh: pipelines over data parallel (doc/pipeline.md):
#  - bad pipeline options: exit 2 and one message naming the option
#  - 1, 2 and 3 stages x 1 and 2 replicas, 1f1b and gpipe: the final line
#    (test loss, accuracy, params_crc32 of the whole model) is bitwise the
#    unsplit trainer's with --grad-accum M at the same replica count, over two
#    epochs of a small subset (partial micro-batches and a short last step)
#  - --clip: the whole model's gradient norm, bitwise the unsplit run's
#  - fewer micro-batches than stages; every rank reports its replica's checksum
#  - checkpoints: a pipeline's (2 stages) resumes unsplit, an unsplit run's
#    resumes on 3 stages, a pipeline's on another stage count, each ending
#    bitwise where the uninterrupted unsplit run ends
#  - SIGUSR1 to one rank: the whole pipeline checkpoints and stops at one step, exit 3
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
command -v python3 >/dev/null || skip "no python3 (makes the data subset)"

# a subset of Fashion-MNIST: 204 training and 100 test samples, so that an
# epoch ends inside a step (204 / 2 replicas = 102 = 12 micro-batches of 8
# and one of 6; 13 = 3 steps of 4 and one of 1)
SUB="$TMP/sub"
python3 - "$DATA" "$SUB" <<'PY' || fail "cannot make the data subset"
import gzip, os, struct, sys
src, dst = sys.argv[1:]
os.makedirs(dst)
def rd(name):
    p = os.path.join(src, name)
    return gzip.open(p + ".gz").read() if os.path.exists(p + ".gz") else open(p, "rb").read()
for split, n in (("train", 204), ("t10k", 100)):
    img, lab = rd(split + "-images-idx3-ubyte"), rd(split + "-labels-idx1-ubyte")
    _, _, r, c = struct.unpack(">IIII", img[:16])
    open(os.path.join(dst, split + "-images-idx3-ubyte"), "wb").write(
        struct.pack(">IIII", 0x803, n, r, c) + img[16:16 + n * r * c])
    open(os.path.join(dst, split + "-labels-idx1-ubyte"), "wb").write(
        struct.pack(">II", 0x801, n) + lab[8:8 + n])
PY
# 3 layers (784-32-16-10), 1 BLAS thread per rank (2 cores here); the cpu, so
# that --device auto does not pick cuda for some rank counts and not others
# (tests/trainer-gpu.sh runs pipelines on cuda)
COMMON="--data $SUB --device cpu --hidden 32,16 --threads 1 --seed 11 --epochs 2 --ckpt-dir none --quiet"

# --- bad command lines: one message, from rank 0
bad() { # PATTERN NP ARGS...: exit 2, PATTERN printed once
    local pat=$1 np=$2 rc; shift 2
    # shellcheck disable=SC2086
    mpirun_t "$np" "$TRAINER" $COMMON "$@" >"$TMP/out" 2>&1; rc=$?
    [ $rc -eq 2 ] || { cat "$TMP/out"; fail "$*: exit $rc, expected 2"; }
    [ "$(grep -Ec -- "$pat" "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "$*: /$pat/ not printed once"; }
    echo "ok (rc=2): $* -> $(grep -E -m1 -- "$pat" "$TMP/out")"
}
bad '^trainer: --pipeline-stages 4: the model has 3 layer' 1 --pipeline-stages 4
bad '^trainer: --pipeline-stages 2: 3 rank\(s\) do not divide' 3 --pipeline-stages 2
bad '^trainer: --micro-batches 3: --batch-size 32 does not divide' 1 --batch-size 32 --micro-batches 3
bad '^trainer: --grad-accum 2: with --pipeline-stages' 2 --pipeline-stages 2 --grad-accum 2
bad '^trainer: --schedule "zigzag": expected 1f1b or gpipe' 2 --pipeline-stages 2 --schedule zigzag

# --- exactness: S stages x R replicas with M = 4 micro-batches against the
# unsplit trainer's --grad-accum 4 (same samples per step)
final() { sed -n 's/^final: \(test_acc=[^ ]* test_loss=[^ ]* steps=[0-9]*\) .*\(params_crc32=[0-9a-f]*\)$/\1 \2/p' "$1"; }
for R in 1 2; do
    mpirun_t $R "$TRAINER" $COMMON --batch-size 8 --grad-accum 4 >"$TMP/ref" 2>&1 \
        || { cat "$TMP/ref"; fail "unsplit run on $R rank(s)"; }
    ref=$(final "$TMP/ref")
    [ -n "$ref" ] || { cat "$TMP/ref"; fail "no final line"; }
    [ $R -eq 1 ] && ref1=$ref
    for S in 1 2 3; do
        for sched in 1f1b gpipe; do
            mpirun_t $((R * S)) "$TRAINER" $COMMON --batch-size 32 --micro-batches 4 \
                --pipeline-stages $S --schedule $sched >"$TMP/p" 2>&1 \
                || { cat "$TMP/p"; fail "$S stage(s) x $R replica(s) $sched"; }
            got=$(final "$TMP/p")
            [ "$got" = "$ref" ] || { cat "$TMP/p"; fail "$S stage(s) x $R replica(s) $sched: '$got', unsplit '$ref'"; }
            if [ $S -gt 1 ]; then
                grep -q "^pipeline: $S stage(s) x $R replica(s) ($sched, 4 micro-batch(es) of 8); stage 0: layer" "$TMP/p" \
                    || { cat "$TMP/p"; fail "no pipeline line"; }
                grep -q "^pipeline: bubble .* stage $((S - 1)) [0-9.]*%; theory (S-1)/(M+S-1) = " "$TMP/p" \
                    || { cat "$TMP/p"; fail "no bubble line"; }
            fi
            echo "ok: $S stage(s) x $R replica(s) $sched = unsplit --grad-accum 4 ($got)"
        done
    done
done

# --- --clip: the whole model's norm along the pipeline, bitwise the unsplit
# trainer's (and clipping changes the run, so the norm is the one that counts)
mpirun_t 1 "$TRAINER" $COMMON --batch-size 8 --grad-accum 4 --clip 0.3 >"$TMP/ref" 2>&1 \
    || { cat "$TMP/ref"; fail "unsplit run with --clip"; }
refc=$(final "$TMP/ref")
[ -n "$refc" ] && [ "${refc##*params_crc32=}" != "${ref1##*params_crc32=}" ] \
    || { cat "$TMP/ref"; fail "--clip 0.3 did not change the unsplit run ('$refc', unclipped '$ref1')"; }
for layout in "2 1f1b" "3 gpipe"; do
    S=${layout% *} sched=${layout#* }
    mpirun_t "$S" "$TRAINER" $COMMON --batch-size 32 --micro-batches 4 --pipeline-stages "$S" \
        --schedule "$sched" --clip 0.3 >"$TMP/p" 2>&1 || { cat "$TMP/p"; fail "$S stages $sched --clip"; }
    got=$(final "$TMP/p")
    [ "$got" = "$refc" ] || { cat "$TMP/p"; fail "$S stages $sched --clip 0.3: '$got', unsplit '$refc'"; }
    echo "ok: $S stages $sched --clip 0.3 = unsplit --grad-accum 4 --clip 0.3 ($got)"
done

# --- fewer micro-batches than stages; every rank prints its replica's checksum
mpirun_t 2 "$TRAINER" $COMMON --batch-size 16 --grad-accum 2 >"$TMP/ref" 2>&1 || { cat "$TMP/ref"; fail "unsplit M=2"; }
mpirun_t 6 "$TRAINER" $COMMON --batch-size 32 --micro-batches 2 --pipeline-stages 3 --print-crc-all \
    >"$TMP/p" 2>&1 || { cat "$TMP/p"; fail "3 stages x 2 replicas, 2 micro-batches"; }
[ "$(final "$TMP/p")" = "$(final "$TMP/ref")" ] || { cat "$TMP/p" "$TMP/ref"; fail "2 micro-batches on 3 stages differ"; }
crc=$(sed -n 's/^final: .*params_crc32=\([0-9a-f]*\)$/\1/p' "$TMP/p")
[ "$(grep -c "^rank [0-5]: params_crc32=$crc$" "$TMP/p")" -eq 6 ] || { cat "$TMP/p"; fail "ranks' checksums differ"; }
echo "ok: 2 micro-batches on 3 stages x 2 replicas, every rank $crc"


# --- checkpoints in the unsplit format: the first epoch on one layout, the
# second resumed on another, against the uninterrupted unsplit run (ref1)
CK="${COMMON% --ckpt-dir none --quiet} --quiet"
resumed() { # NAME NP1 ARGS1 -- NP2 ARGS2
    local name=$1 np1=$2 a1 np2 a2; shift 2
    a1=""; while [ "$1" != "--" ]; do a1="$a1 $1"; shift; done; shift
    np2=$1; shift; a2="$*"
    rm -rf "$TMP/ck"
    # shellcheck disable=SC2086
    mpirun_t "$np1" "$TRAINER" $CK --epochs 1 --ckpt-dir "$TMP/ck" $a1 >"$TMP/c1" 2>&1 \
        || { cat "$TMP/c1"; fail "$name: first epoch"; }
    ls "$TMP/ck"/ckpt-*.h5 >/dev/null 2>&1 || { cat "$TMP/c1"; fail "$name: no checkpoint"; }
    # shellcheck disable=SC2086
    mpirun_t "$np2" "$TRAINER" $CK --epochs 2 --ckpt-dir "$TMP/ck" $a2 >"$TMP/c2" 2>&1 \
        || { cat "$TMP/c2"; fail "$name: resumed"; }
    grep -q "^trainer: resumed from " "$TMP/c2" || { cat "$TMP/c2"; fail "$name: did not resume"; }
    got=$(final "$TMP/c2")
    [ "$got" = "$ref1" ] || { cat "$TMP/c1" "$TMP/c2"; fail "$name: '$got', uninterrupted '$ref1'"; }
    echo "ok: $name ends where the uninterrupted run ends ($got)"
}
resumed "2 stages -> unsplit" 2 --batch-size 32 --micro-batches 4 --pipeline-stages 2 \
    -- 1 --batch-size 8 --grad-accum 4
resumed "unsplit -> 3 stages" 1 --batch-size 8 --grad-accum 4 \
    -- 3 --batch-size 32 --micro-batches 4 --pipeline-stages 3
resumed "3 stages gpipe -> 2 stages 1f1b" 3 --batch-size 32 --micro-batches 4 --pipeline-stages 3 --schedule gpipe \
    -- 2 --batch-size 32 --micro-batches 4 --pipeline-stages 2

# --- a stop signal to one rank stops every stage of every replica at one step
(export DDPC_TRAINER_TEST_STEP_SLEEP=0.02
 mpirun_t 4 "$TRAINER" --data "$DATA" --hidden 32,16 --threads 1 --epochs 50 --log-every 5 \
     --batch-size 16 --micro-batches 2 --pipeline-stages 2 --metrics "$TMP/s.jsonl" \
     --ckpt-dir "$TMP/stop" >"$TMP/s" 2>&1) &
mpx=$!
wait_for '"step":10,' "$TMP/s.jsonl" 60 $mpx "$TMP/s" "no progress"
r3=$(rank_pid $mpx 3)
[ -n "$r3" ] || { kill $mpx; fail "cannot find rank 3"; }
kill -USR1 "$r3"
wait $mpx; rc=$?
cat "$TMP/s"
[ $rc -eq 3 ] || fail "signalled pipeline: exit $rc, expected 3"
grep -q '^trainer: stop signal: stopping at step' "$TMP/s" || fail "no stop message"
grep -q "^checkpoint: $TMP/stop/ckpt-[0-9]*.h5 (stop signal" "$TMP/s" || fail "no checkpoint of the stop"
echo "ok: SIGUSR1 to rank 3 stopped the pipelines together, with one checkpoint of every stage"
