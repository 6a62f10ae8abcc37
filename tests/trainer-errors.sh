#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-errors.sh: errors of the trainer's files, each said once and clearly:
#  - --data given a regular file or a missing path: one message, no stray errno text
#  - an uncompressed data file that exists but cannot be read: its own error, not the .gz's
#  - --metrics on a full device (/dev/full): a warning once, exit 1 at the end
#  - a checkpoint directory that cannot be written (a dangling link, a file in
#    its path, read-only): exit 1 at the start, before training
#  - --batchnorm/--sync-bn misused (--sync-bn alone, --batchnorm with
#    pipeline stages): one message, exit 2, no training
#  - cuda (the CUDA model and a device, or the emulation): fp16 and --clip
#    with pipeline stages refused once, exit 2; --cuda-graph on with stages trains without
#    graphs, saying so once
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
COMMON="--data $DATA --hidden 16 --batch-size 64 --threads 1 --seed 1 --max-steps 20 --log-every 5"

# --- metrics that cannot be written
if [ -w /dev/full ]; then
    mpirun_t 2 "$TRAINER" $COMMON --ckpt-dir none --metrics /dev/full >"$TMP/full" 2>&1; rc=$?
    cat "$TMP/full"
    [ $rc -eq 1 ] || fail "--metrics /dev/full: exit $rc, expected 1"
    grep -q '^final: ' "$TMP/full" || fail "--metrics /dev/full: no final line (training itself is fine)"
    [ "$(grep -c 'metrics "/dev/full": cannot write' "$TMP/full")" -eq 1 ] ||
        fail "--metrics /dev/full: not one warning naming the file"
    grep -q 'trainer\[rank 0/2 [^]]*\]: --metrics "/dev/full": incomplete (No space left on device): exit 1' "$TMP/full" || fail "--metrics /dev/full: no message at the exit"
    echo "ok: --metrics /dev/full: one warning, the final line, exit 1"
else
    echo "no /dev/full here: the metrics write error is not tested"
fi

# --- --data given a regular file: one message, the same on every run, no
# errno text of something else
: >"$TMP/plain"
expect_fail_msg "--data \"$TMP/plain\": not a directory: a regular file" mpirun_t 2 "$TRAINER" $COMMON \
    --ckpt-dir none --data "$TMP/plain"
[ "$(grep -c -- '--data' "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "--data FILE: not one message"; }
expect_fail_msg "--data \"$TMP/none\": not a directory: No such file or directory" mpirun_t 2 "$TRAINER" \
    $COMMON --ckpt-dir none --data "$TMP/none"
[ "$(grep -c -- '--data' "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "--data MISSING: not one message"; }

# --- an uncompressed data file that exists but cannot be read: its own error
# is said, not that of the .gz tried in its place. As root a chmod 000 file
# can still be read, so the trainer runs as nobody (setpriv) there.
as=
if [ "$(id -u)" -eq 0 ]; then
    if command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
        as="setpriv --reuid=nobody --regid=$(id -g nobody) --clear-groups"
        chmod 711 "$TMP"
    fi
fi
if [ "$(id -u)" -ne 0 ] || [ -n "$as" ]; then
    nd="$TMP/unreadable"
    mkdir -m 755 "$nd"
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        : >"$nd/$f"
        chmod 000 "$nd/$f"
    done
    # one process, no launcher (MPI's singleton): what runs as nobody is the trainer only
    expect_fail_msg "cannot open idx3-ubyte images file \"$nd/train-images-idx3-ubyte\": Permission denied" \
        timeout -k 5 "$TEST_TIMEOUT" $as "$TRAINER" $COMMON --ckpt-dir none --data "$nd"
    if grep -q '\.gz' "$TMP/out"; then cat "$TMP/out"; fail "the message names a .gz file that does not exist"; fi
else
    echo "SKIP (part): root without setpriv or a nobody user: an unreadable file cannot be made"
fi

# --- a checkpoint directory that cannot be written is refused at the start,
# before any training (it used to be found at the first save, after training
# with --ckpt-every 0): a dangling symbolic link named as such, and a
# directory where no file can be created
ln -s "$TMP/nowhere" "$TMP/dangling"
expect_fail_msg "checkpoint directory \"$TMP/dangling\" is a dangling symbolic link \\(to \"$TMP/nowhere\"" \
    mpirun_t 2 "$TRAINER" $COMMON --ckpt-every 0 --ckpt-dir "$TMP/dangling"
if grep -q '^epoch ' "$TMP/out"; then cat "$TMP/out"; fail "dangling --ckpt-dir: it trained first"; fi
[ "$(grep -c 'dangling symbolic link' "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "dangling --ckpt-dir: not one message"; }
mpirun_t 1 "$TRAINER" $COMMON --ckpt-dir "$TMP/dangling" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "dangling --ckpt-dir: exit $rc, expected 1"
: >"$TMP/afile"
expect_fail_msg "cannot create the checkpoint directory \"$TMP/afile/ck\": Not a directory" \
    mpirun_t 2 "$TRAINER" $COMMON --ckpt-every 0 --ckpt-dir "$TMP/afile/ck"
