#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# monitor.sh: the side channel that names the rank at fault
# (src/comm/monitor.c), with real MPICH processes:
#  - DDPC_DEBUG=detail: matching collectives pass; rank 1 all-reducing 32
#    floats where the others reduce 16 fails every rank at once with
#    DDPC_ERR_MISMATCH naming both sides (without it MPI would return a wrong
#    result or hang);
#  - a rank that is late: the others' timeout names it as alive, with its
#    last operations and host;
#  - a frozen rank (SIGSTOP): named as having no heartbeat;
#  - rank 0 frozen: the others say that rank 0, which keeps the table, does
#    not answer;
#  - a rank that finalizes and exits 0 early: named as gone;
#  - the launcher (mpiexec) killed: no rank outlives it by 10 s;
#  - every rank stopped (scontrol suspend) in the middle of a wait for
#    longer than the timeout: no timeout after they continue;
#  - the flight recorder (DDPC_FLIGHT_RECORDER) and ddpc-flight's verdicts;
#  - DDPC_MONITOR=0 and a bad DDPC_DEBUG.
. "$(dirname "$0")/lib.sh" || exit 99
T=$top_builddir/tests/monitor_test

# --- mismatched counts under DDPC_DEBUG=detail: every rank, at once
DDPC_DEBUG=detail mpirun_t 3 "$T" ok >"$TMP/ok" 2>&1 || { cat "$TMP/ok"; fail "matching collectives failed under DDPC_DEBUG=detail"; }
[ "$(grep -c ': success$' "$TMP/ok")" -eq 3 ] || { cat "$TMP/ok"; fail "expected 3 successes"; }
t0=$(date +%s)
DDPC_DEBUG=detail DDPC_TIMEOUT=20 mpirun_t 3 "$T" mismatch >"$TMP/mm" 2>&1
rc=$?
dt=$(($(date +%s) - t0))
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$TMP/mm"; fail "mismatch: exit $rc"; }
n=$(grep -c 'comm: allreduce #1 (16 x float32, root 0): DDPC_DEBUG=detail: collective #1 differs between the ranks: rank 1 ([^)]*) called allreduce of 32 x float32, root 0, where rank 0 ([^)]*) called allreduce of 16 x float32, root 0' "$TMP/mm")
m=$(grep -c 'comm: allreduce #1 (32 x float32, root 0): DDPC_DEBUG=detail: collective #1 differs' "$TMP/mm")
[ "$n" -eq 2 ] && [ "$m" -eq 1 ] || { cat "$TMP/mm"; fail "mismatch: expected the message on all 3 ranks (got $n + $m)"; }
[ "$dt" -lt 15 ] || fail "mismatch: took ${dt}s (the check must not wait for the timeout)"
echo "ok: mismatched counts fail every rank in ${dt}s: $(grep -m1 'differs' "$TMP/mm")"

# --- a late rank: the others name it, alive
t0=$(date +%s)
DDPC_TIMEOUT=2 expect_fail_msg '1 rank\(s\) never entered #1: rank 2 on [^:]+: alive \(heartbeat [0-9.]+s ago\): still computing, or blocked elsewhere; its last report: entered #0, completed #0' \
    mpirun_t 3 "$T" late 2
dt=$(($(date +%s) - t0))
[ "$dt" -lt 20 ] || fail "late rank: took ${dt}s"

# --- a frozen rank: named, without a heartbeat
# pid_of FILE RANK: the pid the rank printed at its start (waits for it)
pid_of() {
    i=0
    until p=$(sed -n "s/^monitor_test: rank $2 pid \([0-9]*\)$/\1/p" "$1") && [ -n "$p" ]; do
        i=$((i + 1)); [ $i -lt 100 ] || { cat "$1"; fail "rank $2 never started"; }
        sleep 0.1
    done
    echo "$p"
}
# frozen OUT RANK NP T: `late RANK` with DDPC_TIMEOUT=T, RANK stopped 1 s in
frozen() {
    DDPC_TIMEOUT=$4 mpirun_t "$3" "$T" late "$2" >"$1" 2>&1 &
    job=$!
    victim=$(pid_of "$1" "$2")
    sleep 1
    kill -STOP "$victim"
    wait $job
    kill -CONT "$victim" 2>/dev/null
}
frozen "$TMP/frozen" 1 3 4
grep -Eq 'never entered #1: rank 1 on [^:]+: no heartbeat for [0-9.]+s: stopped \(SIGSTOP, a debugger\), hung hard, or its node is gone' "$TMP/frozen" ||
    { cat "$TMP/frozen"; fail "frozen rank not named as stopped"; }
