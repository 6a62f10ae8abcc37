#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# gpu-check.sh: build ddpc with nvcc on the GPU machine, run the GPU tests,
# the trainer and a quick benchmark in one go, each step under its own
# timeout and a budget for the whole run; not a benchmark harness of its own
# (bench/gpu_bench.py is) and not for machines with MPI installed (make check is).
#
# The GPU test machine has CUDA (nvcc, cuBLASLt), NCCL (the nvidia-nccl-cu13
# wheel), gcc and PyTorch, but no MPI, HDF5, Check or OpenBLAS, and no network:
#
#   sh scripts/gpu-check.sh --prepare   here (Debian 12, the archive reachable):
#       the .debs of MPICH, HDF5, OpenBLAS, Check, zlib, make and xz, plus every
#       library their ELF files need (found with ldd, libcurl's and libssl's
#       closure included; only glibc, libgcc_s and libstdc++ are left to the
#       machine), unpacked, trimmed (docs, Fortran, static libraries other than
#       Check's, UCX's InfiniBand modules), symlinks made relative, packed as
#       gpu-carry/prefix.tar.xz; gpu-carry/xz/ (an xz to unpack it with),
#       gpu-carry/fashion-mnist/, gpu-carry/MANIFEST.txt: 50 MiB in all
#       (prefix.tar.xz 20 MiB, 107 MiB unpacked; Fashion-MNIST 30 MiB).
#   then carry configure, Makefile.in, config.h.in, aclocal.m4, config/ and
#   gpu-carry/ with the device tool and run there:
#   sh scripts/gpu-check.sh            the default tier, within 6 minutes:
#       carry     unpack into a private prefix ($GPU_CHECK_WORK/root, never /),
#                 then ldd over every ELF file in it with LD_LIBRARY_PATH = the
#                 prefix only: any library not found (or a glibc too old) stops
#                 the run before configure, naming each
#       build     configure (--with-cuda-arch=90, the machine's nvcc and NCCL) + make
#       gpu_model gpu_optim gpu_ddp gpu_comm gpu_graph gpu_boot   make check of each
#       trainer-gpu   tests/trainer-gpu.sh (TRAINER_GPU_NP=1: one GPU)
#       trainer   one epoch fp32/bf16/fp16 on the GPU against the cpu trainer's
#                 accuracy (within 0.5 point, 1 for bf16/fp16); bf16 stopped at 200 and resumed =
#                 uninterrupted, bit for bit; --cuda-graph on = eager; fp16 with
#                 --grad-accum 2 --grad-dtype bf16; 2 ranks sharing the GPU (mpi-staged)
#       bench     bench/gpu_bench.py --quick (no torch.compile)
#   sh scripts/gpu-check.sh --long     a second call: reuses the build if this
#       machine still has it (else builds again), then
#       busbw     all-reduce busbw 1-256 MiB: nccl (1 rank), mpi-staged (2, 4 ranks)
#       bench     bench/gpu_bench.py in full (torch.compile, CUDA graphs, 3 repeats)
#       hostid    experiment: 2 NCCL ranks on one GPU with distinct NCCL_HOSTIDs,
#                 then the watchdog with a rank that never joins. Never depended on
#       cpu-tests comm.mpi ddp.mpi ckpt.mpi: the CPU path on that machine
# Each step prints PASS/FAIL/SKIP and its time as it ends (a failure with its
# log's tail). Under $OUT (default ./gpu-check-out) exactly two files:
# summary.txt (summary-long.txt) and gpu-check-default.tar.gz
# (gpu-check-long.tar.gz) with every step's log, the trainer runs, the bench
# JSON, the carry's ldd report; both rewritten after each step, so a run cut
# short still returns what it did.
# Environment:
#   GPU_CHECK_BUDGET=S      seconds for the whole tier (default 330; --long 540);
#                           a step that would start with under 15 s left is skipped
#   GPU_CHECK_TIME_SCALE=K  every limit and the budget times K (slow machines)
#   GPU_CHECK_JOBS=N        make -jN (default: nproc)
#   GPU_CHECK_ONLY="a b"    run only these steps (carry and build always)
#   GPU_CHECK_EMULATE=1     build --with-cuda=emulate and run the GPU steps on
#                           the host emulation (DDPC_EMU_DEVICES=4): no GPU needed,
#                           its figures are never GPU figures; no bench/busbw/hostid
#   GPU_CHECK_TRAINER_ON_CPU=1  the trainer step with the cpu in place of the GPU
#   GPU_CHECK_CARRY_STRICT=1    a library found outside the prefix (other than
#                           glibc, libgcc_s, libstdc++) fails the carry step too
#                           (scripts/gpu-rehearse.sh: proves the carry complete)
#   GPU_CHECK_WORK=DIR      work directory (default /tmp/ddpc-gpu-check)
# Without a GPU (and without GPU_CHECK_EMULATE) the same script builds with
# nvcc, the GPU tests skip (77) and the trainer, bench, busbw and hostid steps
# say SKIP. scripts/gpu-rehearse.sh runs it in a bare Debian root.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
SELF=$here/scripts/gpu-check.sh
CARRY=$here/gpu-carry
# what the machine must have itself: glibc, the compiler's runtime
export BASE_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libnss_[a-z]*|libBrokenLocale|libgcc_s|libstdc\+\+)\.so'
# the carry's seeds; --prepare adds what their ELF files need (ldd)
DEBS="libmpich12 libmpich-dev mpich libhwloc15 libucx0 libnuma1 libudev1 libslurm38
 libhdf5-103-1 libhdf5-dev libsz2 libaec0 zlib1g zlib1g-dev
 libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
 check libsubunit0 libsubunit-dev make xz-utils liblzma5"

