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
. "$(dirname "$0")/lib.sh"
TRAINER="$top_builddir/trainer"
need_fmnist
COMMON="--data $DATA --device cpu --hidden 96,48 --threads 1 --seed 3 --optimizer adamw --batch-size 32"

final() { # the final line's field $2 of file $1
    sed -n "s/^final: .*$2=\([^ ]*\).*$/\1/p" "$1"
}
run() { # name shard steps ckpt-dir
    # shellcheck disable=SC2086
    DDPC_SHARD=$2 mpirun_t 2 "$TRAINER" $COMMON --max-steps "$3" --ckpt-dir "$4" --log-every 30 \
        >"$TMP/$1.out" 2>&1 || { cat "$TMP/$1.out"; fail "DDPC_SHARD=$2 run $1 (exit status)"; }
}

run none none 60 none
ref=$(final "$TMP/none.out" params_crc32)
[ -n "$ref" ] || { cat "$TMP/none.out"; fail "no final line in the unsharded run"; }
for s in optim grads; do
    run "$s" "$s" 60 none
    got=$(final "$TMP/$s.out" params_crc32)
    [ "$got" = "$ref" ] || { cat "$TMP/$s.out"; fail "DDPC_SHARD=$s: params_crc32=$got, unsharded $ref"; }
done
echo "ok: DDPC_SHARD=optim and grads at 2 ranks (overlap off) end with the unsharded params_crc32=$ref"

# stop at 30 under one setting, resume to 60 under another
for pair in grads:optim none:grads; do
    a=${pair%:*} b=${pair#*:}
    run "$a-first" "$a" 30 "$TMP/ck-$a"
    run "$a-then-$b" "$b" 60 "$TMP/ck-$a"
    grep -q "resum" "$TMP/$a-then-$b.out" || { cat "$TMP/$a-then-$b.out"; fail "DDPC_SHARD=$b did not resume"; }
    got=$(final "$TMP/$a-then-$b.out" params_crc32)
    [ "$got" = "$ref" ] || { cat "$TMP/$a-then-$b.out"; fail "stopped with DDPC_SHARD=$a, resumed with $b: params_crc32=$got, uninterrupted $ref"; }
    echo "ok: stopped at 30 with DDPC_SHARD=$a, resumed with $b: params_crc32=$ref as uninterrupted"
done