if grep -q '^epoch ' "$TMP/out"; then cat "$TMP/out"; fail "--ckpt-dir under a file: it trained first"; fi
if [ "$(id -u)" -ne 0 ] || [ -n "$as" ]; then
    mkdir -m 555 "$TMP/ro"
    expect_fail_msg "checkpoint directory \"$TMP/ro\" is not writable: cannot create a file in it: Permission denied" \
        timeout -k 5 "$TEST_TIMEOUT" $as "$TRAINER" $COMMON --ckpt-every 0 --ckpt-dir "$TMP/ro"
    if grep -q '^epoch ' "$TMP/out"; then cat "$TMP/out"; fail "read-only --ckpt-dir: it trained first"; fi
else
    echo "SKIP (part): root without setpriv or a nobody user: a directory root cannot write cannot be made"
fi

# --- batchnorm options misused: exit 2, one message, nothing trained
bn_refused() { # PATTERN ARGS...
    local pat=$1 rc; shift
    # shellcheck disable=SC2086
    mpirun_t 2 "$TRAINER" $COMMON --ckpt-dir none "$@" >"$TMP/out" 2>&1; rc=$?
    [ "$rc" -eq 2 ] || { cat "$TMP/out"; fail "$*: exit $rc, expected 2"; }
    [ "$(grep -Ec -- "$pat" "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "$*: not one /$pat/"; }
    if grep -q '^epoch \|^final' "$TMP/out"; then cat "$TMP/out"; fail "$*: it trained"; fi
    echo "ok (rc=2): $* -> $(grep -E -m1 -- "$pat" "$TMP/out")"
}
bn_refused '^trainer: --sync-bn: needs --batchnorm' --sync-bn
bn_refused '^trainer: --batchnorm: not with --pipeline-stages/--micro-batches' --batchnorm \
    --hidden 16,16 --pipeline-stages 2

# --- pipelines on cuda (where the trainer has the CUDA model and sees a
# device, the emulation's included): fp16 with stages is refused once, exit
# 2, before training; --cuda-graph on trains the pipeline without graphs
# and says so
if mpirun_t 1 "$TRAINER" $COMMON --ckpt-dir none --device cuda --max-steps 1 >"$TMP/probe" 2>&1; then
    PC="--data $DATA --hidden 16,16 --batch-size 32 --threads 1 --seed 1 --max-steps 2 --ckpt-dir none --device cuda"
    refused() { # PATTERN WHAT ARGS...: exit 2, PATTERN once, no training
        local pat=$1 what=$2 rc; shift 2
        # shellcheck disable=SC2086
        mpirun_t 2 "$TRAINER" $PC --pipeline-stages 2 --micro-batches 2 "$@" >"$TMP/out" 2>&1; rc=$?
        [ "$rc" -eq 2 ] || { cat "$TMP/out"; fail "$what with stages on cuda: exit $rc, expected 2"; }
        [ "$(grep -Ec -- "$pat" "$TMP/out")" -eq 1 ] || { cat "$TMP/out"; fail "$what with stages: not one /$pat/"; }
        if grep -q '^epoch \|^final' "$TMP/out"; then cat "$TMP/out"; fail "$what with stages: it trained"; fi
        echo "ok (rc=2): $what with stages on cuda -> $(grep -E -m1 -- "$pat" "$TMP/out")"
    }
    refused '^trainer: --precision fp16: not supported with --pipeline-stages 2 on cuda yet' fp16 --precision fp16
    refused '^trainer: --clip: not supported with --pipeline-stages 2 on cuda yet .*--device cpu clips' --clip --clip 1
    mpirun_t 2 "$TRAINER" $PC --pipeline-stages 2 --cuda-graph on >"$TMP/graph" 2>&1 \
        || { cat "$TMP/graph"; fail "a cuda pipeline with --cuda-graph on: exit $?"; }
    [ "$(grep -c '^trainer: --cuda-graph on: pipeline stages (--pipeline-stages 2) are not captured; training without CUDA graphs' "$TMP/graph")" -eq 1 ] \
        || { cat "$TMP/graph"; fail "--cuda-graph on with stages: not one note"; }
    grep -q '^final: ' "$TMP/graph" || { cat "$TMP/graph"; fail "--cuda-graph on with stages: no final line"; }
    echo "ok: a cuda pipeline with --cuda-graph on trains without graphs, saying so once"
else
    echo "SKIP (part): no CUDA trainer or device here: the cuda pipeline refusals are not tested ($(grep -m1 -i 'cuda' "$TMP/probe"))"
fi