# ------------------------------------------------------------------ helpers
is_elf() { [ -f "$1" ] && [ "$(od -An -c -N4 "$1" 2>/dev/null | tr -d ' ')" = 177ELF ]; }

# ldd_report ROOT LDLP REPORT: ldd over every ELF file under ROOT with
# LD_LIBRARY_PATH=LDLP only; the full output in REPORT. Prints "missing: LIB
# (needed by FILE)" for each library not found or of too old a version,
# "outside: LIB (PATH)" for each found outside ROOT that is not BASE_LIBS,
# "symlink: ..." for each dangling or absolute link. Returns 1 if anything is
# missing or dangling.
ldd_report() {
    root=$1 ldlp=$2 report=$3
    : >"$report"
    nelf=0
    for f in $(find "$root" -type f | sort); do
        is_elf "$f" || continue
        nelf=$((nelf + 1))
        echo "== ${f#"$root"}" >>"$report"
        LD_LIBRARY_PATH=$ldlp ldd "$f" >>"$report" 2>&1
    done
    echo "ldd: $nelf ELF file(s) under $root" >>"$report"
    awk -v root="$root" '
        BEGIN { base = ENVIRON["BASE_LIBS"] }
        /^== / { file = substr($0, 4); next }
        $2 == "=>" && $3 == "not" { if (!($1 in miss)) miss[$1] = file; next }
        /version .* not found/ { v = $0; sub(/^[ \t]*[^ ]*: /, "", v); miss[v] = file; next }
        $2 == "=>" && $3 ~ /^\// && index($3, root "/") != 1 && $1 !~ base { out[$1] = $3 }
        END {
            for (l in miss) printf "missing: %s (needed by %s)\n", l, miss[l]
            for (l in out) printf "outside: %s (%s)\n", l, out[l]
        }' "$report" | sort
    bad=$(grep -c 'not found' "$report")
    for l in $(find "$root" -type l); do
        t=$(readlink "$l")
        case $t in /*) echo "symlink: ${l#"$root"} -> $t (absolute)" ;; esac
        [ -e "$l" ] || { echo "symlink: ${l#"$root"} -> $t (dangling)"; bad=$((bad + 1)); }
    done
    [ "$bad" = 0 ]
}

# ------------------------------------------------------------------ --prepare (here)
# pkg_of PATH: the installed package that owns library PATH (usrmerge: /lib or /usr/lib)
pkg_of() {
    r=$(readlink -f "$1")
    for p in "$1" "/usr${1#/usr}" "${1#/usr}" "$r" "/usr${r#/usr}" "${r#/usr}"; do
        o=$(dpkg -S "$p" 2>/dev/null | grep -v '^diversion' | head -1)
        [ -n "$o" ] && { echo "${o%%:*}"; return 0; }
    done
    return 1
}
# trim STAGE: what neither the build nor the tests need (64 MiB travel in all)
trim() {
    s=$1 l=$1/usr/lib/x86_64-linux-gnu
    if [ -d "$s/lib" ] && [ ! -L "$s/lib" ]; then # usrmerge: one library directory
        mkdir -p "$s/usr/lib" && cp -a "$s/lib/." "$s/usr/lib/" && rm -rf "$s/lib"
    fi
    if [ -d "$s/bin" ] && [ ! -L "$s/bin" ]; then
        mkdir -p "$s/usr/bin" && cp -a "$s/bin/." "$s/usr/bin/" && rm -rf "$s/bin"
    fi
    rm -rf "$s/usr/share" "$s/etc" "$s/usr/sbin" "$s/usr/lib/ssl"
    # static libraries: Check's only (Debian ships no libcheck.so)
    find "$s" -name '*.a' ! -name 'libcheck*.a' \( -type f -o -type l \) -exec rm -f {} +
    # Fortran and C++ bindings (not libgfortran: OpenBLAS needs it), LAPACK,
    # UCX's InfiniBand/RDMA modules (one node: shared memory and loopback TCP)
    rm -rf "$l"/libmpichfort* "$l"/libmpichcxx* "$l"/libhdf5*fortran* "$l"/libhdf5*_cpp* \
        "$l"/openblas-pthread/liblapack* "$l"/openblas-pthread/libblas* "$l"/openblas-pthread/cmake \
        "$l"/ucx/libuct_ib* "$l"/ucx/libuct_rdmacm* "$l"/gconv "$l"/krb5 "$l"/sasl2 \
        "$s"/usr/include/*/mpich/*.mod "$s"/usr/include/hdf5/serial/*.mod \
        "$l"/gnutls "$l"/engines-3 "$l"/ossl-modules "$l"/fortran "$l"/cmake "$s/usr/lib/gcc"
    # absolute symlinks (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) made
    # relative within the stage, then dangling ones removed
    for ln in $(find "$s" -type l); do
        t=$(readlink "$ln")
        case $t in
            /*) case $t in /lib/*|/bin/*) t=/usr$t ;; esac
                ln -sfn "$(realpath -m --relative-to="$(dirname "$ln")" "$s$t")" "$ln" ;;
        esac
    done
    while [ -n "$(find "$s" -xtype l -print -quit)" ]; do find "$s" -xtype l -exec rm -f {} +; done
}
prepare() {
    set -e
    for t in apt-get dpkg-deb dpkg xz realpath ldd; do
        command -v $t >/dev/null || { echo "gpu-check --prepare: needs $t (Debian 12)" >&2; exit 1; }
    done
    rm -rf "$CARRY"
    mkdir -p "$CARRY/debs" "$CARRY/stage" "$CARRY/fashion-mnist" "$CARRY/xz"
    grep -qx '/gpu-carry/' "$here/.git/info/exclude" 2>/dev/null ||
        { mkdir -p "$here/.git/info" && echo '/gpu-carry/' >>"$here/.git/info/exclude"; }
    S=$CARRY/stage L=$CARRY/stage/usr/lib/x86_64-linux-gnu
    want=$DEBS
    have=
    round=0
    while [ -n "$want" ]; do
        round=$((round + 1))
        [ $round -le 8 ] || { echo "gpu-check --prepare: no closure after 8 rounds: $want" >&2; exit 1; }
        echo "gpu-check --prepare: round $round: $(echo $want)"
        (cd "$CARRY/debs" && apt-get download $want) >"$CARRY/download.log" 2>&1 ||
            { cat "$CARRY/download.log"; exit 1; }
        for d in "$CARRY"/debs/*.deb; do
            [ -f "$d.x" ] || { dpkg-deb -x "$d" "$S" && : >"$d.x"; }
        done
        have="$have $want"
        trim "$S"
        # the libraries the stage's ELF files find only on this host
        set +e
        ldd_report "$S" "$L:$L/openblas-pthread" "$CARRY/ldd.txt" >"$CARRY/ldd-summary.txt"
        set -e
        if grep '^missing:' "$CARRY/ldd-summary.txt"; then
            echo "gpu-check --prepare: not found on this host either" >&2; exit 1
        fi
        want=
        for lib in $(sed -n 's/^outside: [^ ]* (\(.*\))$/\1/p' "$CARRY/ldd-summary.txt"); do
            p=$(pkg_of "$lib") || { echo "gpu-check --prepare: no package owns $lib" >&2; exit 1; }
            case " $have $want " in *" $p "*) ;; *) want="$want $p" ;; esac
        done
    done
    rm -f "$CARRY"/debs/*.x
    grep -v '^outside:' "$CARRY/ldd-summary.txt" || true
    echo "gpu-check --prepare: closure complete: $(grep -c '^== ' "$CARRY/ldd.txt") ELF file(s), none needs a library outside the stage but glibc, libgcc_s, libstdc++"
    # an xz to unpack with where the machine has none (it needs only glibc)
    cp -L "$S/usr/bin/xz" "$L/liblzma.so.5" "$CARRY/xz/"
    {
        echo "# gpu-carry: Debian 12 packages unpacked (dpkg -x) into prefix.tar.xz, $(date -u +%F)"
        for d in "$CARRY"/debs/*.deb; do dpkg-deb -W --showformat='${Package} ${Version}\n' "$d"; done
        echo "# trimmed: usr/share, etc, static libraries but libcheck*, Fortran/C++ bindings, LAPACK,"
        echo "# UCX InfiniBand/RDMA modules; symlinks relative; /lib merged into /usr/lib"
    } >"$CARRY/MANIFEST.txt"
    t0=$(date +%s)
    tar -C "$S" --owner=0 --group=0 -cf - . | xz -9e -T2 >"$CARRY/prefix.tar.xz"
    echo "gpu-check --prepare: packed in $(($(date +%s) - t0))s ($(du -sm "$S" | cut -f1) MiB unpacked)"
    rm -rf "$S" "$CARRY/debs" "$CARRY/download.log" "$CARRY/ldd.txt" "$CARRY/ldd-summary.txt"
    cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$CARRY/fashion-mnist/"
    [ -x "$here/configure" ] || (cd "$here" && ./autogen.sh)
    for f in configure.ac Makefile.am $(cd "$here" && ls ./*/*.mk ./*/*/*.mk config/*.m4 2>/dev/null); do
        if [ -n "$(find "$here/$f" -newer "$here/configure")" ]; then
            echo "gpu-check --prepare: $f is newer than configure: run ./autogen.sh before carrying" >&2
        fi
    done
    du -sh "$CARRY"/*
    gen=$(cd "$here" && du -scb configure Makefile.in config.h.in aclocal.m4 config | tail -1 | cut -f1)
    all=$(($(du -sb "$CARRY" | cut -f1) + gen))
    echo "gpu-check --prepare: gpu-carry $(du -sb "$CARRY" | cut -f1) bytes + generated files $gen = $((all / 1048576)) MiB of the 64 MiB carry"
    [ $all -lt $((64 * 1048576)) ] || { echo "gpu-check --prepare: over 64 MiB" >&2; exit 1; }
    echo "gpu-check: prepared; carry configure Makefile.in config.h.in aclocal.m4 config gpu-carry"
}

# ------------------------------------------------------------------ step functions
# (each runs in its own process under timeout: sh gpu-check.sh --run-step FUNC ARGS)

carry() {
    mkdir -p "$P" "$W/bin" || return 1
    xzc=$(command -v xz)
    if [ -z "$xzc" ] && [ -f "$CARRY/xz/xz" ]; then # the carried one (an exec bit may not travel)
        cp "$CARRY/xz/xz" "$W/bin/xz-carried" && chmod +x "$W/bin/xz-carried" && xzc="env LD_LIBRARY_PATH=$CARRY/xz $W/bin/xz-carried"
    fi
    echo "unpacking $CARRY/prefix.tar.xz ($(du -h "$CARRY/prefix.tar.xz" | cut -f1)) into $P with ${xzc:-python3}"
    if [ -n "$xzc" ]; then
        $xzc -dc "$CARRY/prefix.tar.xz" >"$W/prefix.tar" && tar -C "$P" -xf "$W/prefix.tar" || return 1
        rm -f "$W/prefix.tar"
    else
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$CARRY/prefix.tar.xz" "$P" || return 1
    fi
    cp "$CARRY/MANIFEST.txt" "$LOGS/carry-manifest.txt" 2>/dev/null
    ldd_report "$P" "$CARRY_LDLP" "$LOGS/carry-ldd.txt" >"$LOGS/carry-ldd-summary.txt"
    rc=$?
    n=$(grep -c '^== ' "$LOGS/carry-ldd.txt")
    if [ $rc != 0 ]; then
        echo "carry: INCOMPLETE: $n ELF file(s) checked with LD_LIBRARY_PATH=$CARRY_LDLP:"
        grep -v '^outside:' "$LOGS/carry-ldd-summary.txt"
        return 1
    fi
    echo "carry: complete: ldd finds every library of $n ELF file(s) in the prefix or the machine's glibc/libgcc_s/libstdc++"
    if grep -q '^outside:' "$LOGS/carry-ldd-summary.txt"; then
        echo "carry: from the machine, not the prefix:"
        grep '^outside:' "$LOGS/carry-ldd-summary.txt"
        [ -z "${GPU_CHECK_CARRY_STRICT:-}" ] || { echo "carry: GPU_CHECK_CARRY_STRICT: fail"; return 1; }
    fi
    grep '^symlink:' "$LOGS/carry-ldd-summary.txt"
    # the tools the build needs from the machine itself
    miss=
    for t in gcc ld as ar make sed awk grep; do command -v $t >/dev/null || miss="$miss $t"; done
    [ "$KIND" = emulated ] || command -v g++ >/dev/null || miss="$miss g++(for nvcc)"
    [ -z "$miss" ] || { echo "carry: the machine lacks:$miss"; return 1; }
    echo "tools: $(command -v gcc) ($(gcc -dumpfullversion)), make $(make --version | head -1 | awk '{print $3}') ($(command -v make))"
    return 0
}

build() {
    mkdir -p "$B" && cd "$B" || return 1
    if [ "$KIND" = emulated ]; then
        cuda="--with-cuda=emulate"
    else
        cuda="--with-cuda=$CUDA_HOME --with-cuda-arch=90 ${NCCL_DIR:+--with-nccl=$W/nccl}"
    fi
    # shellcheck disable=SC2086
    sh "$here/configure" $cuda --without-pmix \
        --with-blas=openblas MPICC="$W/bin/mpicc" MPIEXEC="$W/bin/mpiexec" PKG_CONFIG="$W/bin/pkg-config" \
        HDF5_CFLAGS="-I$INC/hdf5/serial" HDF5_LIBS="-L$L -Wl,-rpath,$L -lhdf5_serial" \
        ZLIB_CFLAGS="-I$INC" ZLIB_LIBS="-L$L -Wl,-rpath,$L -lz" \
        CHECK_CFLAGS="-I$INC" CHECK_LIBS="-L$L -lcheck_pic -lsubunit -lrt -lm -lpthread" CPPFLAGS="-I$INC" \
        >configure.out 2>&1
    rc=$?
    sed -n '/^ddpc .* configured/,$p' configure.out
    [ $rc = 0 ] || { tail -n 30 configure.out; tail -n 40 config.log; return 1; }
    make -j"$JOBS" && make -j"$JOBS" check TESTS= || return 1
    "$B/ddpc-info" --version
    for f in .libs/libddpc.so .libs/trainer; do
        [ -f "$f" ] && { echo "== ldd $f"; ldd "$f" | grep -E 'nccl|cuda|cublas|mpich|hdf5|openblas|not found'; }
    done
    # what the programs find by their own RUNPATH and the machine's ld.so
    # configuration only, the toolkit's directory left off LD_LIBRARY_PATH
    for f in .libs/*.so .libs/trainer .libs/ddpc-info tests/.libs/gpu_* tests/emu/.libs/*.so; do
        is_elf "$f" || continue
        LD_LIBRARY_PATH=$CARRY_LDLP:$W/nccl/lib ldd "$f" 2>&1 | awk -v f="$f" -v d="$CUDA_LIBDIR" \
            '$2 == "=>" && $3 == "not" && $1 ~ /cuda|cublas|nccl/ { printf "link: %s: %s not found without %s on LD_LIBRARY_PATH (no RUNPATH to it)\n", f, $1, d }'
    done
    return 0
}

# checks TEST...: make check of those tests, each one's log shown; 77 when all skipped
checks() {
    cd "$B" || return 1
    make check TESTS="$*"
    rc=$?
    skipped=0
    for t in "$@"; do
        cat "${t%.*}.log"
        grep -q ':test-result: SKIP' "${t%.*}.trs" 2>/dev/null && skipped=$((skipped + 1))
    done
    [ $rc = 0 ] && [ $skipped = $# ] && return 77
    return $rc
}

# final_field LOG FIELD: the value of FIELD= on the trainer's final line
final_field() { sed -n "s/^final: .*$2=\([^ ]*\).*/\1/p" "$1" | tail -1; }
trainer_runs() {
    T=$B/trainer
    R=$LOGS/trainer-runs
    if [ -n "${GPU_CHECK_TRAINER_ON_CPU:-}" ]; then # the script's own check, without a GPU
        cat >"$W/bin/trainer-on-cpu" <<EOF
#!/bin/sh
for a in "\$@"; do
    shift
    case \$a in cuda) set -- "\$@" cpu ;; bf16|fp16) set -- "\$@" fp32 ;; *) set -- "\$@" "\$a" ;; esac
