#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ckpt-bcast-die.sh: rank 0 dies during the restart broadcast (the fault
# table's row 17). A restart of mpi_ckpt_train with 2 and 4 ranks, where rank
# 0 SIGKILLs itself after it opened and checked the newest checkpoint, at its
# first or third read of a piece (tests/die_in_read.c, preloaded: it wraps
# H5Dread, so the library has no test hook), while the other ranks wait in
# the broadcast of the next window (1 KiB windows: at the third read they
# already hold two windows of the file, a partial state).
# - under mpiexec as launched here, hydra ends the job at once, naming
#   rank 0's pid;
# - under a launcher that leaves the others running (rank 0 under a shell
#   that outlives it and hydra's -disable-auto-cleanup, as srun without
#   --kill-on-bad-exit does), the others' broadcast times out after
#   DDPC_TIMEOUT, their message names the checkpoint broadcast and says that
#   rank 0 is gone (the side channel), and the job ends (MPICH only; a run
#   in which hydra's proxy fails on the dead rank's socket and ends the job
#   at once, before anyone can say anything, is run again);
# each time: a non-zero exit within a bound, nobody trained on, no rank left
# alive 10 s later, the checkpoint files bitwise as before, and a normal
# restart resumes from the newest one and ends where an uninterrupted run
# ends. Each run prints the time from rank 0's death to the job's end.
. "$(dirname "$0")/lib.sh"
TRAIN="$top_builddir/tests/mpi_ckpt_train"
T=3
${CC:-cc} -shared -fPIC -O2 -o "$TMP/die.so" "$top_srcdir/tests/die_in_read.c" -ldl 2>"$TMP/cc" ||
    { cat "$TMP/cc"; skip "cannot build the preloaded tests/die_in_read.c with ${CC:-cc}"; }
ARGS="--steps 20 --save-every 5 --dim 1000"
sums() { (cd "$1" && ls && sha256sum ckpt-*); }

run() {
    o=$1; shift
    mpirun_t 2 "$TRAIN" "$@" >"$o" 2>&1 || { cat "$o"; fail "mpiexec -n 2 mpi_ckpt_train $*"; }
}
run "$TMP/ref" --dir "$TMP/ref.d" $ARGS
ref=$(sed -n 's/^final step=20 state=//p' "$TMP/ref")
[ -n "$ref" ] || { cat "$TMP/ref"; fail "no final state in the reference run"; }

now() { date +%s.%N; }
# hung RC T0 T1: the run was ended by mpirun_t's timeout (124, or 137 after
# its KILL). Open MPI's mpiexec itself exits 137 when a rank dies of SIGKILL,
# so 137 alone does not say it: the run must also have lasted the timeout.
hung() {
    [ "$1" -eq 124 ] && return 0
    [ "$1" -eq 137 ] && awk -v a="$2" -v b="$3" -v t="$TEST_TIMEOUT" 'BEGIN { exit !(b - a >= t) }'
}
# no_ranks_left: within 10 s of the job's end no process trains in $d
no_ranks_left() {
    i=0
    while [ -n "$(alive "$d")" ]; do
        i=$((i + 1))
        if [ $i -ge 100 ]; then
            left=$(alive "$d"); ps -o pid,stat,args -p "$(echo $left | tr ' ' ,)"
            kill -9 $left 2>/dev/null; fail "$name: ranks still alive 10 s after the job ended: $left"
        fi
        sleep 0.1
    done
}
# alive DIR: the pids of live processes training in DIR (zombies are dead)
alive() {
    ps -eo pid=,stat=,args= | awk -v t="$TRAIN" -v d="$1" '$2 !~ /^Z/ && index($0 " ", t " --dir " d " ") { print $1 }'
}

