#!/bin/sh
# gpu-check.sh: build ddpc with nvcc on a GPU machine, run the GPU tests and
# measure, in one go (well under 10 minutes), logs in $OUT (default
# ./gpu-check-out). The GPU test machine has CUDA, NCCL (the
# nvidia-nccl-cu13 wheel) and PyTorch but no MPI, HDF5, Check or OpenBLAS,
# and no network, so:
#
#   scripts/gpu-check.sh --prepare    here (Debian 12, the package archive
#                                     reachable, after ./autogen.sh): Debian
#                                     .debs unpacked, trimmed (no static
#                                     libraries, docs, Fortran) and packed as
#                                     gpu-carry/prefix.tar.xz (about 17 MiB),
#                                     and Fashion-MNIST in
#                                     gpu-carry/fashion-mnist (30 MiB)
#   then, with the device tool, carry configure, Makefile.in, config.h.in,
#   aclocal.m4, config/ and gpu-carry/ and run: sh scripts/gpu-check.sh
#
# There the .debs are unpacked with dpkg -x into a private prefix (never /),
# configure is pointed at it and at the machine's own nvcc and NCCL
# (--with-cuda-arch=90), and the steps below run; each step's log is
# $OUT/<step>.log and $OUT/summary.txt has one PASS/FAIL/SKIP line per step.
# Without a GPU (here) the same script builds and every GPU step skips;
# GPU_CHECK_TRAINER_ON_CPU=1 runs the trainer-gpu step with the cpu in place
# of the GPU (fp32 for bf16/fp16), to check the script itself.
# Steps:
#   build        configure + make (library, tests)
#   cpu-tests    comm.mpi ddp.mpi ckpt.mpi: the CPU path still passes there
#   gpu_optim    the CUDA optimizers against the CPU code, 100 steps
#   gpu_comm     device collectives: nccl 1 rank, mpi-staged 1/2/4 ranks on the GPU,
#                stream order, the staged timeout
#   gpu_ddp      device DDP: N ranks x B = 1 x N*B, identical parameters,
#                compression, unused parameters, checkpoint round trip
#   gpu_boot     the nccl bootstrap and a 1-rank NCCL all-reduce
#   gpu_model    the trainer's CUDA model against its cpu twin (fp32 fused and
#                unfused, bf16, fp16)
#   trainer-gpu  the trainer on Fashion-MNIST: one epoch fp32/bf16/fp16 on the
#                GPU against the cpu trainer's accuracy (within 0.5 point); a
#                bf16 run stopped and resumed equals the uninterrupted one bit
#                for bit; 2 ranks sharing the GPU (mpi-staged); fp16 with
#                --grad-accum 2 --grad-dtype bf16
#   bench        bench/gpu_bench.py: trainer vs PyTorch (eager, torch.compile,
#                CUDA graphs) on the default MLP and a GEMM-bound one, and the
#                bf16 GEMM rate
#   busbw        all-reduce busbw, 1-256 MiB: nccl (1 rank) and mpi-staged (2, 4 ranks)
#   hostid       experiment: 2 NCCL ranks on the one GPU with distinct NCCL_HOSTID
#                (whether NCCL accepts it; then the watchdog's timeout with a rank
#                that never joins). Never depended on.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$here/gpu-carry
DEBS="libmpich12 libmpich-dev mpich libhwloc15 libucx0 libnuma1 libibverbs1 librdmacm1
 libnl-3-200 libnl-route-3-200 libgfortran5 libslurm38 libhdf5-103-1 libhdf5-dev libsz2 libaec0
 libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev check libsubunit0 libsubunit-dev
 zlib1g-dev"

