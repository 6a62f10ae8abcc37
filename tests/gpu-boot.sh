#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# gpu-boot.sh: the nccl backend's bootstrap under mpiexec (the unique id and
# every rank's GPU check through MPI). Without a GPU (here and in CI) every
# rank must stop with one message naming the ranks without a usable GPU, not
# hang; with one GPU, one rank all-reduces through NCCL.
. "$(dirname "$0")/lib.sh"
[ -x "$top_builddir/tests/gpu_boot" ] || skip "built without NCCL (configure --with-nccl)"
export DDPC_BACKEND=nccl
if [ "$DDPC_CUDA_EMULATED" = yes ]; then
    # the emulated device (configure --with-cuda=emulate): NCCL's own rules
    # and the watchdog's paths, with the emulation's hooks
    export DDPC_TIMEOUT=2
    # with VAR=VALUE... -- CMD...: CMD (a function too) with those variables
    with() { (while [ "$1" != -- ]; do export "${1?}"; shift; done; shift; "$@"); }
    with DDPC_EMU_DEVICES=2 -- mpirun_t 2 "$top_builddir/tests/gpu_boot" >"$TMP/ok" 2>&1 \
        || { cat "$TMP/ok"; fail "2 ranks, 2 emulated GPUs"; }
    [ "$(grep -c 'backend nccl on GPU [01]: ok' "$TMP/ok")" -eq 2 ] || { cat "$TMP/ok"; fail "2 ranks: not ok"; }
    echo "ok: 2 ranks on 2 emulated GPUs through the emulated NCCL"
    # two ranks on one GPU: ddpc refuses first; forced past it, NCCL itself refuses
    expect_fail_msg 'ranks 0 and 1 on .* share GPU' with DDPC_EMU_DEVICES=1 -- mpirun_t 2 "$top_builddir/tests/gpu_boot"
    expect_fail_msg 'Duplicate GPU detected' with DDPC_EMU_DEVICES=1 DDPC_NCCL_ALLOW_SHARED_GPU=1 -- \
        mpirun_t 2 "$top_builddir/tests/gpu_boot"
    # a collective that never completes on rank 0: both watchdogs end it after DDPC_TIMEOUT
    expect_fail_msg 'rank 0/2 [^]]*\] error: comm: allreduce #0 .*did not complete within 2s' with DDPC_EMU_DEVICES=2 \
        DDPC_EMU_NCCL_HANG=0:1 -- mpirun_t 2 "$top_builddir/tests/gpu_boot"
    # one that fails asynchronously on rank 1: NCCL's error, seen by the watchdog or
    # by the call's own polling (whichever polls first)
    expect_fail_msg 'rank 1/2.*(NCCL asynchronous error|NCCL failed).*remote process exited' with DDPC_EMU_DEVICES=2 \
        DDPC_EMU_NCCL_FAIL=1:1 -- mpirun_t 2 "$top_builddir/tests/gpu_boot"
    # a rank that never joins: the others time out (the script's watchdog experiment)
    with DDPC_EMU_DEVICES=2 GPU_BOOT_SKIP_RANK=1 -- mpirun_t 2 "$top_builddir/tests/gpu_boot" >"$TMP/skip" 2>&1
    rc=$?
    # 3 from rank 0, or 9 where hydra reports the sleeping rank it killed first
    [ $rc -eq 3 ] || [ $rc -eq 9 ] && grep -q 'rank 0: timed out as expected' "$TMP/skip" \
        || { cat "$TMP/skip"; fail "GPU_BOOT_SKIP_RANK=1: exit $rc, expected 3 (or 9) and rank 0's timeout"; }
    echo "ok: emulated NCCL: duplicate GPU refused, a hung and a failed collective end by the watchdog"
    DDPC_EMU_DEVICES=0
    export DDPC_EMU_DEVICES
    unset DDPC_TIMEOUT
    # and without a device: the message below
elif [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -gt 0 ]; then
    mpirun_t 1 "$top_builddir/tests/gpu_boot" || fail "1-rank NCCL communicator on the GPU"
    echo "ok: 1 rank on the GPU through NCCL"
    exit 0
fi
for np in 1 2; do
    expect_fail_msg "comm: backend nccl: no usable GPU on $np of $np rank\(s\): 0 \\($(hostname -s)\\)" \
        mpirun_t $np "$top_builddir/tests/gpu_boot"
    [ "$(grep -c "no usable GPU on $np of $np" "$TMP/out")" -eq $np ] \
        || { cat "$TMP/out"; fail "expected the message on each of $np ranks"; }
done
echo "ok: no GPU: every rank stops with one message"
