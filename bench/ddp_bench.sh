#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# ddp_bench.sh -- the DDP engine's benchmarks of issue 3 in one go (`make bench`):
#  1. allreduce: one-bucket engine step against raw MPI_Allreduce, per size,
#     under mpiexec on this machine (shared memory);
#  2. mpi: raw MPI_Allreduce with MPI at THREAD_SINGLE and THREAD_MULTIPLE;
#  3. overlap: the synthetic MLP step under mpiexec, with compute on the CPU
#     and off it (-z 1: each sgemm replaced by a sleep as long, as on a GPU);
#  4. the same between the two nodes of the Slurm testbed
#     (tests/slurm/testbed.sh, one network namespace per node) over TCP
#     (UCX_TLS=tcp,self), with the nodes' veth links shaped by tc.
# Every run is repeated ROUNDS times; each run reports medians of its own
# repetitions and this script reports the median over runs (and their range).
# Prints tables, then a last line of key=value ratios.
#
# Knobs (environment):
#   ROUNDS=3          runs of each measurement
#   NP="2"            rank counts of the local allreduce runs ("2 4")
#   SIZES=1,2,4,8,16,32,64   MiB;  REPS=11  WARMUPS=2  REP_MS=30
#   OV_ARGS="-L 16 -H 1024 -B 64 -b 4"     local MLP (-b: bucket cap, MiB)
#   NET=1             the testbed run (0: skip); needs root, Slurm, tc
#   NET_ARGS="-L 8 -H 1024 -B 512 -b 4"    MLP between the nodes
#   RATE=1gbit        tc tbf rate of each node's link;  NET_REPS=7
#   QUIET_IDLE=80 QUIET_WAIT=120   before each run, wait up to QUIET_WAIT s for
#                     the CPUs to be QUIET_IDLE % idle (the machine is shared)
#   MPIEXEC_BIND="-bind-to core" (MPICH; --bind-to core for Open MPI; empty: unbound)
#   BIN=bench/ddp_bench (relative to the build dir)   LOG=ddp_bench.log
#   DDPC_TESTBED_PORT=16957 (a port of its own: tests use 16917)
#   SUMMARY_ONLY=1    no runs: print the summary of an existing LOG
# Exit status: 0, or 1 when a run failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/.." && pwd)}
builddir=${top_builddir:-$(pwd)}
BIN=${BIN:-$builddir/bench/ddp_bench}
case $BIN in /*) ;; *) BIN=$(pwd)/$BIN ;; esac
ROUNDS=${ROUNDS:-3}
NP=${NP:-2}
SIZES=${SIZES:-1,2,4,8,16,32,64}
REPS=${REPS:-11}
WARMUPS=${WARMUPS:-2}
REP_MS=${REP_MS:-30}
OV_ARGS=${OV_ARGS:--L 16 -H 1024 -B 64 -b 4}
NET=${NET:-1}
NET_ARGS=${NET_ARGS:--L 8 -H 1024 -B 512 -b 4}
NET_REPS=${NET_REPS:-7}
RATE=${RATE:-1gbit}
QUIET_IDLE=${QUIET_IDLE:-80}
QUIET_WAIT=${QUIET_WAIT:-120}
LOG=${LOG:-$builddir/ddp_bench.log}
export DDPC_TESTBED_PORT=${DDPC_TESTBED_PORT:-16957}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 BLIS_NUM_THREADS=1 # one core per rank
MPIEXEC=${MPIEXEC:-}
[ -n "$MPIEXEC" ] || [ ! -f "$builddir/tests/testenv.sh" ] || . "$builddir/tests/testenv.sh"
MPIEXEC=${MPIEXEC:-mpiexec}
MPIEXEC_FLAGS=${MPIEXEC_FLAGS:-}
SRUN_MPI=pmi2 # Debian's MPICH has no PMIx client; Open MPI has
[ "${DDPC_MPI_FLAVOR:-mpich}" = openmpi ] && SRUN_MPI=pmix
# one core per rank, as srun --cpu-bind=cores would: unbound, the scheduler
# now and then puts both ranks' progress threads on one core, and a run's
# medians at 32-64 MiB swing by 2x between runs
if [ -z "${MPIEXEC_BIND+set}" ]; then
    MPIEXEC_BIND="-bind-to core"
    [ "${DDPC_MPI_FLAVOR:-mpich}" = openmpi ] && MPIEXEC_BIND="--bind-to core"
fi

[ -x "$BIN" ] || { echo "ddp_bench.sh: $BIN not built (make bench)" >&2; exit 1; }
failed=0
SUMMARY_ONLY=${SUMMARY_ONLY:-0}
[ "$SUMMARY_ONLY" = 1 ] || : > "$LOG"
say() { echo "ddp_bench.sh: $*" >&2; }

# shellcheck source=bench/quiet.sh
. "$here/quiet.sh" # idle_pct, wait_quiet

# run TAG CMD...: one measurement; its R lines go to the log tagged with TAG
# and the idle % before it. A run that printed "# done" and then timed out
# counts (MPICH+UCX over TCP sometimes hangs in MPI_Finalize).
run() {
    local tag=$1 out rc
    shift
    wait_quiet
    say "$tag (idle ${idle}%): $*"
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] && ! { [ $rc -eq 124 ] && echo "$out" | grep -q '^# done'; }; then
        say "FAILED (exit $rc): $*"
        echo "$out" | tail -n 20 >&2
        failed=1
        return 1
    fi
    [ $rc -eq 124 ] && say "(timed out in MPI_Finalize after its results: counted)"
    echo "$out" | grep '^#' | sed "s/^/$tag /" >> "$LOG"
    echo "$out" | grep '^R ' | sed "s/^R /R $tag idle=$idle /" >> "$LOG"
}

# shellcheck disable=SC2086
mpirun_t() { timeout -k 10 600 env -u SLURM_CONF $MPIEXEC $MPIEXEC_FLAGS $MPIEXEC_BIND -n "$@"; }

# ---------------------------------------------------------------- local runs
[ "$SUMMARY_ONLY" = 1 ] && ROUNDS=0 NET=0
for r in $(seq "$ROUNDS"); do
    for np in $NP; do
        run "local.allreduce.np$np.$r" mpirun_t "$np" "$BIN" allreduce -s "$SIZES" -r "$REPS" \
            -w "$WARMUPS" -t "$REP_MS"
    done
    for lv in single multiple; do
        run "local.mpi.$lv.$r" mpirun_t 2 "$BIN" mpi "$lv" -s "$SIZES" -r "$REPS" \
            -w "$WARMUPS" -t "$REP_MS"
    done
    # shellcheck disable=SC2086
    run "local.overlap.$r" mpirun_t 2 "$BIN" overlap $OV_ARGS -r "$REPS" -w "$WARMUPS"
    # shellcheck disable=SC2086
    run "localoff.overlap.$r" mpirun_t 2 "$BIN" overlap $OV_ARGS -z 1 -r "$REPS" -w "$WARMUPS"
done

# ---------------------------------------------------------------- network runs
if [ "$NET" = 1 ]; then
    # shellcheck source=../tests/slurm/slurm_env.sh
    . "$srcdir/tests/slurm/slurm_env.sh"
    nsp=ddpc$DDPC_TESTBED_PORT
    unshape() {
        local h
        for h in "${nsp}h1" "${nsp}h2"; do tc qdisc del dev "$h" root 2>/dev/null; done
        return 0
    }
    trap unshape EXIT  # testbed_up chains its stop after this
    testbed_up
    rc=$?
    if [ $rc -ne 0 ]; then
        say "testbed not available (exit $rc): network runs skipped"
    elif [ "$(cat "${DDPC_TESTBED_STATE:-${TMPDIR:-/tmp}/ddpc-slurm-$DDPC_TESTBED_PORT}/mode")" != netns ] ||
        ! command -v tc >/dev/null; then
        say "testbed not in netns mode or no tc: network runs skipped"
    else
        export UCX_TLS=tcp,self # across the veths, not through shared memory
        srun_n() { DDPC_SRUN_TIMEOUT=600 srun_t -N2 -n2 --mpi=$SRUN_MPI "$@"; }
        # the link before shaping, then shaped
        run "net.unshaped.1" srun_n "$BIN" allreduce -s 4,32 -r 5 -w 1 -t 0
        for h in "${nsp}h1" "${nsp}h2"; do
            tc qdisc replace dev "$h" root tbf rate "$RATE" burst 1mb latency 50ms ||
                { say "tc on $h failed"; failed=1; }
        done
        run "net.shaped.1" srun_n "$BIN" allreduce -s 4,32 -r 5 -w 1 -t 0
        for r in $(seq "$ROUNDS"); do
            # shellcheck disable=SC2086
            run "net.overlap.$r" srun_n "$BIN" overlap $NET_ARGS -r "$NET_REPS" -w 1
            # shellcheck disable=SC2086
            run "netoff.overlap.$r" srun_n "$BIN" overlap $NET_ARGS -z 1 -r "$NET_REPS" -w 1
        done
        for h in "${nsp}h1" "${nsp}h2"; do
            echo "# tc $h: $(tc -s qdisc show dev "$h" | tr '\n' ' ' | tr -s ' ')" >> "$LOG"
        done
        unset UCX_TLS
    fi
fi

# ---------------------------------------------------------------- summary
awk -v rate="$RATE" '
function med(s,   a, n, i, j, t) {   # median of space-separated numbers
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n ? (n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2) : 0
}
function lo(s,   a, n, i, m) { n = split(s, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] + 0 < m + 0) m = a[i]; return m }
function hi(s,   a, n, i, m) { n = split(s, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] + 0 > m + 0) m = a[i]; return m }
function add(k, v) { vals[k] = (k in vals) ? vals[k] " " v : v }
function addlink(w, b,   k) { k = w SUBSEP b; if (!(k in linkseen)) { linkseen[k] = 1; links[++nlinks] = k }; add("link" SUBSEP k, kv["raw_busbw"]) }
/^R / {
    tag = $2; split(tag, tp, "."); split("", kv)
    for (i = 3; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
    add("idle", kv["idle"])
    if ($4 == "allreduce" && tp[1] == "local") {
        k = kv["np"] SUBSEP kv["bytes"]; nps[kv["np"]] = 1; sizes[kv["bytes"]] = 1
        nvs = split("raw engine rawdiv thr_sum thr_avg", vs, " ")
        for (i = 1; i <= nvs; i++) add("ar" SUBSEP k SUBSEP vs[i], kv[vs[i] "_us"])
        add("ar" SUBSEP k SUBSEP "ratio", kv["ratio"])
        add("ar" SUBSEP k SUBSEP "divcost", kv["rawdiv_us"] / kv["raw_us"])
        add("ar" SUBSEP k SUBSEP "handoff", kv["thr_sum_us"] / kv["raw_us"])
        add("ar" SUBSEP k SUBSEP "book", kv["engine_us"] / kv["thr_avg_us"])
        if ("fold_ratio" in kv) { add("ar" SUBSEP k SUBSEP "fold", kv["fold_ratio"]); add("ar" SUBSEP k SUBSEP "engstep", kv["engstep_ratio"]) }
    } else if ($4 == "mpi") {
        add("mpi" SUBSEP tp[3] SUBSEP kv["bytes"], kv["raw_us"])
    } else if ($4 == "allreduce" && tp[1] == "net") {
        addlink(tp[2], kv["bytes"])
    } else if ($4 == "link") {
        addlink(tp[1], kv["bytes"])
    } else if ($4 == "overlap_variant") {
        add("ov" SUBSEP tp[1] SUBSEP kv["name"], kv["step_ms"])
        add("ovb" SUBSEP tp[1] SUBSEP kv["name"], kv["blocked_ms"])
        add("ovc" SUBSEP tp[1] SUBSEP kv["name"], kv["cpu_ms"] - kv["main_cpu_ms"])
    } else if ($4 == "overlap") {
        add("ovr" SUBSEP tp[1] SUBSEP "speedup", kv["speedup"])
        add("ovr" SUBSEP tp[1] SUBSEP "hidden", kv["hidden"])
        add("ovr" SUBSEP tp[1] SUBSEP "hidden_nb", kv["hidden_nb"])
        add("ovr" SUBSEP tp[1] SUBSEP "hidden_nbtest", kv["hidden_nbtest"])
        add("ovr" SUBSEP tp[1] SUBSEP "tvn", kv["thread_vs_nb"])
        add("ovr" SUBSEP tp[1] SUBSEP "tvnt", kv["thread_vs_nbtest"])
        desc[tp[1]] = "L=" kv["L"] " H=" kv["H"] " B=" kv["B"] ", " sprintf("%.1f", kv["grad_bytes"] / 1048576) " MiB of gradients"
    }
}
/^local\.allreduce.*# ddp_bench/ && !mpiline { mpiline = $0; sub(/^[^#]*# ddp_bench allreduce: /, "", mpiline) }
END {
    net_done = ("ov" SUBSEP "net" SUBSEP "compute") in vals
    printf "\nddp_bench: medians over runs (range of the run medians); machine idle before runs: median %d%% (min %d%%)\n", med(vals["idle"]), lo(vals["idle"])
    if (mpiline != "") print "  " mpiline
    n = 0
    for (x in sizes) { sz[++n] = x + 0; for (j = n; j > 1 && sz[j-1] > sz[j]; j--) { t = sz[j]; sz[j] = sz[j-1]; sz[j-1] = t } }
    for (np in nps) {
        printf "\nall-reduce, %d ranks, one bucket: engine (grad_ready + wait, averages) vs raw MPI_Allreduce SUM (no division)\n", np
        printf "%8s %10s %10s %9s %9s %22s %8s %8s %8s\n", "MiB", "raw_us", "engine_us", "raw_busbw", "eng_busbw", "engine/raw (range)", "rawdiv", "thr_sum", "eng/avg"
        for (i = 1; i <= n; i++) {
            k = np SUBSEP sz[i]; if (!(("ar" SUBSEP k SUBSEP "raw") in vals)) continue
            bf = np > 1 ? 2 * (np - 1) / np : 1
            r = med(vals["ar" SUBSEP k SUBSEP "raw"]); e = med(vals["ar" SUBSEP k SUBSEP "engine"])
            q = vals["ar" SUBSEP k SUBSEP "ratio"]
            printf "%8.0f %10.0f %10.0f %9.2f %9.2f %8.3f (%.3f-%.3f) %8.3f %8.3f %8.3f\n", sz[i] / 1048576, r, e,
                sz[i] / r / 1e3 * bf, sz[i] / e / 1e3 * bf, med(q), lo(q), hi(q),
                med(vals["ar" SUBSEP k SUBSEP "divcost"]), med(vals["ar" SUBSEP k SUBSEP "handoff"]), med(vals["ar" SUBSEP k SUBSEP "book"])
            if (np == 2) { rmin = (rmin == "" || med(q) < rmin) ? med(q) : rmin; rall = rall " " med(q) }
            if (np == 2 && sz[i] >= 1048576) { # from 1 MiB: the range of the run medians
                rlo = (rlo == "" || lo(q) + 0 < rlo + 0) ? lo(q) : rlo; rhi = (rhi == "" || hi(q) + 0 > rhi + 0) ? hi(q) : rhi
                rmin1 = (rmin1 == "" || med(q) + 0 < rmin1 + 0) ? med(q) : rmin1
            }
        }
    }
    print "  busbw in GB/s = bytes/time * 2(n-1)/n; rawdiv = (raw + /N pass)/raw; thr_sum = ddpc_allreduce SUM through"
    print "  the progress thread / raw; eng/avg = engine step / ddpc_allreduce AVG (the reducer'"'"'s own cost)"
    for (np in nps) {
        hd = 0
        for (i = 1; i <= n; i++) {
            k = np SUBSEP sz[i]; if (!(("ar" SUBSEP k SUBSEP "fold") in vals)) continue
            if (!hd++) { printf "\nreduction + update, %d ranks: raw MPI_Allreduce + ddpc_optim_step over the engine'"'"'s (SGD, one pass), as a fraction of the time of\n", np; printf "%8s %28s %28s\n", "MiB", "engine folding 1/N (range)", "engine averaging (range)" }
            f = vals["ar" SUBSEP k SUBSEP "fold"]; e = vals["ar" SUBSEP k SUBSEP "engstep"]
            printf "%8.0f %12.3f (%.3f-%.3f) %12.3f (%.3f-%.3f)\n", sz[i] / 1048576, med(f), lo(f), hi(f), med(e), lo(e), hi(e)
        }
    }
    mt = ""
    for (i = 1; i <= n; i++) if (("mpi" SUBSEP "single" SUBSEP sz[i]) in vals && ("mpi" SUBSEP "multiple" SUBSEP sz[i]) in vals) {
        if (mt == "") { printf "\nraw MPI_Allreduce, 2 ranks, MPI_THREAD_SINGLE vs MPI_THREAD_MULTIPLE (separate runs)\n%8s %10s %12s %8s\n", "MiB", "single_us", "multiple_us", "mult/sgl" }
        s1 = med(vals["mpi" SUBSEP "single" SUBSEP sz[i]]); s2 = med(vals["mpi" SUBSEP "multiple" SUBSEP sz[i]])
        printf "%8.0f %10.0f %12.0f %8.3f\n", sz[i] / 1048576, s1, s2, s2 / s1; mt = mt " " s2 / s1
    }
    split("local localoff net netoff", where, " ")
    wdesc["local"] = "mpiexec -n 2, shared memory"
    wdesc["localoff"] = "mpiexec -n 2, shared memory, compute off the CPU (-z 1: sgemm -> sleep)"
    wdesc["net"] = "srun -N2 -n2, TCP over veth shaped to " rate
    wdesc["netoff"] = "srun -N2 -n2, TCP shaped to " rate ", compute off the CPU (-z 1: sgemm -> sleep)"
    for (w = 1; w <= 4; w++) {
        W = where[w]; if (!(("ov" SUBSEP W SUBSEP "compute") in vals)) continue
        printf "\noverlap, %s (%s)\n", wdesc[W], desc[W]
        printf "%10s %9s %20s %11s %14s\n", "variant", "step_ms", "(range of runs)", "blocked_ms", "other_cpu_ms"
        split("compute overlap nooverlap nb nbtest comm", vn, " ")
        for (i = 1; i <= 6; i++) {
            s = vals["ov" SUBSEP W SUBSEP vn[i]]
            printf "%10s %9.1f %9.1f-%-10.1f %11.1f %14.1f\n", vn[i], med(s), lo(s), hi(s), med(vals["ovb" SUBSEP W SUBSEP vn[i]]), med(vals["ovc" SUBSEP W SUBSEP vn[i]])
        }
        for (i = 1; i <= nlinks; i++) {
            split(links[i], lk, SUBSEP)
            if (lk[1] == W || (W == "net" && (lk[1] == "unshaped" || lk[1] == "shaped")))
                printf "  link %-9s all-reduce of %5.1f MiB: busbw %.3f GB/s (raw MPI_Allreduce)\n", lk[1], lk[2] / 1048576, med(vals["link" SUBSEP links[i]])
        }
        printf "  speedup T_nooverlap/T_overlap %.3f; hidden (T_no-T_ov)/(T_no-T_compute): thread %.3f, nb %.3f, nbtest %.3f; T_nb/T_overlap %.3f, T_nbtest/T_overlap %.3f\n",
            med(vals["ovr" SUBSEP W SUBSEP "speedup"]), med(vals["ovr" SUBSEP W SUBSEP "hidden"]), med(vals["ovr" SUBSEP W SUBSEP "hidden_nb"]),
            med(vals["ovr" SUBSEP W SUBSEP "hidden_nbtest"]), med(vals["ovr" SUBSEP W SUBSEP "tvn"]), med(vals["ovr" SUBSEP W SUBSEP "tvnt"])
    }
    print "  nb: MPI_Iallreduce per bucket from the main thread, MPI_Waitall after backward (no progress thread);"
    print "  nbtest: the same plus MPI_Testall after each layer; comm: the reduction alone; other_cpu_ms: CPU time"
    print "  of the process minus its main thread per step (the progress thread polling in MPI)"
    printf "\nallreduce_ratio_min=%.3f allreduce_ratio_median=%.3f mt_cost_median=%.3f", rmin, med(rall), med(mt)
    if (rmin1 != "")
        printf " allreduce_ratio_min_from_1mib=%.3f allreduce_ratio_range_from_1mib=%.3f-%.3f", rmin1, rlo, rhi
    printf " overlap_speedup_local=%.3f hidden_share_local=%.3f thread_vs_nonblocking_local=%.3f",
        med(vals["ovr" SUBSEP "local" SUBSEP "speedup"]), med(vals["ovr" SUBSEP "local" SUBSEP "hidden"]), med(vals["ovr" SUBSEP "local" SUBSEP "tvn"])
    if (("ovr" SUBSEP "localoff" SUBSEP "speedup") in vals)
        printf " overlap_speedup_offcpu_local=%.3f hidden_share_offcpu_local=%.3f thread_vs_nonblocking_offcpu_local=%.3f",
            med(vals["ovr" SUBSEP "localoff" SUBSEP "speedup"]), med(vals["ovr" SUBSEP "localoff" SUBSEP "hidden"]), med(vals["ovr" SUBSEP "localoff" SUBSEP "tvn"])
    if (net_done)
        printf " overlap_speedup_net=%.3f hidden_share_net=%.3f thread_vs_nonblocking=%.3f",
            med(vals["ovr" SUBSEP "net" SUBSEP "speedup"]), med(vals["ovr" SUBSEP "net" SUBSEP "hidden"]), med(vals["ovr" SUBSEP "net" SUBSEP "tvn"])
    if (net_done && ("ovr" SUBSEP "netoff" SUBSEP "speedup") in vals)
        printf " overlap_speedup_offcpu_net=%.3f hidden_share_offcpu_net=%.3f thread_vs_nonblocking_offcpu_net=%.3f",
            med(vals["ovr" SUBSEP "netoff" SUBSEP "speedup"]), med(vals["ovr" SUBSEP "netoff" SUBSEP "hidden"]), med(vals["ovr" SUBSEP "netoff" SUBSEP "tvn"])
    printf "\n"
}' "$LOG"
exit $failed