# die CASE NP READ: the restart with rank 0 killed at its READ-th H5Dread
die() {
    name=$1 np=$2 at=$3 d="$TMP/$1.d" out="$TMP/$1.out"
    run "$TMP/first" --dir "$d" $ARGS --stop-at 10
    sums "$d" >"$TMP/before"
    wrap="env LD_PRELOAD=$TMP/die.so" flags=$MPIEXEC_FLAGS
    if [ "$name" != "${name#outlived}" ]; then
        printf '%s\n' 'LD_PRELOAD="$DIE_SO" "$@"; r=$?; echo "rank ${PMI_RANK:-?}: exit $r" >&2; exit $r' \
            >"$TMP/outlive.sh"
        wrap="sh $TMP/outlive.sh" flags="$MPIEXEC_FLAGS -disable-auto-cleanup"
    fi
    for try in 1 2 3; do
        t0=$(now)
        (
            export DIE_SO="$TMP/die.so" DDPC_TEST_DIE_AT_READ=$at DDPC_TIMEOUT=$T DDPC_CKPT_CHUNK_MB=0.001
            # shellcheck disable=SC2034 # both read by mpirun_t (lib.sh)
            MPIEXEC_FLAGS=$flags DDPC_TEST_WRAP=$wrap
            mpirun_t "$np" "$TRAIN" --dir "$d" $ARGS
        ) >"$out" 2>&1
        rc=$? t1=$(now)
        no_ranks_left
        # with -disable-auto-cleanup hydra's proxy sometimes fails itself
        # forwarding a PMI answer to the dead rank 0 and ends the job before
        # anyone times out (about 1 run in 10 here): that run says nothing.
        # It says so in one of two ways: an assertion, or a write error on
        # the closed socket ("unable to forward PMI response")
        grep -Eq 'assert \(!closed\) failed|unable to forward PMI response' "$out" && [ $try -lt 3 ] || break
        echo "note: $name: hydra's proxy failed on rank 0's closed PMI socket; again"
    done
    [ $rc -ne 0 ] || { cat "$out"; fail "$name: the job exited 0"; }
    hung "$rc" "$t0" "$t1" && { cat "$out"; fail "$name: the job hung until the test's timeout"; }
    died=$(sed -n 's/^die_in_read: rank 0 (pid \([0-9]*\)) SIGKILLs itself at H5Dread #.* at \([0-9.]*\)$/\1 \2/p' "$out")
    [ -n "$died" ] || { cat "$out"; fail "$name: rank 0 never reached its read #$at"; }
    pid0=${died% *} dt=$(echo "$t1 ${died#* }" | awk '{ printf "%.2f", $1 - $2 }')
    ! grep -q -E '^(resumed|saved|final) ' "$out" || { cat "$out"; fail "$name: a rank went on training"; }
    sums "$d" >"$TMP/after"
    cmp -s "$TMP/before" "$TMP/after" || { diff "$TMP/before" "$TMP/after"; fail "$name: the checkpoint files changed"; }
    run "$TMP/again" --dir "$d" $ARGS
    grep -q "^resumed step=10 " "$TMP/again" || { cat "$TMP/again"; fail "$name: did not resume from step 10"; }
    grep -q "^final step=20 state=$ref$" "$TMP/again" || { cat "$TMP/again"; fail "$name: the resumed run ends elsewhere than $ref"; }
    echo "ok: $name: $np ranks, rank 0 killed at its read #$at: exit $rc ${dt}s after its death; no rank left; files intact; resumed from step 10 to $ref"
}

for c in "killed-2 2 1" "killed-4 4 3"; do
    # shellcheck disable=SC2086
    die $c
    awk -v t="$dt" 'BEGIN { exit !(t < 5) }' || { cat "$out"; fail "$name: ${dt}s to the end (goal: 5 s)"; }
    if [ "$DDPC_MPI_FLAVOR" = mpich ]; then
        grep -q "BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES" "$out" && grep -q "PID $pid0 RUNNING AT" "$out" ||
            { cat "$out"; fail "$name: hydra did not name rank 0's pid $pid0"; }
    fi
done

if [ "$DDPC_MPI_FLAVOR" != mpich ]; then
    echo "SKIP part: the others outliving rank 0 (hydra's -disable-auto-cleanup) under $DDPC_MPI_FLAVOR"
    exit 0