done
exec "$B/trainer" "\$@"
EOF
        chmod +x "$W/bin/trainer-on-cpu"
        T=$W/bin/trainer-on-cpu
    fi
    rm -rf "$R" && mkdir -p "$R" && cd "$R" || return 1
    fails=0
    run_t() { # NAME ARGS...: one run, its log in $R/NAME.log
        n=$1; shift
        t0=$(date +%s)
        timeout -k 5 150 "$@" >"$R/$n.log" 2>&1
        rc=$?
        echo "== $n: exit $rc in $(($(date +%s) - t0))s: $(grep -E '^(final|trainer: [0-9]+ rank)' "$R/$n.log" | tr '\n' ' ')"
        [ $rc = 0 ] || { tail -n 20 "$R/$n.log"; fails=$((fails + 1)); }
    }
    run_t cpu "$MPIEXEC" -n 1 "$T" --device cpu --epochs 1 --ckpt-dir none --data "$DATA" --threads "$THREADS"
    for p in fp32 bf16 fp16; do
        run_t "cuda-$p" "$MPIEXEC" -n 1 "$T" --device cuda --precision $p --epochs 1 --ckpt-dir none \
            --data "$DATA"
    done
    a_cpu=$(final_field "$R/cpu.log" test_acc)
    # one epoch's test accuracy: fp32 within 0.5 point of the cpu's, bf16 and
    # fp16 within 1 (the emulation's own rounding lands 0.5-0.7 apart)
    for p in fp32 bf16 fp16; do
        a=$(final_field "$R/cuda-$p.log" test_acc)
        tol=1.0; [ $p = fp32 ] && tol=0.5
        awk -v p=$p -v a="${a:-0}" -v c="${a_cpu:-1}" -v t=$tol 'BEGIN { d = (a - c) * 100; if (d < 0) d = -d
            printf "accuracy %s: %.4f, cpu %.4f: %.2f point(s) apart (tolerance %s)\n", p, a, c, d, t; exit d > t }' ||
            fails=$((fails + 1))
    done
    # bitwise resume: bf16, 400 steps in one run, or 200 + a restart to 400
    run_t whole "$MPIEXEC" -n 1 "$T" --device cuda --precision bf16 --max-steps 400 --ckpt-dir "$R/c1" \
        --data "$DATA"
    run_t first "$MPIEXEC" -n 1 "$T" --device cuda --precision bf16 --max-steps 200 --ckpt-dir "$R/c2" \
        --data "$DATA"
    run_t resumed "$MPIEXEC" -n 1 "$T" --device cuda --precision bf16 --max-steps 400 --ckpt-dir "$R/c2" \
        --data "$DATA"
    c1=$(final_field "$R/whole.log" params_crc32)
    c2=$(final_field "$R/resumed.log" params_crc32)
    echo "resume bf16: uninterrupted $c1, stopped at 200 and resumed $c2"
    [ -n "$c1" ] && [ "$c1" = "$c2" ] || fails=$((fails + 1))
    # CUDA graphs replay the same kernels: the same parameters bit for bit
    run_t graphs "$MPIEXEC" -n 1 "$T" --device cuda --precision bf16 --max-steps 400 --ckpt-dir none \
        --data "$DATA" --cuda-graph on
    c3=$(final_field "$R/graphs.log" params_crc32)
    echo "cuda graphs bf16: eager $c1, graphs $c3"
    [ -n "$c3" ] && [ "$c1" = "$c3" ] || fails=$((fails + 1))
    if grep -q 'without CUDA graphs' "$R/graphs.log"; then
        grep 'without CUDA graphs' "$R/graphs.log"
        [ -n "${GPU_CHECK_TRAINER_ON_CPU:-}" ] || fails=$((fails + 1))
    fi
    # fp16 with accumulation and bf16 on the wire; 2 ranks sharing the GPU (mpi-staged)
    run_t fp16-accum "$MPIEXEC" -n 1 "$T" --device cuda --precision fp16 --grad-accum 2 \
        --grad-dtype bf16 --epochs 1 --ckpt-dir none --data "$DATA"
    run_t staged-2 env DDPC_BACKEND=mpi "$MPIEXEC" -n 2 "$T" --device cuda --epochs 1 \
        --ckpt-dir none --data "$DATA" --print-crc-all
    [ "$(grep -c 'params_crc32=' "$R/staged-2.log")" -ge 3 ] &&
        [ "$(sed -n 's/^rank [01]: params_crc32=//p' "$R/staged-2.log" | sort -u | wc -l)" = 1 ] ||
        { echo "staged-2: the ranks' parameters differ or are missing"; fails=$((fails + 1)); }
    rm -rf "$R/c1" "$R/c2"
    echo "trainer: $fails failure(s)"
    [ $fails = 0 ]
}