if [ "${1:-}" = --prepare ]; then
    set -e
    rm -rf "$CARRY"
    mkdir -p "$CARRY/debs" "$CARRY/stage" "$CARRY/fashion-mnist"
    grep -qx '/gpu-carry/' "$here/.git/info/exclude" 2>/dev/null \
        || echo '/gpu-carry/' >>"$here/.git/info/exclude"
    (cd "$CARRY/debs" && apt-get download $DEBS)
    for d in "$CARRY"/debs/*.deb; do dpkg-deb -x "$d" "$CARRY/stage"; done
    # what the build and the tests do not need: 64 MiB travel in all
    find "$CARRY/stage" \( -name '*.a' -o -name '*fort*' \) -type f -delete
    rm -rf "$CARRY/stage/usr/share/doc" "$CARRY/stage/usr/share/man" "$CARRY/stage/usr/share/info"
    tar -C "$CARRY/stage" -cf - . | xz -6 -T2 >"$CARRY/prefix.tar.xz"
    rm -rf "$CARRY/stage" "$CARRY/debs"
    cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$CARRY/fashion-mnist/"
    du -sh "$CARRY"/*
    [ -x "$here/configure" ] || (cd "$here" && ./autogen.sh)
    echo "gpu-check: prepared; carry configure Makefile.in config.h.in aclocal.m4 config gpu-carry"
    exit 0
fi

OUT=${OUT:-$here/gpu-check-out}
mkdir -p "$OUT"
W=${GPU_CHECK_WORK:-/tmp/ddpc-gpu-check}
rm -rf "$W"
mkdir -p "$W/bin" "$W/nccl/include" "$W/nccl/lib"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
t_start=$(date +%s)
note() { echo "gpu-check: $*" | tee -a "$SUMMARY"; }
# step NAME CMD...: run CMD with its output in $OUT/NAME.log; 77 is a skip
step() {
    name=$1; shift
    t0=$(date +%s)
    "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    dt=$(($(date +%s) - t0))
    case $rc in
        0) res=PASS ;;
        77) res=SKIP ;;
        *) res="FAIL (exit $rc)" ;;
    esac
    note "$res: $name (${dt}s)"
    tail -n 40 "$OUT/$name.log" | sed "s/^/    $name| /"
    return $rc
}

# ------------------------------------------------------------------ the private prefix
P=$W/root
if command -v nvidia-smi >/dev/null; then nvidia-smi -L | tee "$OUT/gpus.txt"; fi
if [ -f "$CARRY/prefix.tar.xz" ]; then
    mkdir -p "$P"
    tar -C "$P" -xJf "$CARRY/prefix.tar.xz" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$CARRY/prefix.tar.xz" "$P"
    L=$P/usr/lib/x86_64-linux-gnu
    INC=$P/usr/include
elif [ -d "$CARRY/debs" ]; then
    for d in "$CARRY"/debs/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$d" "$P"
        else # ar + tar, where dpkg is missing
            (mkdir -p "$W/x" && cd "$W/x" && rm -f data.tar.* && ar x "$d" && tar -xf data.tar.* -C "$P")
        fi
    done
    L=$P/usr/lib/x86_64-linux-gnu
    INC=$P/usr/include
else
    note "no gpu-carry/debs: using the system's MPI, HDF5, Check and OpenBLAS"
    P=
    L=/usr/lib/x86_64-linux-gnu
    INC=/usr/include
fi
export LD_LIBRARY_PATH="$L:$L/hdf5/serial:$L/openblas-pthread:$W/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="${P:+$P/usr/bin:}$PATH"

# MPICH's compiler wrapper hard-codes /usr: ours points at the prefix
cat >"$W/bin/mpicc" <<EOF
#!/bin/sh
exec gcc -I$INC/x86_64-linux-gnu/mpich "\$@" -L$L -Wl,-rpath,$L -lmpich
EOF
chmod +x "$W/bin/mpicc"
MPIEXEC=$(command -v mpiexec.hydra || command -v mpiexec.mpich || echo mpiexec)

# CUDA: the machine's nvcc; NCCL: the toolkit's, or the pip wheel's (no
# libnccl.so link there: make one)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=$(dirname "$(dirname "$NVCC")")
NCCL_DIR=
for d in "$CUDA_HOME" /usr $(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null); do
    if [ -f "$d/include/nccl.h" ] && ls "$d"/lib*/libnccl.so* >/dev/null 2>&1; then NCCL_DIR=$d; break; fi