fi
for c in "outlived-2 2 1" "outlived-4 4 3"; do
    # shellcheck disable=SC2086
    die $c
    awk -v t="$dt" -v T=$T 'BEGIN { exit !(t < T + 5) }' || { cat "$out"; fail "$name: ${dt}s to the end (goal: T + 5 = $((T + 5)) s)"; }
    # in the broadcast of a window (its status or its floats), or still in
    # the head's (MPICH's broadcast of a large message needs the root after
    # the root has returned)
    pat="ckpt: (broadcasting the checkpoint|load): comm: broadcast #[0-9]+ \\([0-9]+ x [a-z0-9]+, root 0\\) did not complete within ${T}s: .*rank 0, which keeps the ranks' progress, is gone: its side channel closed [0-9.]+s ago"
    grep -Eq "^mpi_ckpt_train: ddpc_ckpt_load: ddpc\\[rank [1-3]/$np [^]]*\\] $pat" "$out" ||
        { cat "$out"; fail "$name: no survivor's message naming the broadcast and rank 0 gone"; }
    echo "   $(grep -E -m1 -o "ddpc\[rank [1-3]/$np.*did not complete within ${T}s" "$out"): ... $(grep -E -m1 -o "rank 0, which keeps.*" "$out")"
done

# The trainer, where the others outlive rank 0: its ranks that remain end the
# job with the load's timeout (they used to finalize, which waited for the
# broadcast forever, and said nothing: rank 0 speaks for a failed load)
need_fmnist
TRAINER="$top_builddir/trainer"
d=$TMP/trainer.d out=$TMP/trainer.out
TOPTS="--data $DATA --threads 1 --model linear --batch-size 64 --max-steps 10 --ckpt-every 5 --ckpt-dir $d --quiet"
mpirun_t 2 "$TRAINER" $TOPTS >"$TMP/tfirst" 2>&1 || { cat "$TMP/tfirst"; fail "trainer: the first run"; }
sums "$d" >"$TMP/before"
printf '%s\n' 'LD_PRELOAD="$DIE_SO" "$@"; r=$?; echo "rank ${PMI_RANK:-?}: exit $r" >&2; exit $r' >"$TMP/outlive.sh"
for try in 1 2 3; do
    t0=$(now)
    (
        export DIE_SO="$TMP/die.so" DDPC_TEST_DIE_AT_READ=1 DDPC_TIMEOUT=$T DDPC_CKPT_CHUNK_MB=0.001
        # shellcheck disable=SC2034 # both read by mpirun_t (lib.sh)
        MPIEXEC_FLAGS="$MPIEXEC_FLAGS -disable-auto-cleanup" DDPC_TEST_WRAP="sh $TMP/outlive.sh"
        mpirun_t 2 "$TRAINER" $TOPTS --max-steps 20
    ) >"$out" 2>&1
    rc=$? t1=$(now)
    grep -q 'assert (!closed) failed' "$out" && [ $try -lt 3 ] || break
    echo "note: trainer: hydra's proxy failed on rank 0's closed PMI socket; again"
done
died=$(sed -n 's/^die_in_read: rank 0 (pid [0-9]*) SIGKILLs itself at H5Dread #.* at \([0-9.]*\)$/\1/p' "$out")
[ -n "$died" ] || { cat "$out"; fail "trainer: rank 0 never reached its first read"; }
dt=$(echo "$t1 $died" | awk '{ printf "%.2f", $1 - $2 }')
[ $rc -ne 0 ] && ! hung "$rc" "$t0" "$t1" || { cat "$out"; fail "trainer: exit $rc (0: trained on; or hung until the timeout)"; }
awk -v t="$dt" -v T=$T 'BEGIN { exit !(t < T + 5) }' || { cat "$out"; fail "trainer: ${dt}s to the end (goal: T + 5 s)"; }
grep -Eq 'ddpc\[rank 1/2 [^]]*\] trainer: resume: .*did not complete within [0-9]+s.*rank 0, which keeps the ranks. progress, is gone' "$out" ||
    { cat "$out"; fail "trainer: rank 1 did not say that the load timed out with rank 0 gone"; }
sums "$d" >"$TMP/after"
cmp -s "$TMP/before" "$TMP/after" || { diff "$TMP/before" "$TMP/after"; fail "trainer: the checkpoint files changed"; }
echo "ok: trainer, others outlive rank 0: exit $rc ${dt}s after its death, rank 1 says the load timed out and rank 0 is gone; files intact"
