#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# ucx_tail.sh: all-reduce tail latency on the Slurm testbed under several MPI
# transport settings (doc/guide.md, "MPI transport settings"). By hand, not a test:
#   DDPC_TESTBED_PORT=16941 bench/ucx_tail.sh [REPEATS [CALLS [MAX_FLOATS [INFLIGHT]]]]
# Each setting (SETTINGS, one per line: a label, then VAR=VALUE words for env;
# "-" for none) runs REPEATS times as srun -N2 -n4 --mpi=pmi2 allreduce_tail,
# interleaved (setting A, B, C, A, B, C, ...: the machine's load drifts).
# Prints one line per run: the label, allreduce_tail's summary, "hung" if srun
# was killed after DDPC_SRUN_TIMEOUT (default 120 s; after the summary: in
# MPI_Finalize), and the TCP segments retransmitted inside the nodes' network
# namespaces during the run (nstat TcpRetransSegs).
# Needs build/bench/allreduce_tail (make -C build bench/allreduce_tail).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
prog=${ALLREDUCE_TAIL:-$top/build/bench/allreduce_tail}
reps=${1:-3} calls=${2:-1000} maxf=${3:-65536} inflight=${4:-1}
[ -x "$prog" ] || { echo "ucx_tail: no $prog (see the header)" >&2; exit 2; }
: "${SETTINGS:=default -
sm,self UCX_TLS=sm,self
tcp-eth0 UCX_TLS=tcp,self UCX_NET_DEVICES=eth0}"
# shellcheck source=tests/slurm/slurm_env.sh
. "$top/tests/slurm/slurm_env.sh"
testbed_up || exit $?
ns_prefix=ddpc${DDPC_TESTBED_PORT:-16917}-
retrans() {  # TCP segments retransmitted, summed over the testbed's namespaces
    local ns sum=0 v
    for ns in $(ip netns list | awk -v p="^$ns_prefix" '$1 ~ p {print $1}'); do
        v=$(ip netns exec "$ns" nstat -az TcpRetransSegs 2>/dev/null | awk '/TcpRetransSegs/ {print $2}')
        sum=$((sum + ${v:-0}))
    done
    echo "$sum"
}
for ((r = 1; r <= reps; r++)); do
    while read -r label vars; do
        [ -n "$label" ] || continue
        [ "$vars" = - ] && vars=
        before=$(retrans)
        # shellcheck disable=SC2086  # vars are words
        out=$(env $vars timeout -k 10 "${DDPC_SRUN_TIMEOUT:-120}" srun -N2 -n4 --mpi=pmi2 \
                  "$prog" "$calls" "$maxf" "$inflight" 2>&1 </dev/null)
        rc=$?
        summary=$(grep '^calls=' <<<"$out")
        if [ $rc = 124 ] || [ $rc = 137 ]; then   # with a summary: hung in MPI_Finalize
            summary="${summary:+$summary }hung (killed after ${DDPC_SRUN_TIMEOUT:-120} s${summary:+, in MPI_Finalize})"
        fi
        [ -n "$summary" ] || summary="failed rc=$rc: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
        echo "$label run=$r $summary retrans=$(($(retrans) - before)) stalls=$(grep -c '^stall:' <<<"$out")"
    done <<<"$SETTINGS"
done