bench() { # bench [--quick]: PyTorch with the machine's own libraries, the trainer through the wrapper
    mkdir -p "$LOGS/bench"
    if [ -n "$ORIG_LDLP" ]; then LD_LIBRARY_PATH=$ORIG_LDLP; else unset LD_LIBRARY_PATH; fi
    python3 "$here/bench/gpu_bench.py" --trainer "$B/trainer" --mpiexec "$W/bin/mpiexec" --data "$DATA" \
        --out "$LOGS/bench" "$@"
}

busbw() {
    for np in 1 2 4; do
        echo "== $np rank(s)"
        GPU_COMM_BENCH=1 timeout -k 5 60 "$MPIEXEC" -n "$np" "$B/tests/gpu_comm" | grep -E '^busbw|note' || return 1
    done
}

# Two NCCL ranks on one GPU: NCCL refuses a duplicate GPU within a host;
# distinct NCCL_HOSTIDs may let them pass as two hosts over sockets.
hostid() {
    export DDPC_NCCL_ALLOW_SHARED_GPU=1 NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN DDPC_TIMEOUT=60
    echo "== all-reduce"
    timeout -k 5 90 "$MPIEXEC" -n 1 -env NCCL_HOSTID ddpc-a "$B/tests/gpu_boot" : \
        -n 1 -env NCCL_HOSTID ddpc-b "$B/tests/gpu_boot"
    rc=$?
    echo "hostid: two NCCL ranks on one GPU: exit $rc ($([ $rc = 0 ] && echo accepted || echo refused))"
    [ $rc = 0 ] || return 0
    echo "== rank 1 never joins: rank 0's watchdog must end it after DDPC_TIMEOUT=5 s"
    t0=$(date +%s)
    DDPC_TIMEOUT=5 GPU_BOOT_SKIP_RANK=1 timeout -k 5 45 "$MPIEXEC" -n 1 -env NCCL_HOSTID ddpc-a \
        "$B/tests/gpu_boot" : -n 1 -env NCCL_HOSTID ddpc-b "$B/tests/gpu_boot"
    rc=$?
    dt=$(($(date +%s) - t0))
    echo "hostid: watchdog: exit $rc after ${dt}s (DDPC_TIMEOUT=5)"
    [ $rc = 3 ] && [ $dt -lt 20 ]
}