done
if [ -n "$NCCL_DIR" ]; then
    ln -sf "$NCCL_DIR/include/nccl.h" "$W/nccl/include/nccl.h"
    [ -f "$NCCL_DIR/include/nccl_net.h" ] && ln -sf "$NCCL_DIR/include/nccl_net.h" "$W/nccl/include/"
    so=$(ls "$NCCL_DIR"/lib*/libnccl.so.2* 2>/dev/null | head -1)
    [ -n "$so" ] || so=$(ls "$NCCL_DIR"/lib*/libnccl.so* | head -1)
    ln -sf "$so" "$W/nccl/lib/libnccl.so"
    ln -sf "$so" "$W/nccl/lib/libnccl.so.2"
    note "NCCL from $NCCL_DIR ($so)"
else
    note "no NCCL found (toolkit, /usr, or the nvidia-nccl wheel): building without it"
fi
note "nvcc: $("$NVCC" --version | tail -1); MPI launcher: $MPIEXEC"
{ ldd "$L/libmpich.so.12"; ldd "$L/libhdf5_serial.so.103"; ldd "$(command -v "$MPIEXEC")"; } \
    2>&1 | grep 'not found' | sed 's/^/missing library: /' | tee -a "$SUMMARY"

# ------------------------------------------------------------------ build
B=$W/build
mkdir -p "$B"
build() {
    cd "$B" || return 1
    "$here/configure" -q --with-cuda="$CUDA_HOME" --with-cuda-arch=90 \
        ${NCCL_DIR:+--with-nccl="$W/nccl"} --without-pmix \
        --with-blas="-L$L/openblas-pthread -Wl,-rpath,$L/openblas-pthread -lopenblas" \
        MPICC="$W/bin/mpicc" MPIEXEC="$MPIEXEC" \
        CPPFLAGS="-I$INC/x86_64-linux-gnu/openblas-pthread -I$INC" \
        HDF5_CFLAGS="-I$INC/hdf5/serial" HDF5_LIBS="-L$L/hdf5/serial -Wl,-rpath,$L -lhdf5" \
        ZLIB_CFLAGS="-I$INC" ZLIB_LIBS="-lz" \
        CHECK_CFLAGS="-I$INC" CHECK_LIBS="-L$L -lcheck -lsubunit -lm -lrt -lpthread" \
        PKG_CONFIG=/bin/false && make -j"$(nproc)" && make -j"$(nproc)" check TESTS=
}
if ! step build build; then
    note "build failed: see $OUT/build.log"
    exit 1
fi
"$B/ddpc-info" --version | tee -a "$SUMMARY"

# ------------------------------------------------------------------ tests
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
# the most telling first: the device time is short
step gpu_model checks tests/gpu_model
step gpu_optim checks tests/gpu_optim
step gpu_ddp checks tests/gpu_ddp.mpi

