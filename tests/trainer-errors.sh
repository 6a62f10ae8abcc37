#!/bin/sh
# trainer-errors.sh: errors of the trainer's files, each said once and clearly:
#  - --metrics on a full device (/dev/full): a warning once, exit 1 at the end
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