# ------------------------------------------------------------------ dispatch
case ${1:-} in
    --prepare) prepare; exit 0 ;;
    --run-step) shift; "$@"; exit $? ;;
    --long) TIER=long ;;
    '') TIER=default ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 2 ;;
esac

# ------------------------------------------------------------------ main
t_start=$(date +%s)
SCALE=${GPU_CHECK_TIME_SCALE:-1}
if [ $TIER = default ]; then BUDGET=${GPU_CHECK_BUDGET:-330}; else BUDGET=${GPU_CHECK_BUDGET:-540}; fi
BUDGET=$((BUDGET * SCALE))
deadline=$((t_start + BUDGET))
OUT=${OUT:-$here/gpu-check-out}
mkdir -p "$OUT"
W=${GPU_CHECK_WORK:-/tmp/ddpc-gpu-check}
P=$W/root
L=$P/usr/lib/x86_64-linux-gnu
INC=$P/usr/include
B=$W/build
LOGS=$W/logs-$TIER
if [ $TIER = default ]; then SUMMARY=$OUT/summary.txt; else SUMMARY=$OUT/summary-long.txt; fi
TARBALL=$OUT/gpu-check-$TIER.tar.gz
reuse=
if [ $TIER = long ] && [ -x "$B/trainer" ] && [ -x "$P/usr/bin/mpiexec.hydra" ] && [ -f "$B/config.status" ]; then
    reuse=yes