echo "ok: a frozen rank: $(grep -m1 -o 'never entered #1: rank 1 on [^;]*' "$TMP/frozen")"

# --- rank 0 frozen: the others cannot ask it, and say so
frozen "$TMP/r0" 0 3 3
grep -q 'rank 0 did not answer within 3s (its process is stopped or overloaded)' "$TMP/r0" ||
    { cat "$TMP/r0"; fail "rank 0 frozen: no message saying it does not answer"; }
echo "ok: rank 0 frozen: the others say it does not answer"

# --- the whole job stopped (what scontrol suspend does: SIGSTOP to every task)
# for longer than its timeout, while rank 0 waits for rank 1: the timeout
# counts only the time the processes run, so nothing times out after SIGCONT
DDPC_TIMEOUT=4 mpirun_t 2 "$T" late 1 2 >"$TMP/susp" 2>&1 &
job=$!
p0=$(pid_of "$TMP/susp" 0) p1=$(pid_of "$TMP/susp" 1)
i=0
until grep -q 'rank 0: entering #1' "$TMP/susp"; do
    i=$((i + 1)); [ $i -lt 100 ] || { cat "$TMP/susp"; fail "suspend: rank 0 never reached #1"; }
    sleep 0.1
done
sleep 1
kill -STOP "$p0" "$p1"
sleep 6
kill -CONT "$p0" "$p1"
wait $job || { cat "$TMP/susp"; fail "suspend: a stop of 6 s (DDPC_TIMEOUT=4) during a wait failed the job"; }
[ "$(grep -c ': success$' "$TMP/susp")" -eq 2 ] || { cat "$TMP/susp"; fail "suspend: expected 2 successes"; }
echo "ok: the job stopped for 6 s in the middle of a wait (DDPC_TIMEOUT=4): no timeout after SIGCONT"

# --- the launcher killed (SIGKILL to mpiexec) while rank 0 waits for rank 1:
# no rank outlives it by 10 s (hydra's proxies end their ranks)
# (env execs the launcher: $! is its pid)
DDPC_TIMEOUT=60 env -u SLURM_CONF UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" $MPIEXEC $MPIEXEC_FLAGS -n 2 \
    "$T" late 1 30 >"$TMP/lk" 2>&1 &
launcher=$!
r0=$(pid_of "$TMP/lk" 0) r1=$(pid_of "$TMP/lk" 1)
sleep 1
kill -9 "$launcher"
t0=$(date +%s)
while kill -0 "$r0" 2>/dev/null || kill -0 "$r1" 2>/dev/null; do
    [ $(($(date +%s) - t0)) -lt 10 ] || { kill -9 "$r0" "$r1" 2>/dev/null; fail "launcher killed: ranks $r0/$r1 still alive after 10 s"; }
    sleep 0.1
done
echo "ok: the launcher killed: its ranks were gone after $(($(date +%s) - t0)) s"

# --- ddpc_finalize after a timed-out collective returns at once with the
# timeout (it used to wait forever for the progress thread stuck in MPI) and
# the job ends: the rank that finalized exits non-zero, the launcher ends the
# rank that never came
t0=$(date +%s)
DDPC_TIMEOUT=2 mpirun_t 2 "$T" finalize 1 30 >"$TMP/fin" 2>&1
rc=$? t1=$(date +%s)
grep -Eq 'rank 0: finalize after the timeout: [^:]*(timed out|timeout)[^:]* in [0-2]\.[0-9]s' "$TMP/fin" ||
    { cat "$TMP/fin"; fail "finalize after a timeout: no prompt return with the timeout"; }
grep -q 'a collective never completed' "$TMP/fin" || { cat "$TMP/fin"; fail "finalize after a timeout: no message saying why"; }
[ "$rc" -ne 0 ] && [ $((t1 - t0)) -lt 20 ] || { cat "$TMP/fin"; fail "finalize after a timeout: exit $rc after $((t1 - t0)) s"; }
echo "ok: ddpc_finalize after a timeout: $(grep -o 'rank 0: finalize after the timeout: .*' "$TMP/fin"); job over in $((t1 - t0)) s, exit $rc"

