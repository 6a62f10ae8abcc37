#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# slurm-faults.sh: faults of the launch and the network on the Slurm testbed
# (tests/slurm/testbed.sh: two slurmd as nodes n1 and n2, each in its own
# network namespace behind a veth on a private bridge), with the trainer on
# 2 nodes (srun -N2 -n2 --kill-on-bad-exit=1, as the sbatch scripts launch):
#  (b) srun itself SIGKILLed while the ranks train: no rank may be alive 10 s
#      later. With Slurm 22.05 (Debian 12) the job is cancelled at once
#      (slurmctld: "cancelled by interactive user"; srun runs as two
#      processes, presumably the one not killed ends the job) and the ranks end
#      within 0.1 s. Where a Slurm leaves the step running instead (the step
#      belongs to slurmctld; InactiveLimit=0 never ends it), `scancel` of the
#      job is the way: then the test scancels it and measures the tasks' end
#      (fault table row 8 of doc/failures.md).
#  (a) link loss: once training runs and checkpoints are written, the link of
#      node n2 is cut (its host-side veth set down; netns mode only). The job
#      must end non-zero, the surviving rank 0 must name the collective and
#      rank 1 on n2 (no heartbeat), no rank may be left on n1 10 s after the
#      job's end, and the checkpoints written before the cut must be intact
#      (unchanged, ddpc-ckpt verify). The rank on n2 times out too and must
#      be gone 10 s after the job's end although Slurm cannot reach it: its
#      MPI_Abort waits for its slurmstepd, which cannot reach slurmctld, and
#      ddpc_abort ends the process itself 5 s later (row 6).
# Times are printed ("ok: ... N s"); pass/fail bounds are generous (60 s).
. "$(dirname "$0")/lib.sh"
. "$top_srcdir/tests/slurm/slurm_env.sh"
TRAINER="$top_builddir/trainer"
CKTOOL="$top_builddir/ddpc-ckpt"
need_fmnist
[ "$(id -u)" = 0 ] || skip "must run as root (the Slurm testbed and ip link)"
command -v ip >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin
NSP=ddpc${DDPC_TESTBED_PORT:-16917}
H2=${NSP}h2  # n2's veth on the host side (testbed.sh: veths ${NSP}hX/${NSP}cX)
cut=0
SPIDS=
cleanup() {
    [ "$cut" = 1 ] && ip link set "$H2" up 2>/dev/null
    for p in $SPIDS; do kill -KILL "$p" 2>/dev/null; done
    if [ -n "${SLURM_CONF:-}" ]; then
        for j in $(timeout 5 squeue -h -o '%i %j' 2>/dev/null | awk '$2 ~ /^ddpc-faults-/ {print $1}'); do
            timeout 5 scancel "$j" 2>/dev/null
        done
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT  # testbed_up chains its stop before this
testbed_up || exit $?

# small and slow enough to be caught training: 1 BLAS thread per rank (2
# cores here), each step sleeps 10 ms
export DDPC_TRAINER_TEST_STEP_SLEEP=0.01
ARGS="--data $DATA --hidden 64 --batch-size 32 --threads 1 --epochs 50 --log-every 10"

now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }  # ms -> s with one decimal
# ranks TAG: the pids of the live rank processes of part TAG (found by their
# --metrics file; srun and timeout carry the same arguments but another name)
ranks() {
    for p in $(pgrep -f -- "--metrics $TMP/$1.jsonl"); do
        c=$(cat "/proc/$p/comm" 2>/dev/null) || continue
        case $c in
            *trainer*) grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null || echo "$p" ;;
        esac
    done
}
nranks() { ranks "$1" | wc -l; }
# wait_training TAG: until rank 0 logged a step and both ranks run (60 s)
wait_training() {
    i=0
    until grep -q '"event":"log"' "$TMP/$1.jsonl" 2>/dev/null && [ "$(nranks "$1")" -eq 2 ]; do
        sleep 0.1; i=$((i + 1))
        [ $i -lt 600 ] || { cat "$TMP/$1.out"; fail "$1: the job never started training"; }
    done
}
# wait_gone TAG SECONDS: until no rank of TAG is left; 1 if some still are
wait_gone() {
    i=0
    while [ "$(nranks "$1")" -gt 0 ]; do
        [ $i -lt $(($2 * 10)) ] || return 1
        sleep 0.1; i=$((i + 1))
    done
}
jobid() { squeue -h -n "ddpc-faults-$1" -o %i 2>/dev/null | head -n1; }
nodes_idle() { [ "$(sinfo -h -N -o %T 2>/dev/null | sort -u)" = idle ]; }