else
    rm -rf "$W"
fi
rm -rf "$LOGS"
mkdir -p "$W/bin" "$W/nccl/include" "$W/nccl/lib" "$LOGS"
: >"$SUMMARY"
note() { echo "gpu-check: $*" | tee -a "$SUMMARY"; }
pack() {
    cp "$SUMMARY" "$LOGS/"
    tar -C "$W" --exclude='*.h5' -czf "$OUT/.pack.tmp" "logs-$TIER" 2>/dev/null && mv -f "$OUT/.pack.tmp" "$TARBALL"
}
npass=0 nfail=0 nskip=0
# step NAME LIMIT CMD...: CMD (a step function or a command) in its own process
# under timeout, the limit cut to what the budget has left; its output in
# $LOGS/NAME.log; exit 77 is a skip
step() {
    name=$1 lim=$(($2 * SCALE)); shift 2
    if [ -n "${GPU_CHECK_ONLY:-}" ] && [ "$name" != carry ] && [ "$name" != build ]; then
        case " $GPU_CHECK_ONLY " in *" $name "*) ;; *) return 77 ;; esac
    fi
    left=$((deadline - $(date +%s)))
    if [ $left -lt 15 ]; then
        note "SKIP: $name (the budget of ${BUDGET}s is spent)"; nskip=$((nskip + 1)); return 77
    fi
    [ $lim -le $left ] || lim=$left
    t0=$(date +%s)
    timeout -k 10 $lim sh "$SELF" --run-step "$@" >"$LOGS/$name.log" 2>&1 </dev/null
    rc=$?
    dt=$(($(date +%s) - t0))
    case $rc in
        0) res=PASS; npass=$((npass + 1)) ;;
        77) res=SKIP; nskip=$((nskip + 1)) ;;
        124|137) res="FAIL (timed out after ${lim}s)"; nfail=$((nfail + 1)) ;;
        *) res="FAIL (exit $rc)"; nfail=$((nfail + 1)) ;;
    esac
    note "$res: $name (${dt}s)"
    case $res in
        FAIL*) grep -v -E '^make(\[[0-9]+\])?: |^=+$|^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR):|^See \./' \
                "$LOGS/$name.log" | tail -n 12 | cut -c1-200 | sed "s/^/    $name| /" | tee -a "$SUMMARY" ;;
        SKIP) grep -i skip "$LOGS/$name.log" | grep -v -E '^(SKIP:? tests/|# SKIP)' | tail -n 1 | cut -c1-200 |
                sed "s/^/    $name| /" | tee -a "$SUMMARY" ;;
    esac
    pack
    return $rc
}
# results LOG PATTERN: the lines of LOG that match into the summary
results() { grep -h -E "$2" "$LOGS/$1.log" 2>/dev/null | cut -c1-200 | sed 's/^/    /' | tee -a "$SUMMARY"; }

