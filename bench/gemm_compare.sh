#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# gemm_compare.sh -- build bench/gemm_bench.c against every CBLAS (and oneDNN)
# that Debian installed here, run them side by side single-threaded, and print
# a table plus a last line of key=value ratios over the reference choice.
#
# Each binary is linked against the library's own .so path with an rpath to
# its directory, so update-alternatives (which picks one libblas.so.3 system-
# wide) does not decide what is measured; gemm_bench prints which file really
# served cblas_sgemm, and this script refuses a candidate whose sgemm came
# from anywhere else.
#
# Environment knobs:
#   ROUNDS=3        whole passes over all candidates (order rotated each pass)
#   REPS=7          timed repetitions per shape inside one pass (median kept)
#   MIN_MS=20       minimum length of one repetition
#   BATCHES=64,128,256
#   REF=openblas-pthread   candidate the ratios are relative to
#   METRIC=cpu      cpu: GFLOP/s per CPU-second of the process (robust when the
#                   2 shared cores are busy: preempted time does not count,
#                   extra library threads do); wall: GFLOP/s per wall second
#   ONLY="a b"      run only these candidate labels
#   PIN=auto|no|N   taskset core (auto: last core) -- one rank per core
#   LIBDIR=/usr/lib/x86_64-linux-gnu   CC=cc   KEEP=1 (keep build/log dir)
# Exit status: 0, or 1 if any candidate failed its correctness check.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src="$here/gemm_bench.c"
CC=${CC:-cc}
LIBDIR=${LIBDIR:-/usr/lib/x86_64-linux-gnu}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-7}
MIN_MS=${MIN_MS:-20}
BATCHES=${BATCHES:-64,128,256}
REF=${REF:-openblas-pthread}
ONLY=${ONLY:-}
PIN=${PIN:-auto}
METRIC=${METRIC:-cpu}
case $METRIC in cpu | wall) ;; *) echo "METRIC must be cpu or wall" >&2; exit 2 ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/gemm_compare.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "# work dir: $work"; else trap 'rm -rf "$work"' EXIT; fi

# label|library file ("dnnl" = -ldnnl)|extra environment|extra gemm_bench args
# OpenBLAS ships one DYNAMIC_ARCH build per threading flavour; OPENBLAS_CORETYPE
# forces a kernel set. BLIS_ARCH_TYPE takes BLIS 0.9's numeric arch id
# (0=skx 3=haswell 6=zen3). openblas-pt-nothrcap leaves the thread count to
# OPENBLAS_NUM_THREADS=2 (-T 0: no openblas_set_num_threads(1)) on the one
# pinned core, i.e. a rank that forgot to cap its BLAS threads.
cands="
openblas-pthread|openblas-pthread/libopenblas.so.0|
openblas-openmp|openblas-openmp/libopenblas.so.0|
openblas-serial|openblas-serial/libopenblas.so.0|
openblas@SkylakeX|openblas-pthread/libopenblas.so.0|OPENBLAS_CORETYPE=SkylakeX
openblas@Haswell|openblas-pthread/libopenblas.so.0|OPENBLAS_CORETYPE=Haswell
openblas@Zen|openblas-pthread/libopenblas.so.0|OPENBLAS_CORETYPE=Zen
openblas@Sandybridge|openblas-pthread/libopenblas.so.0|OPENBLAS_CORETYPE=Sandybridge
openblas-pt-nothrcap|openblas-pthread/libopenblas.so.0|OPENBLAS_NUM_THREADS=2|-T 0
blis-pthread|blis-pthread/libblis.so.4|
blis-openmp|blis-openmp/libblis.so.4|
blis-serial|blis-serial/libblis.so.4|
blis@skx|blis-pthread/libblis.so.4|BLIS_ARCH_TYPE=0
dnnl|dnnl|
atlas|atlas/libblas.so.3|
netlib|blas/libblas.so.3|
"