# ---------------------------------------------------------------- (b) srun SIGKILLed
# srun run directly (no timeout wrapper) so that $! is srun's own pid; the
# EXIT trap cancels the job if the test dies
# shellcheck disable=SC2086
srun -N2 -n2 --mpi=$PLUGIN --kill-on-bad-exit=1 -J ddpc-faults-b "$TRAINER" $ARGS --seed 5 \
    --ckpt-dir none --metrics "$TMP/b.jsonl" >"$TMP/b.out" 2>&1 &
spid=$!
SPIDS="$spid"
wait_training b
job=$(jobid b)
[ -n "$job" ] || fail "b: no job ddpc-faults-b in the queue"
kill -KILL "$spid"
t0=$(now_ms)
wait "$spid"
SPIDS=
echo "b: srun (pid $spid) of job $job SIGKILLed while its ranks train: $(nranks b) rank(s) alive"
if wait_gone b 10; then
    dt=$(($(now_ms) - t0))
    echo "ok: srun SIGKILLed: the ranks ended by themselves $(secs $dt) s later (job $job: $(job_state "$job"))"
    [ "$(job_state "$job")" != RUNNING ] || scancel "$job"  # the allocation srun held
else
    steps0=$(grep -c '"event":"log"' "$TMP/b.jsonl")
    sleep 1
    steps1=$(grep -c '"event":"log"' "$TMP/b.jsonl")
    st=$(job_state "$job")
    echo "b: 10 s after srun's SIGKILL both ranks still run (log lines $steps0 -> $steps1 in 1 s)" \
         "and job $job is $st: the step belongs to slurmctld, not to srun (InactiveLimit=0: a lost srun does not end it)"
    [ "$st" = RUNNING ] || fail "b: job $job is $st with its ranks alive"
    scancel "$job" || fail "b: scancel $job"
    t1=$(now_ms)
    wait_gone b 60 || { ps -o pid,stat,etime,args -p "$(ranks b | paste -sd, -)"; fail "b: ranks alive 60 s after scancel $job"; }
    dt=$(($(now_ms) - t1))
    i=0
    until case $(job_state "$job") in RUNNING|COMPLETING|"") false ;; *) true ;; esac; do
        sleep 0.1; i=$((i + 1))
        [ $i -lt 600 ] || fail "b: job $job still $(job_state "$job") 60 s after scancel"
    done
    echo "ok: srun SIGKILLed: the ranks kept training; scancel $job ended them in $(secs $dt) s" \
         "(job $(job_state "$job") after $(secs $(($(now_ms) - t1))) s)"
fi

# ---------------------------------------------------------------- (a) link loss
if [ "$(cat "${DDPC_TESTBED_STATE:-${TMPDIR:-/tmp}/ddpc-slurm-${DDPC_TESTBED_PORT:-16917}}/mode" 2>/dev/null)" != netns ] ||
   ! ip link show "$H2" >/dev/null 2>&1; then
    echo "SKIP part: link loss needs the testbed in netns mode (no $H2 to cut)"
    echo "ok: slurm faults (link loss not run)"
    exit 0
fi
i=0
until nodes_idle; do
    sleep 0.1; i=$((i + 1))
    [ $i -lt 300 ] || { sinfo -N; fail "a: nodes not idle before the link test"; }
done
# over TCP across the veths (not shared memory, not the loopback); the
# trainer's timeout 3 s; a checkpoint every 50 steps, all kept
# shellcheck disable=SC2086
tstart=$(now_ms)
( UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 DDPC_TIMEOUT=3 timeout -k 10 120 \
    srun -N2 -n2 --mpi=$PLUGIN --kill-on-bad-exit=1 -J ddpc-faults-a "$TRAINER" $ARGS --seed 7 \
    --ckpt-dir "$TMP/a.ck" --ckpt-every 50 --ckpt-keep 1000 --metrics "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
  echo $? >"$TMP/a.rc"; now_ms >"$TMP/a.end" ) &
SPIDS=$!
wait_training a
i=0
until [ -f "$TMP/a.ck/ckpt-00000100.h5" ]; do
    sleep 0.1; i=$((i + 1))
    [ $i -lt 600 ] || { cat "$TMP/a.out"; fail "a: no checkpoint of step 100"; }
