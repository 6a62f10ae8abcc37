#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# trainer-shard.sh: the trainer under DDPC_SHARD on the cpu, 2 ranks of one
# thread each (so the engine's overlap is off by its own choice and every
# bucket's collectives run blocking in the wait: the path where MPICH 4.0's
# blocking MPI_Reduce with MPI_IN_PLACE at the root crashed DDPC_SHARD=grads;
# ddpc now always reduces with MPI_Ireduce):
#  - AdamW, 60 steps: DDPC_SHARD=optim and grads end with the unsharded
#    run's params_crc32 (2 ranks: each sum has two terms, so the reduce and
#    the all-reduce round alike on any MPI)
#  - a DDPC_SHARD=grads run stopped at 30 (checkpoint) and resumed with
#    DDPC_SHARD=optim, and an unsharded one resumed with grads, end bitwise
#    as the uninterrupted unsharded run: the checkpoint's format does not
#    depend on the sharding
#  - with DDPC_OVERLAP=1, the trainer's DDPC_SHARD_GATHER=forward (the
#    updated slices broadcast by bucket, each waited for by the forward's
#    layer) and DDPC_SHARD_GATHER=step (one all-gather) end alike
# and, where the trainer has a CUDA device (a GPU, or the device emulation:
# configure --with-cuda=emulate), the same on --device cuda (the sharded
# step on device arenas: the slices' norms all-gathered, the updated slices
# broadcast by bucket and waited for on the stream by the forward's layers,
# or all-gathered at the step's end with DDPC_SHARD_GATHER=step, the
# checkpoint gathered through the bounce buffer), plus
# --clip 0.5 sharded against unsharded (the norm's double sum is regrouped
# by slice: equal within rounding) and --cuda-graph on where graphs are
# captured (nccl: the shard all-gathers captured with the step; the eager
# warm-up steps' gathers in the forward waited for before the capture).
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
COMMON="--data $DATA --device cpu --hidden 96,48 --threads 1 --seed 3 --optimizer adamw --batch-size 32"

# the engine's build line says how it gathers
DDPC_LOG_LEVEL=info
export DDPC_LOG_LEVEL
final() { # the final line's field $2 of file $1
    sed -n "s/^final: .*$2=\([^ ]*\).*$/\1/p" "$1"
}
run() { # name shard steps ckpt-dir [trainer options...]
    n=$1 sh=$2 steps=$3 ck=$4
    shift 4
    # shellcheck disable=SC2086
    DDPC_SHARD=$sh mpirun_t 2 "$TRAINER" $COMMON --max-steps "$steps" --ckpt-dir "$ck" \
        --log-every 30 "$@" >"$TMP/$n.out" 2>&1 ||
        { cat "$TMP/$n.out"; fail "DDPC_SHARD=$sh run $n (exit status)"; }
}

# DDPC_SHARD=optim and grads, 60 steps, end with params_crc32 $3 (runs
# named $1optim, $1grads; $2 prefixes the messages)
sharded_equal() {
    pre=$1 where=$2 want=$3
    for s in optim grads; do
        run "$pre$s" "$s" 60 none
        got=$(final "$TMP/$pre$s.out" params_crc32)
        [ "$got" = "$want" ] ||
            { cat "$TMP/$pre$s.out"; fail "${where}DDPC_SHARD=$s: params_crc32=$got, unsharded $want"; }
    done
}
# stopped at 30 under one setting, resumed to 60 under another: ends with
# params_crc32 $3 (runs and checkpoint directories prefixed $1)
resumes_across() {
    pre=$1 where=$2 want=$3
    for pair in grads:optim none:grads; do
        a=${pair%:*} b=${pair#*:}
        o=$TMP/$pre$a-then-$b.out
        run "$pre$a-first" "$a" 30 "$TMP/${pre}ck-$a"
        run "$pre$a-then-$b" "$b" 60 "$TMP/${pre}ck-$a"
        grep -q "resum" "$o" || { cat "$o"; fail "${where}DDPC_SHARD=$b did not resume"; }
        got=$(final "$o" params_crc32)
        [ "$got" = "$want" ] || { cat "$o"
            fail "${where}stopped with DDPC_SHARD=$a, resumed with $b: params_crc32=$got, uninterrupted $want"; }
        echo "ok${where:+ ($kind)}: stopped at 30 with DDPC_SHARD=$a, resumed with $b:" \
            "params_crc32=$want as uninterrupted"
    done
}

run none none 60 none
ref=$(final "$TMP/none.out" params_crc32)
[ -n "$ref" ] || { cat "$TMP/none.out"; fail "no final line in the unsharded run"; }
sharded_equal "" "" "$ref"
echo "ok: DDPC_SHARD=optim and grads at 2 ranks (overlap off) end with the unsharded params_crc32=$ref"
# the trainer asks for DDPC_SHARD_GATHER=forward (the updated slices
# broadcast by bucket, waited for by layer in the next forward); the engine
# takes it where its overlap is on (here, 1-thread ranks on 2 cores, off:
# it gathers at the step's end), so DDPC_OVERLAP=1 puts it in effect
grep -q "gathered at the step's end" "$TMP/optim.out" ||
    { cat "$TMP/optim.out"; fail "overlap off: the sharded engine does not gather at the step's end"; }
DDPC_OVERLAP=1
export DDPC_OVERLAP
for g in forward step; do # forward: the trainer's own request
    case $g in
    forward) said="gathered by bucket in the forward" ;;
    step)
        said="gathered at the step's end"
        DDPC_SHARD_GATHER=step
        export DDPC_SHARD_GATHER
        ;;
    esac
    run "$g" optim 60 none
    got=$(final "$TMP/$g.out" params_crc32)
    [ "$got" = "$ref" ] ||
        { cat "$TMP/$g.out"; fail "DDPC_OVERLAP=1, gathered $g: params_crc32=$got, unsharded $ref"; }
    grep -q "$said" "$TMP/$g.out" || { cat "$TMP/$g.out"; fail "DDPC_OVERLAP=1: not $said"; }