pin=""
if [ "$PIN" != no ] && command -v taskset >/dev/null 2>&1; then
  if [ "$PIN" = auto ]; then pin="taskset -c $(($(nproc) - 1))"; else pin="taskset -c $PIN"; fi
fi

echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') | $(nproc) cpus | pin: ${pin:-none}"
echo "# rounds=$ROUNDS reps=$REPS min_ms=$MIN_MS batches=$BATCHES ref=$REF metric=$METRIC"

# ---------------------------------------------------------------- build
echo "$cands" | while IFS='|' read -r label lib env args; do
  [ -n "$label" ] || continue
  if [ -n "$ONLY" ]; then case " $ONLY " in *" $label "*) ;; *) continue ;; esac; fi
  if [ "$lib" = dnnl ]; then
    [ -e "$LIBDIR/libdnnl.so" ] || { echo "# skip $label: libdnnl-dev not installed"; continue; }
    link="-DGB_DNNL -ldnnl"
  else
    [ -e "$LIBDIR/$lib" ] || { echo "# skip $label: $LIBDIR/$lib missing"; continue; }
    link="$LIBDIR/$lib -Wl,-rpath,$(dirname "$LIBDIR/$lib")"
  fi
  # shellcheck disable=SC2086
  if $CC -O2 -o "$work/gb_$label" "$src" $link -lm -ldl 2>"$work/cc_$label.log"; then
    printf '%s|%s|%s|%s\n' "$label" "$lib" "$env" "$args" >>"$work/built"
  else
    echo "# skip $label: build failed ($(head -1 "$work/cc_$label.log"))"
  fi
done
[ -s "$work/built" ] || { echo "no candidate could be built" >&2; exit 1; }
n=$(wc -l <"$work/built")

# ---------------------------------------------------------------- run
fail=0
r=1
while [ "$r" -le "$ROUNDS" ]; do
  # rotate the order each round so slow drifts of the shared machine spread out
  k=$(( (r - 1) % n ))
  { tail -n +$((k + 1)) "$work/built"; head -n "$k" "$work/built"; } >"$work/order"
  while IFS='|' read -r label lib env args; do
    out="$work/out_${label}_$r"
    # shellcheck disable=SC2086
    if ! env -u OPENBLAS_CORETYPE -u BLIS_ARCH_TYPE -u GOTO_NUM_THREADS \
        OPENBLAS_NUM_THREADS=1 BLIS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
        OMP_PROC_BIND=false $env $pin "$work/gb_$label" -q -l "$label" -r "$REPS" \
        -t "$MIN_MS" -b "$BATCHES" $args >"$out" 2>&1; then
      echo "# FAIL $label round $r: $(grep -m1 FAIL "$out" || tail -1 "$out")"
      fail=1
    fi
    if [ "$lib" != dnnl ] && ! grep -q "^# sgemm_from=.*$(dirname "$LIBDIR/$lib")/" "$out"; then
      echo "# FAIL $label: cblas_sgemm did not come from $LIBDIR/$lib: $(grep sgemm_from "$out")"
      fail=1
    fi
  done <"$work/order"
  echo "# round $r/$ROUNDS done"
  r=$((r + 1))
done

# ---------------------------------------------------------------- report
# kernel each candidate ended up with (from round 1)
while IFS='|' read -r label lib env args; do
  o="$work/out_${label}_1"
  kern=$(sed -n 's/^# openblas_corename=//p; s/^# blis_arch_id=.* blis_arch=//p; s/^# dnnl_effective_isa=.*(\(.*\))/\1/p' "$o" | head -1)
  printf '%s %s\n' "$label" "${kern:--}" >>"$work/kernels"
done <"$work/built"