# what runs the GPU steps: the GPU, the host emulation, or nothing
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ -n "${GPU_CHECK_EMULATE:-}" ]; then
    KIND=emulated
    export DDPC_EMU_DEVICES=${DDPC_EMU_DEVICES:-4}
elif [ "$NGPU" -gt 0 ]; then
    KIND=gpu
else
    KIND=none
fi
{
    echo "== date: $(date -u)"; uname -a; cat /etc/os-release 2>/dev/null | head -3
    echo "== nproc: $(nproc)"; nvidia-smi 2>&1 | head -20; df -h /tmp /dev/shm
    echo "== python3: $(command -v python3) $(python3 --version 2>&1)"
    echo "== gcc: $(gcc --version 2>&1 | head -1); g++: $(command -v g++)"
} >"$LOGS/machine.txt" 2>&1
note "$TIER tier, budget ${BUDGET}s, $(date -u +%FT%TZ), $(nproc) cores, GPU steps on: $KIND$(
    [ "$KIND" = gpu ] && echo " ($(nvidia-smi -L | head -1))")"

# CUDA: the machine's nvcc; NCCL: the toolkit's, or the pip wheel's (which has
# no libnccl.so: link one). Looked up before LD_LIBRARY_PATH names the prefix.
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=$(dirname "$(dirname "$NVCC")")
NCCL_DIR=
if [ "$KIND" != emulated ]; then
    for d in "$CUDA_HOME" /usr $(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null); do
        if [ -f "$d/include/nccl.h" ] && ls "$d"/lib*/libnccl.so* >/dev/null 2>&1; then NCCL_DIR=$d; break; fi
    done
    if [ -n "$NCCL_DIR" ] && [ -z "$reuse" ]; then
        ln -sf "$NCCL_DIR/include/nccl.h" "$W/nccl/include/nccl.h"
        [ -f "$NCCL_DIR/include/nccl_net.h" ] && ln -sf "$NCCL_DIR/include/nccl_net.h" "$W/nccl/include/"
        so=$(ls "$NCCL_DIR"/lib*/libnccl.so.2* 2>/dev/null | head -1)
        [ -n "$so" ] || so=$(ls "$NCCL_DIR"/lib*/libnccl.so* | head -1)
        ln -sf "$so" "$W/nccl/lib/libnccl.so"
        ln -sf "$so" "$W/nccl/lib/libnccl.so.2"
    fi
    note "nvcc: $([ -x "$NVCC" ] && "$NVCC" --version | tail -1 || echo "none at $NVCC"); NCCL: ${NCCL_DIR:-none (building without it)}; cuBLASLt: $(ls "$CUDA_HOME"/lib*/libcublasLt.so* 2>/dev/null | head -1 | grep . ||
        echo "none in the toolkit: no CUDA model, trainer or gpu_model")"
fi

ORIG_LDLP=${LD_LIBRARY_PATH:-}
CARRY_LDLP=$L:$L/openblas-pthread
# the toolkit's libraries (cudart, cuBLASLt) too: the trainer has no RUNPATH
# to them and a machine's ld.so configuration may not name them (build: "link:")
CUDA_LIBDIR=$CUDA_HOME/lib64
[ -d "$CUDA_LIBDIR" ] || CUDA_LIBDIR=$CUDA_HOME/lib
CUDA_LDLP=
[ "$KIND" = emulated ] || CUDA_LDLP=:$CUDA_LIBDIR
export LD_LIBRARY_PATH="$CARRY_LDLP:$W/nccl/lib$CUDA_LDLP${ORIG_LDLP:+:$ORIG_LDLP}"
export PATH="$W/bin:$P/usr/bin:$PATH"
MPIEXEC=$W/bin/mpiexec
DATA=$CARRY/fashion-mnist
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA=/usr/share/datasets/fashion-mnist
THREADS=$(nproc); [ "$THREADS" -le 8 ] || THREADS=8
JOBS=${GPU_CHECK_JOBS:-$(nproc)}
export here CARRY W P L INC B LOGS KIND NVCC CUDA_HOME CUDA_LIBDIR NCCL_DIR ORIG_LDLP CARRY_LDLP MPIEXEC DATA THREADS JOBS BASE_LIBS
export DDPC_TEST_DATA=$DATA TRAINER_GPU_NP=${TRAINER_GPU_NP:-1} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

