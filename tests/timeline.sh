#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# timeline.sh: DDPC_TIMELINE on the trainer (2 real MPI ranks, the CPU, small
# buckets). Each rank writes its file, in Chrome Trace Event Format, that
# `ddpc-timeline check` accepts (events complete, spans nested per thread,
# timestamps in order); the merge holds both ranks, ordered, with the clock
# offsets' bound stated; with overlap on, buckets are issued inside the
# backward span, and with it off all inside the wait; the program's
# spans (forward, backward, evaluation) and ddpc's phases are there; a file
# that breaks the format is refused; without DDPC_TIMELINE nothing is written;
# the PNG is drawn where matplotlib is.
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
TOOL="$top_srcdir/src/tools/ddpc-timeline"
need_fmnist
PY=
for p in python3 /usr/bin/python3; do
    "$p" -c 'import json' 2>/dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || fail "no python3 for ddpc-timeline"
COMMON="--data $DATA --device cpu --hidden 256,128 --threads 1 --max-steps 20 --batch-size 64
 --ckpt-dir none --log-every 10"

# run NAME OVERLAP: the trainer with a timeline into $TMP/NAME
run() {
    # shellcheck disable=SC2086
    DDPC_TIMELINE="$TMP/$1" DDPC_OVERLAP=$2 DDPC_BUCKET_MB=0.1 DDPC_FIRST_BUCKET_MB=0.1 \
        mpirun_t 2 "$TRAINER" $COMMON >"$TMP/$1.out" 2>&1 || { cat "$TMP/$1.out"; fail "$1: trainer failed"; }
    [ -f "$TMP/$1/timeline-rank0.json" ] && [ -f "$TMP/$1/timeline-rank1.json" ] ||
        { ls -la "$TMP/$1"; fail "$1: a rank's file is missing"; }
    "$PY" "$TOOL" check "$TMP/$1"/timeline-rank*.json || fail "$1: ddpc-timeline check refuses a rank's file"
    "$PY" "$TOOL" merge "$TMP/$1" || fail "$1: merge failed"
    "$PY" "$TOOL" check "$TMP/$1/timeline.json" || fail "$1: the merged file breaks the format"
}

# facts NAME: what the merged file shows, checked in Python; prints the overlap count
facts() {
    "$PY" - "$TMP/$1/timeline.json" "$2" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
want_overlap = sys.argv[2] == "1"
o = doc["otherData"]
ranks = [r["rank"] for r in o["ranks"]]
assert ranks == [0, 1], ranks
assert o["missing_ranks"] == [], o
# same machine: the offsets' bound is what one round trip of the key exchange takes
assert 0 <= o["offset_bound_us"] < 20000, o
ev = [e for e in doc["traceEvents"] if e["ph"] != "M"]
pids = [e["pid"] for e in ev]
assert pids == sorted(pids), "the merge does not order the ranks"
names = {}
for e in doc["traceEvents"]:
    if e["ph"] == "M" and e["name"] == "thread_name":
        names[(e["pid"], e["tid"])] = e["args"]["name"]
for r in (0, 1):
    mine = [e for e in ev if e["pid"] == r]
    have = {e["name"] for e in mine}
    for n in ("forward", "backward", "evaluation", "loader wait", "grad_ready", "bucket issued",
              "ddp wait", "optimizer step", "allreduce"):
        assert n in have, (r, n, sorted(have))
    main = [e for e in mine if names.get((r, e["tid"])) == "main"]
    steps = [e for e in main if e["name"] == "optimizer step"]
    assert len(steps) == 20, (r, len(steps))
    back = [e for e in main if e["name"] == "backward"]
    # the buckets' all-reduces (not the trainer's own, such as its stop vote):
    # the progress thread's collectives with a bucket's sequence number
    seqs = {e["args"]["seq"] for e in main if e["name"] == "bucket issued"}
    comm = [e for e in mine if e["name"] == "allreduce" and e.get("args", {}).get("seq") in seqs
            and names.get((r, e["tid"]), "").startswith("comm progress")]
    assert len(comm) == len(seqs) >= 40, (r, len(comm), len(seqs), "bucket all-reduces")
    inside = lambda e, b: b["ts"] <= e["ts"] and e["ts"] + e["dur"] <= b["ts"] + b["dur"]
    # the engine's decision: with overlap on, buckets are issued during
    # backward (all but the first layer's), with it off all in the wait
    issued = [e for e in main if e["name"] == "bucket issued"]
    during = sum(1 for e in issued if any(inside(e, b) for b in back))
    waits = [e for e in main if e["name"] == "ddp wait"]
    in_wait = sum(1 for e in issued if any(inside(e, w) for w in waits))
    assert during + in_wait == len(issued), (r, during, in_wait, len(issued))
    if want_overlap:
        assert during >= len(issued) // 2 and during >= len(back), (r, during, len(issued))
    else:
        assert during == 0, (r, during, len(issued))
    # what the wire did: all-reduces of the progress thread running while
    # backward runs (timing: reported, not checked)
    over = sum(1 for b in back if any(c["ts"] < b["ts"] + b["dur"] and c["ts"] + c["dur"] > b["ts"]
                                      for c in comm))
    print("rank %d, overlap %s: %d of %d buckets issued during backward; %d of %d backward spans "
          "overlap a bucket's all-reduce on the progress thread"
          % (r, "on" if want_overlap else "off", during, len(issued), over, len(back)))
print("ok: both ranks, in order, offsets within %.1f us" % o["offset_bound_us"])
PYEOF
}

run on 1
facts on 1 || fail "the timeline with overlap on"
run off 0
facts off 0 || fail "the timeline with overlap off"

# a file that breaks the format is refused: a span that starts inside another
# and ends after it, on one thread
"$PY" - "$TMP/on/timeline-rank0.json" "$TMP/bad.json" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["traceEvents"] += [
    {"name": "a", "ph": "X", "pid": 0, "tid": 99, "ts": 1e9, "dur": 10},
    {"name": "b", "ph": "X", "pid": 0, "tid": 99, "ts": 1e9 + 5, "dur": 10}]
json.dump(doc, open(sys.argv[2], "w"))
PYEOF
if "$PY" "$TOOL" check "$TMP/bad.json" >"$TMP/bad.out" 2>&1; then
    cat "$TMP/bad.out"; fail "check accepts overlapping spans on one thread"
fi
grep -q 'spans must nest' "$TMP/bad.out" || { cat "$TMP/bad.out"; fail "check: no reason given"; }
echo "ok: check refuses a file whose spans do not nest"

# off: nothing written, nothing recorded
# shellcheck disable=SC2086
mpirun_t 2 "$TRAINER" $COMMON >"$TMP/none.out" 2>&1 || { cat "$TMP/none.out"; fail "run without a timeline"; }
grep -q timeline "$TMP/none.out" && { cat "$TMP/none.out"; fail "a timeline without DDPC_TIMELINE"; }
echo "ok: without DDPC_TIMELINE nothing is said or written"

# the picture, where matplotlib is (bootstrap.sh installs python3-matplotlib)
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import matplotlib' 2>/dev/null; then
        "$p" "$TOOL" png "$TMP/on" -o "$TMP/on.png" --steps 3 || fail "png failed"
        [ -s "$TMP/on.png" ] || fail "no PNG"
        echo "ok: $TMP/on.png drawn"
        exit 0
    fi
done
fail "no python3 with matplotlib (apt-get install python3-matplotlib) for the PNG"