done
job=$(jobid a)
[ -n "$job" ] || fail "a: no job ddpc-faults-a in the queue"
sleep 0.3
(cd "$TMP/a.ck" && sha256sum ckpt-*.h5) >"$TMP/a.sums" || fail "a: sha256sum"
nck=$(wc -l <"$TMP/a.sums")
ip link set "$H2" down || fail "a: ip link set $H2 down"
cut=1
tcut=$(now_ms)
echo "a: link of n2 ($H2) cut while job $job trains, $nck checkpoint(s) written"
tmsg='' tgone=''
i=0
while :; do
    [ -n "$tmsg" ] || ! grep -q 'did not complete within' "$TMP/a.out" || tmsg=$(now_ms)
    [ -n "$tgone" ] || [ "$(nranks a)" -gt 0 ] || tgone=$(now_ms)
    if [ -f "$TMP/a.end" ]; then
        [ -n "$tgone" ] && break
        [ $(($(now_ms) - $(cat "$TMP/a.end"))) -lt 10000 ] || break  # 10 s after the job's end
    fi
    sleep 0.1; i=$((i + 1))
    [ $i -lt 1500 ] || break
done
left1='' left2='' n2pids=" $(ip netns pids "$NSP-n2" 2>/dev/null | tr '\n' ' ') "
for p in $(ranks a); do
    case $n2pids in *" $p "*) left2="$left2 $p" ;; *) left1="$left1 $p" ;; esac
done
[ -f "$TMP/a.rc" ] || { cat "$TMP/a.out"; fail "a: srun did not end 150 s after the cut"; }
rc=$(cat "$TMP/a.rc") tend=$(cat "$TMP/a.end")
# the rank on the cut-off node (see the top): what its main thread waits in
for p in $left2; do
    wchan2=$(cat "/proc/$p/wchan" 2>/dev/null)
done
ip link set "$H2" up || fail "a: ip link set $H2 up"
cut=0
trestore=$(now_ms)
cat "$TMP/a.out"
[ "$rc" -ne 0 ] || fail "a: the job exited 0 after the link loss"
# (srun exits 137 itself when a task was SIGKILLed: its time tells a timeout)
[ $((tend - tstart)) -lt 115000 ] || fail "a: srun had not ended 120 s after its start (killed by timeout)"
dend=$((tend - tcut))
[ $dend -le 60000 ] || fail "a: the job ended $(secs $dend) s after the cut"
[ -z "$left1" ] || fail "a: rank(s)$left1 on n1 still alive 10 s after the job's end"
line=$(grep -E 'comm: allreduce #[0-9]+ \([0-9]+ x [a-z0-9]+, root 0\) did not complete within 3s' "$TMP/a.out" | head -n1)
[ -n "$line" ] || fail "a: no timeout message naming the all-reduce"
printf '%s\n' "$line" | grep -Eq 'rank 1 on n2: (no heartbeat for [0-9.]+s|its side channel closed)' ||
    fail "a: the timeout message does not name rank 1 on n2: $line"
[ -n "$tmsg" ] || tmsg=$tend
echo "ok: link loss: rank 0's timeout $(secs $((tmsg - tcut))) s after the cut: $line"
echo "ok: link loss: srun exited $rc $(secs $dend) s after the cut (T = 3 s); no rank left on n1" \
     "10 s after the job's end"
# the rank on n2 times out too and aborts; MPI_Abort cannot reach its
# launcher while the link is down, and ddpc_abort ends it 5 s later itself
[ -z "$left2" ] || fail "a: the rank on n2 (pid$left2, in ${wchan2:-?}) still alive 10 s after the job's end, n2 cut off"
echo "ok: link loss: the rank on n2 ended too while its node was cut off"
# the job leaves the queue once n2 is reachable again; the nodes come back
i=0
until [ -z "$(squeue -h -j "$job" -o %T 2>/dev/null)" ] ||
      case $(job_state "$job") in RUNNING|COMPLETING|"") false ;; *) true ;; esac; do
    sleep 0.1; i=$((i + 1))
    [ $i -lt 600 ] || fail "a: job $job still $(job_state "$job") 60 s after the link came back"
done
i=0
until nodes_idle; do
    sleep 0.1; i=$((i + 1))
    [ $i -lt 900 ] || { sinfo -N; fail "a: nodes not idle 90 s after the link came back"; }
done
echo "ok: link restored: job $job $(job_state "$job"), nodes idle $(secs $(($(now_ms) - trestore))) s later"
# the checkpoints written before the cut are intact
(cd "$TMP/a.ck" && sha256sum -c --quiet "$TMP/a.sums") || fail "a: a checkpoint written before the cut changed"
for f in $(awk '{print $2}' "$TMP/a.sums"); do
    "$CKTOOL" verify "$TMP/a.ck/$f" >"$TMP/verify" 2>&1 || { cat "$TMP/verify"; fail "a: ddpc-ckpt verify $f"; }
done
echo "ok: link loss: the $nck checkpoint(s) written before the cut are unchanged and verify" \
     "($(find "$TMP/a.ck" -name '*.h5.tmp' | wc -l) .tmp left)"
echo "ok: slurm faults"
