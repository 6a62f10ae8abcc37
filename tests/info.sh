#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# info.sh: ddpc-info under the configured MPI launcher with 1, 2 and 4 ranks
# prints one correct line per rank, in rank order; --version names the build.
. "$(dirname "$0")/lib.sh"
INFO="$top_builddir/ddpc-info"
"$INFO" --version >"$TMP/v" || fail "ddpc-info --version"
grep -q "^ddpc-info (ddpc) $(cat "$top_srcdir/VERSION")" "$TMP/v" || { cat "$TMP/v"; fail "version line"; }
grep -q 'MPI: .*HDF5: .*CUDA: .*NCCL: .*BLAS: ' "$TMP/v" || { cat "$TMP/v"; fail "build info line"; }
grep -Eq '^(CUDA driver: .*NCCL: .*(GPU\(s\) visible|no usable GPU)|CUDA: not built in)' "$TMP/v" \
    || { cat "$TMP/v"; fail "run-time line of --version"; }
host=$(hostname -s)
for np in 1 2 4; do
    mpirun_t "$np" "$INFO" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/out" "$TMP/err"; fail "ddpc-info -n $np"; }
    n=$(wc -l <"$TMP/out")
    [ "$n" -eq "$np" ] || { cat "$TMP/out"; fail "expected $np lines, got $n"; }
    r=0
    while read -r line; do
        echo "$line" | grep -Eq "^rank=$r size=$np local_rank=$r local_size=$np node=0 host=$host source=(mpi-env|single|pmix) backend=mpi gpu=(none|unusable|[0-9][^ ]*)$" \
            || { cat "$TMP/out"; fail "line $r is wrong: $line"; }
        r=$((r + 1))
    done <"$TMP/out"
    echo "ok: $np ranks"; cat "$TMP/out"
done
