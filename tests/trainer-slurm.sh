#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-slurm.sh: the trainer on the Slurm testbed (tests/slurm/testbed.sh,
# nodes n1 and n2):
#  - srun -N2 -n4: one epoch of an MLP reaches test accuracy >= 0.80, every
#    rank ends with the same parameter checksum
#  - srun -N2 -n2 and mpiexec -n 2 outside Slurm (same seed, same world size)
#    end with the same checksum; the srun run's timeline (DDPC_TIMELINE) merges,
#    both ranks' steps aligned within the offsets' stated bound
# MPICH (Debian's has no PMIx client) launches with --mpi=pmi2, others with pmix.
. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/slurm/slurm_env.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
testbed_up || exit $?
export DDPC_SRUN_TIMEOUT=${DDPC_SRUN_TIMEOUT:-150}

# one epoch, 4 ranks on 2 nodes
srun_t -N2 -n4 --mpi=$PLUGIN "$TRAINER" --data "$DATA" --epochs 1 --hidden 128 \
    --batch-size 128 --threads 1 --ckpt-dir "$TMP/ck4" --print-crc-all >"$TMP/n4" 2>&1 \
    || { cat "$TMP/n4"; fail "srun -N2 -n4 --mpi=$PLUGIN trainer"; }
cat "$TMP/n4"
grep -q '^trainer: 4 rank(s) on 2 node(s)' "$TMP/n4" || fail "not 4 ranks on 2 nodes"
final=$(grep '^final: ' "$TMP/n4") || fail "no final line"
acc=$(echo "$final" | sed -n 's/.*test_acc=\([0-9.]*\).*/\1/p')
crc=$(echo "$final" | sed -n 's/.*params_crc32=\([0-9a-f]\{8\}\)$/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }' || fail "test accuracy $acc < 0.80 after one epoch"
for r in 0 1 2 3; do
    grep -q "^rank $r: params_crc32=$crc$" "$TMP/n4" || fail "rank $r's checksum differs from $crc"
done
[ -f "$TMP/ck4/ckpt-00000118.h5" ] || { ls -l "$TMP/ck4"; fail "no checkpoint at the end"; }
echo "ok: srun -N2 -n4: test_acc=$acc, every rank params_crc32=$crc"

# the same run (2 ranks) under srun and under mpiexec
ARGS="--data $DATA --hidden 64 --batch-size 64 --max-steps 150 --threads 1 --seed 3 --ckpt-dir none --quiet"
# shellcheck disable=SC2086
# (with a timeline: the ranks on two nodes, their clocks aligned within the bound stated)
DDPC_TIMELINE="$TMP/tl" srun_t -N2 -n2 --mpi=$PLUGIN "$TRAINER" $ARGS >"$TMP/s2" 2>&1 ||
    { cat "$TMP/s2"; fail "srun -N2 -n2"; }
# shellcheck disable=SC2086
mpirun_t 2 "$TRAINER" $ARGS >"$TMP/m2" 2>&1 || { cat "$TMP/m2"; fail "mpiexec -n 2"; }
cat "$TMP/s2" "$TMP/m2"
c1=$(sed -n 's/^final: .*params_crc32=\([0-9a-f]\{8\}\)$/\1/p' "$TMP/s2")
c2=$(sed -n 's/^final: .*params_crc32=\([0-9a-f]\{8\}\)$/\1/p' "$TMP/m2")
[ -n "$c1" ] && [ "$c1" = "$c2" ] || fail "srun gives params_crc32=$c1, mpiexec $c2"
echo "ok: srun -N2 -n2 and mpiexec -n 2: params_crc32=$c1"
PY=
for p in python3 /usr/bin/python3; do "$p" -c 'import json' 2>/dev/null && { PY=$p; break; }; done
[ -n "$PY" ] || fail "no python3 for ddpc-timeline"
"$PY" "$top_srcdir/src/tools/ddpc-timeline" merge "$TMP/tl" >"$TMP/tl.out" || { cat "$TMP/tl.out"; fail "timeline merge"; }
"$PY" "$top_srcdir/src/tools/ddpc-timeline" check "$TMP/tl/timeline.json" || fail "the merged timeline breaks the format"
"$PY" - "$TMP/tl/timeline.json" <<'PYEOF' || fail "the timeline of srun -N2 -n2"
import json, sys
doc = json.load(open(sys.argv[1]))
o = doc["otherData"]
assert [r["rank"] for r in o["ranks"]] == [0, 1] and not o["missing_ranks"], o
assert 0 <= o["offset_bound_us"] < 20000, o
for r in (0, 1):
    n = sum(1 for e in doc["traceEvents"] if e["pid"] == r and e["name"] == "optimizer step")
    assert n == 150, (r, n)
# rank 0 starts and ends the run: the other's steps lie within its first and last, give or take
# the bound (aligned clocks; unaligned monotonic clocks of two nodes would not be)
ts = lambda r: [e["ts"] for e in doc["traceEvents"] if e["pid"] == r and e["name"] == "optimizer step"]
b = o["offset_bound_us"] + 1e5
assert abs(ts(0)[0] - ts(1)[0]) < b and abs(ts(0)[-1] - ts(1)[-1]) < b, (ts(0)[0], ts(1)[0])
print("ok: srun -N2 -n2 timeline: 2 ranks (%s), offsets %s us within %.1f us" % (
    ", ".join(r["host"] for r in o["ranks"]), [r["clock_offset_us"] for r in o["ranks"]],
    o["offset_bound_us"]))
PYEOF
