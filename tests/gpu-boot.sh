#!/bin/sh
# gpu-boot.sh: the nccl backend's bootstrap under mpiexec (the unique id and
# every rank's GPU check through MPI). Without a GPU (here and in CI) every
# rank must stop with one message naming the ranks without a usable GPU, not
# hang; with one GPU, one rank all-reduces through NCCL.
. "$(dirname "$0")/lib.sh"
[ -x "$top_builddir/tests/gpu_boot" ] || skip "built without NCCL (configure --with-nccl)"
export DDPC_BACKEND=nccl
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -gt 0 ]; then
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