# MPICH's compiler wrapper and launcher hard-code /usr: ours point at the prefix
cat >"$W/bin/mpicc" <<EOF
#!/bin/sh
for a in "\$@"; do case \$a in -c|-E|-S) exec gcc -I$INC/x86_64-linux-gnu/mpich "\$@" ;; esac; done
exec gcc -I$INC/x86_64-linux-gnu/mpich "\$@" -L$L -Wl,-rpath,$L -lmpich
EOF
cat >"$W/bin/mpiexec" <<EOF
#!/bin/sh
# the carried MPICH's launcher; its ranks find the prefix's libraries
LD_LIBRARY_PATH=$LD_LIBRARY_PATH; export LD_LIBRARY_PATH
UCX_NET_DEVICES=\${UCX_NET_DEVICES:-lo}; export UCX_NET_DEVICES
exec $P/usr/bin/mpiexec.hydra "\$@"
EOF
# pkg-config for configure: OpenBLAS's flags and the carried packages' versions only
cat >"$W/bin/pkg-config" <<EOF
#!/bin/sh
case "\$1 \${2:-}" in
    "--atleast-pkgconfig-version "*) exit 0 ;;
    "--cflags openblas") echo "-I$INC/x86_64-linux-gnu/openblas-pthread" ;;
    "--libs openblas") echo "-L$L/openblas-pthread -Wl,-rpath,$L/openblas-pthread -lopenblas" ;;
    "--modversion "*) for d in $L/pkgconfig $L/openblas-pthread/pkgconfig; do
            [ -f "\$d/\$2.pc" ] && exec sed -n 's/^Version: *//p' "\$d/\$2.pc"; done; exit 1 ;;
    *) exit 1 ;;
esac
EOF
chmod +x "$W/bin/mpicc" "$W/bin/mpiexec" "$W/bin/pkg-config"

# without autotools here, the generated files must not look older than their
# sources (a copied tree's times are arbitrary): make would try to rerun them
if [ -z "$reuse" ] && { ! command -v autoconf >/dev/null || ! command -v automake >/dev/null; }; then
    touch "$here/aclocal.m4" && touch "$here/configure" "$here/config.h.in" &&
        find "$here" -name Makefile.in -exec touch {} +
fi

finish() {
    note "done in $(($(date +%s) - t_start))s: $npass passed, $nfail failed, $nskip skipped; every log in $TARBALL"
    pack
    [ $nfail = 0 ]
    exit $?
}

# ------------------------------------------------------------------ carry + build
if [ -n "$reuse" ]; then
    note "reusing the prefix $P and the build $B"
else
    if ! step carry 120 carry; then
        results carry '^(carry|missing|tools|  )'
        note "the carry is not usable here: stopped before configure (the ldd report is in the tarball)"
        finish
    fi
    results carry '^(carry|tools)'
    if ! step build 300 build; then
        note "build failed: the configure summary, config.log's tail and make's errors are in build.log"
        finish
    fi
    results build '^ddpc-info|^  (MPI|HDF5|CBLAS|CUDA|NCCL):|^ddpc .* configured|^link:'
fi

# ------------------------------------------------------------------ default tier
if [ $TIER = default ]; then
    # the most telling first: the device time is short
    step gpu_model 90 checks tests/gpu_model
    step gpu_optim 60 checks tests/gpu_optim
    step gpu_ddp 120 checks tests/gpu_ddp.mpi
    step gpu_comm 120 checks tests/gpu_comm.mpi
    step gpu_graph 90 checks tests/gpu_graph.mpi
    step gpu_boot 90 checks tests/gpu-boot.sh
    results gpu_boot 'NCCL [0-9.]+|backend nccl on GPU'
    step trainer-gpu 240 checks tests/trainer-gpu.sh
    results trainer-gpu '^trainer-gpu: on|^ok:|^graphs: not captured'
    if [ "$KIND" != none ] || [ -n "${GPU_CHECK_TRAINER_ON_CPU:-}" ]; then
        step trainer 240 trainer_runs
        results trainer '^(accuracy|resume|cuda graphs|trainer:)'
    else
        note "SKIP: trainer (no GPU)"; nskip=$((nskip + 1))
    fi
    if [ "$KIND" = gpu ]; then
        step bench 150 bench --quick
        results bench '^(bf16 GEMM|config|default|large)'
    else
        note "SKIP: bench (timings on a GPU only)"; nskip=$((nskip + 1))
    fi
fi

# ------------------------------------------------------------------ long tier
if [ $TIER = long ]; then
    if [ "$KIND" = gpu ]; then
        step busbw 90 busbw
        results busbw '^busbw'
        step bench 420 bench
        results bench '^(bf16 GEMM|config|default|large)'
        step hostid 150 hostid
        results hostid '^hostid:'
    else
        note "SKIP: busbw, bench, hostid (timings and NCCL on a GPU only)"; nskip=$((nskip + 3))
    fi
    step cpu-tests 240 checks tests/comm.mpi tests/ddp.mpi tests/ckpt.mpi
fi
finish