cat "$work"/out_* | awk -v ROUNDS="$ROUNDS" -v ref="$REF" -v metric="$METRIC" -v kfile="$work/kernels" -v bfile="$work/built" '
function med(s,   a, m, i, j, t) {          # median of space-separated numbers
  m = split(s, a, " ")
  for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
  return m % 2 ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2
}
function ab(s) {                               # short column name
  gsub(/openblas/, "ob", s); gsub(/-pthread/, "-pt", s); gsub(/-openmp/, "-omp", s); gsub(/-serial/, "-ser", s)
  return s
}
function mn(s,   a, m, i, x) { m = split(s, a, " "); x = a[1]; for (i = 2; i <= m; i++) if (a[i] < x) x = a[i]; return x }
function mx(s,   a, m, i, x) { m = split(s, a, " "); x = a[1]; for (i = 2; i <= m; i++) if (a[i] > x) x = a[i]; return x }
BEGIN {
  while ((getline l < kfile) > 0) { split(l, f, " "); kern[f[1]] = f[2] }
  while ((getline l < bfile) > 0) { split(l, f, "|"); order[++nc] = f[1]; envs[f[1]] = f[3] (f[4] != "" ? " " f[4] : "") }
  other = metric == "cpu" ? "wall" : "cpu"
  sk = metric == "cpu" ? "step_gflops_cpu" : "step_gflops"; ok_ = metric == "cpu" ? "step_gflops" : "step_gflops_cpu"
  gk = metric == "cpu" ? "geomean_cpu" : "geomean"
  col = metric == "cpu" ? 11 : 8          # R-line column of the per-shape median
}
/^S / {
  lab = $2
  for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
  step[lab] = step[lab] " " v[sk]; ostep[lab] = ostep[lab] " " v[ok_]; geo[lab] = geo[lab] " " v[gk]
  cw[lab] = cw[lab] " " v["cpu_wall"]; sb = v["step_batch"]; fails[lab] += v["fails"]
}
/^R / {   # per-shape medians across rounds, for the step batch
  key = $3 " " $4 " " $5 "x" $6 "x" $7; shp[$2, key] = shp[$2, key] " " $col
  if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
}
END {
  printf "\nGFLOP/s by %s time, medians over %s rounds\n", metric, ROUNDS
  printf "%-20s %-16s %8s %15s %8s %8s %8s %5s %s\n", "candidate", "kernel", "step", "(round min..max)", "step_" other, "geomean", "cpu/wall", "check", "env"
  for (c = 1; c <= nc; c++) {
    l = order[c]; if (!(l in step)) continue
    ms[l] = med(step[l])
    printf "%-20s %-16s %8.2f %7.2f..%-7.2f %8.2f %8.2f %8.2f %5s %s\n", l, kern[l], ms[l], mn(step[l]), mx(step[l]), med(ostep[l]), med(geo[l]), med(cw[l]), fails[l] ? "FAIL" : "ok", envs[l]
  }
  printf "\nstep: total flops / total median time of one training step (batch %d: fwd+bwd_d+bwd_w of 784-1024-1024-10)\n", sb
  printf "geomean: geometric mean of per-shape median GF/s over all %d shapes (batches as given)\n", nk
  printf "cpu/wall: ~1 = ran undisturbed on one core; <1 = preempted by other load; >1 = extra threads\n"
  printf "\nper-shape %s GF/s, median across rounds:\n%-6s %-22s", metric, "op", "MxNxK"
  for (c = 1; c <= nc; c++) printf " %10.10s", ab(order[c])
  printf "\n"
  for (k = 1; k <= nk; k++) {
    split(keys[k], p, " "); printf "%-6s %-22s", p[1], p[2] " " p[3]
    for (c = 1; c <= nc; c++) printf " %10.2f", ((order[c], keys[k]) in shp) ? med(shp[order[c], keys[k]]) : 0
    printf "\n"
  }
  if (!(ref in ms)) { ref = order[1] }
  line = "metric=" metric " ref=" ref
  for (c = 1; c <= nc; c++) { l = order[c]; if (l in ms) line = line sprintf(" %s=%.3f", l, ms[l] / ms[ref]) }
  print ""; print line
}'
exit "$fail"