done
unset DDPC_OVERLAP DDPC_SHARD_GATHER
echo "ok: DDPC_SHARD_GATHER=step (one all-gather) and forward (by bucket, in the forward): params_crc32=$ref"

# stop at 30 under one setting, resume to 60 under another
resumes_across "" "" "$ref"

# ---- --device cuda, where there is one (or the emulation)
probe=$TMP/probe
# shellcheck disable=SC2086
mpirun_t 1 "$TRAINER" $COMMON --device cuda --max-steps 1 --ckpt-dir none >"$probe" 2>&1 || {
    grep -Eq 'built without the CUDA model|no CUDA device visible|no usable GPU' "$probe" || {
        cat "$probe"; fail "the 1-step CUDA probe failed"
    }
    echo "device part not run: no CUDA trainer or device here: $(grep -E -m1 'cuda' "$probe")"
    exit 0
}
kind=GPU
grep -q '(emulated)' "$probe" && kind="emulated GPU"
COMMON="$COMMON --device cuda"
run cnone none 60 none
cref=$(final "$TMP/cnone.out" params_crc32)
[ -n "$cref" ] || { cat "$TMP/cnone.out"; fail "no final line in the unsharded CUDA run"; }
sharded_equal c "--device cuda, " "$cref"
# a device engine takes the trainer's DDPC_SHARD_GATHER=forward without a
# core to spare (stream-ordered: the model's layers wait on the stream)
grep -q "gathered by bucket in the forward" "$TMP/coptim.out" ||
    { cat "$TMP/coptim.out"; fail "--device cuda: the sharded engine does not gather in the forward"; }
DDPC_SHARD_GATHER=step run cstep optim 60 none
grep -q "gathered at the step's end" "$TMP/cstep.out" && [ "$(final "$TMP/cstep.out" params_crc32)" = "$cref" ] ||
    { cat "$TMP/cstep.out"; fail "--device cuda, DDPC_SHARD_GATHER=step: not the unsharded run"; }
echo "ok ($kind): DDPC_SHARD=optim and grads at 2 ranks (gathered in the forward, and optim at the step's end) end with the unsharded params_crc32=$cref"
resumes_across c "--device cuda: " "$cref"
# clipping on every step (0.5 is below this MLP's gradient norms): the
# sharded norm regroups the double sum by slice, so equal within rounding
run cclip none 60 none --clip 0.5
for s in optim grads; do
    run "cclip$s" "$s" 60 none --clip 0.5
    python3 - "$(final "$TMP/cclip$s.out" test_loss)" "$(final "$TMP/cclip.out" test_loss)" "$s" <<'EOF' ||
import sys
got, want, s = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
e = abs(got - want) / want
print("--clip 0.5, DDPC_SHARD=%s: test loss %.6g, unsharded %.6g (%.2g relative, tolerance 1e-4)"
      % (s, got, want, e))
sys.exit(not e <= 1e-4)
EOF
        { cat "$TMP/cclip$s.out"; fail "--device cuda --clip 0.5 DDPC_SHARD=$s is not the unsharded run"; }
done
# graphs: the shard all-gathers captured with the step, bitwise the eager
# unsharded run on the same backend (nccl: a GPU per rank; the emulation
# gets two devices per process)
[ "$kind" = "emulated GPU" ] && DDPC_EMU_DEVICES=${DDPC_EMU_DEVICES:-2} && export DDPC_EMU_DEVICES
run cgeager none 60 none
run cgraph grads 60 none --cuda-graph on
if grep -q 'without CUDA graphs' "$TMP/cgraph.out"; then
    echo "graphs not captured here: $(grep -m1 'without CUDA graphs' "$TMP/cgraph.out")"
else
    want=$(final "$TMP/cgeager.out" params_crc32)
    got=$(final "$TMP/cgraph.out" params_crc32)
    [ -n "$want" ] && [ "$got" = "$want" ] || { cat "$TMP/cgraph.out"
        fail "--cuda-graph on, DDPC_SHARD=grads: params_crc32=$got, eager unsharded $want"; }
    echo "ok ($kind): --cuda-graph on with DDPC_SHARD=grads: params_crc32=$want as the eager unsharded run"
fi