# --- a rank that exits 0 early: named as gone (its side channel closed). With
# MPICH the others' abort ends the job; Open MPI's mpirun does not kill a rank
# that sits in MPI_Finalize when the others call MPI_Abort, so the job waits
# for the launcher's own end (doc/failures.md): MPICH only
if [ "$DDPC_MPI_FLAVOR" = mpich ]; then
    DDPC_TIMEOUT=3 expect_fail_msg '1 rank\(s\) never entered #1: rank 1 on [^:]+: its side channel closed [0-9.]+s ago: exited or killed' \
        mpirun_t 3 "$T" early 1
else
    echo "SKIP part: a rank that exits 0 early under $DDPC_MPI_FLAVOR (its mpirun keeps a finalized rank through MPI_Abort)"
fi

# --- the flight recorder: the ranks that timed out dump their last collectives,
# and ddpc-flight says who left none and what the others wait for
FL=$TMP/flight
mkdir -p "$FL"
DDPC_FLIGHT_RECORDER=8 DDPC_FLIGHT_RECORDER_DIR=$FL DDPC_TIMEOUT=2 mpirun_t 3 "$T" late 2 >"$TMP/fl" 2>&1
grep -q "flight recorder: $FL/ddpc-flight-rank0.json" "$TMP/fl" || { cat "$TMP/fl"; fail "no flight-recorder path in the timeout message"; }
python3 - "$FL/ddpc-flight-rank0.json" <<'PY' || fail "rank 0's dump is not what it did"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["communicators"][0]["collectives"]
assert d["rank"] == 0 and d["size"] == 3, d
assert [(e["seq"], e["op"], e["count"], e["state"]) for e in c] == \
    [(0, "allreduce", 16, "completed"), (1, "allreduce", 16, "issued")], c
PY
F=$top_srcdir/src/tools/ddpc-flight
python3 "$F" "$FL" >"$TMP/merge" || { cat "$TMP/merge"; fail "ddpc-flight found nothing to say"; }
grep -q 'no dump from rank(s) 2' "$TMP/merge" && grep -q 'rank(s) 0, 1 wait for collectives that never completed' "$TMP/merge" ||
    { cat "$TMP/merge"; fail "ddpc-flight: the late rank not pointed at"; }
# two dumps that disagree: a different count at #5, and rank 1 one collective behind
mkdir -p "$TMP/div"
for r in 0 1; do
    n=16; [ $r = 1 ] && n=32
    last=""; [ $r = 0 ] && last=', {"seq": 6, "op": "allreduce", "count": 8, "dtype": "float32", "root": 0, "tag": "ddp bucket 0", "state": "issued", "issued_s_ago": 1.0}'
    next=6; [ $r = 0 ] && next=7
    cat >"$TMP/div/ddpc-flight-rank$r.json" <<JS
{"rank": $r, "size": 2, "host": "h$r", "pid": 1, "why": "test", "communicators": [{"id": 0, "backend": "mpi", "next_seq": $next, "completed": 5, "collectives": [{"seq": 5, "op": "allreduce", "count": $n, "dtype": "float32", "root": 0, "tag": "", "state": "completed", "issued_s_ago": 2.0, "took_s": 0.1}$last]}]}
JS
done
python3 "$F" "$TMP/div" >"$TMP/merge2" || { cat "$TMP/merge2"; fail "ddpc-flight: no divergence found"; }
grep -q 'DIVERGED at #5: the ranks called different collectives' "$TMP/merge2" &&
    grep -q 'rank 1: allreduce #5 (32 x float32)' "$TMP/merge2" &&
    grep -q 'DIVERGED at #6: rank(s) 0 issued allreduce #6 (8 x float32) \[ddp bucket 0\]; rank(s) 1 never did' "$TMP/merge2" ||
    { cat "$TMP/merge2"; fail "ddpc-flight: wrong divergence"; }
python3 "$F" "$TMP/nothing-here" 2>/dev/null; [ $? = 2 ] || fail "ddpc-flight: no dumps must exit 2"
echo "ok: flight recorder dumps and ddpc-flight's verdicts"

# --- switches
DDPC_MONITOR=0 DDPC_TIMEOUT=2 expect_fail_msg 'did not complete within 2s: another rank has not called it \(crashed, stuck, or issuing collectives in a different order\); set DDPC_TIMEOUT to wait longer$' \
    mpirun_t 2 "$T" late 1
DDPC_DEBUG=verbose expect_fail_msg 'DDPC_DEBUG="verbose": expected off or detail' mpirun_t 2 "$T" ok
echo "monitor.sh: all ok"