DATA=$CARRY/fashion-mnist
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || DATA=/usr/share/datasets/fashion-mnist
# final_field LOG FIELD: the value of FIELD= on the trainer's final line
final_field() { sed -n "s/^final: .*$2=\([^ ]*\).*/\1/p" "$1" | tail -1; }
trainer_gpu() {
    T=$B/trainer
    R=$W/trainer-runs
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
        timeout 300 "$@" >"$R/$n.log" 2>&1
        rc=$?
        echo "== $n: exit $rc: $(grep -E '^(final|trainer: [0-9]+ rank)' "$R/$n.log" | tr '\n' ' ')"
        [ $rc = 0 ] || { tail -n 20 "$R/$n.log"; fails=$((fails + 1)); }
    }
    run_t cpu "$MPIEXEC" -n 1 "$T" --device cpu --epochs 1 --ckpt-dir none --data "$DATA" --threads 8
    for p in fp32 bf16 fp16; do
        run_t "cuda-$p" "$MPIEXEC" -n 1 "$T" --device cuda --precision $p --epochs 1 --ckpt-dir none \
            --data "$DATA"
    done
    a_cpu=$(final_field "$R/cpu.log" test_acc)
    for p in fp32 bf16 fp16; do
        a=$(final_field "$R/cuda-$p.log" test_acc)
        python3 -c "import sys; a, c = float(sys.argv[1]), float(sys.argv[2]); d = abs(a - c) * 100; print('accuracy $p: %.4f, cpu %.4f: %.2f point(s) apart' % (a, c, d)); sys.exit(d > 0.5)" \
            "${a:-0}" "${a_cpu:-1}" || fails=$((fails + 1))
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
    echo "trainer-gpu: $fails failure(s)"
    [ $fails = 0 ]
}
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -gt 0 ]; then
    step trainer-gpu trainer_gpu
    grep -h -E '^(accuracy|resume|cuda graphs|trainer-gpu)' "$OUT/trainer-gpu.log" >>"$SUMMARY"
    step bench python3 "$here/bench/gpu_bench.py" --trainer "$B/trainer" --mpiexec "$MPIEXEC" \
        --data "$DATA" --out "$OUT/bench" ${GPU_BENCH_QUICK:+--quick}
    grep -v '^(json' "$OUT/bench.log" >>"$SUMMARY"
elif [ -n "${GPU_CHECK_TRAINER_ON_CPU:-}" ]; then
    step trainer-gpu trainer_gpu
else
    note "SKIP: trainer-gpu, bench (no GPU)"
fi

step gpu_comm checks tests/gpu_comm.mpi
step gpu_boot checks tests/gpu-boot.sh
step cpu-tests checks tests/comm.mpi tests/ddp.mpi tests/ckpt.mpi

# ------------------------------------------------------------------ measurements
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -gt 0 ]; then
    busbw() {
        for np in 1 2 4; do
            echo "== $np rank(s)"
            GPU_COMM_BENCH=1 timeout 300 "$MPIEXEC" -n "$np" "$B/tests/gpu_comm" | grep -E '^busbw|note' || return 1
        done
    }
    step busbw busbw
    grep -h '^busbw' "$OUT/busbw.log" >>"$SUMMARY"

    # Two NCCL ranks on one GPU: NCCL refuses a duplicate GPU within a host;
    # distinct NCCL_HOSTIDs may let them pass as two hosts over sockets.
    hostid() {
        export DDPC_NCCL_ALLOW_SHARED_GPU=1 NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN DDPC_TIMEOUT=60
        echo "== all-reduce"
        timeout 120 "$MPIEXEC" -n 1 -env NCCL_HOSTID ddpc-a "$B/tests/gpu_boot" : \
            -n 1 -env NCCL_HOSTID ddpc-b "$B/tests/gpu_boot"
        rc=$?
        echo "hostid: two NCCL ranks on one GPU: exit $rc ($([ $rc = 0 ] && echo accepted || echo refused))"
        [ $rc = 0 ] || return 0
        echo "== rank 1 never joins: rank 0's watchdog must end it after DDPC_TIMEOUT=5 s"
        t0=$(date +%s)
        DDPC_TIMEOUT=5 GPU_BOOT_SKIP_RANK=1 timeout 60 "$MPIEXEC" -n 1 -env NCCL_HOSTID ddpc-a \
            "$B/tests/gpu_boot" : -n 1 -env NCCL_HOSTID ddpc-b "$B/tests/gpu_boot"
        rc=$?
        dt=$(($(date +%s) - t0))
        echo "hostid: watchdog: exit $rc after ${dt}s (DDPC_TIMEOUT=5)"
        [ $rc = 3 ] && [ $dt -lt 20 ]
    }
    step hostid hostid
    grep -h '^hostid:' "$OUT/hostid.log" >>"$SUMMARY"
else
    note "SKIP: busbw, hostid (no GPU)"
fi
note "done in $(($(date +%s) - t_start))s; logs in $OUT"
cat "$SUMMARY"
grep -q '^gpu-check: FAIL' "$SUMMARY" && exit 1
exit 0
