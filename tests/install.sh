#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# install.sh: `make install` into a staging root gives the headers, the
# library, ddpc-info and ddpc.pc; a program built only with what
# `pkg-config --cflags --libs ddpc` says links and runs under mpiexec; `make
# uninstall` with the same DESTDIR leaves no file behind.
. "$(dirname "$0")/lib.sh"
ROOT="$TMP/root"
make -s -C "$top_builddir" install DESTDIR="$ROOT" >"$TMP/install.log" 2>&1 \
    || { tail -20 "$TMP/install.log"; fail "make install"; }
pc=$(find "$ROOT" -name ddpc.pc | head -n1)
[ -n "$pc" ] || fail "ddpc.pc not installed"
for f in ddpc.h ddpc_core.h ddpc_comm.h ddpc_ddp.h; do
    [ -n "$(find "$ROOT" -name "$f")" ] || fail "header $f not installed"
done
info=$(find "$ROOT" -name ddpc-info -type f | head -n1)
[ -x "$info" ] || fail "ddpc-info not installed"
cat >"$TMP/hello.c" <<'C'
#include <ddpc.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    ddpc_t rt;
    if (ddpc_init(NULL, &argc, &argv, &rt) != DDPC_OK)
        return 1;
    int one = 1, sum = 0;
    if (ddpc_allreduce(ddpc_comm_world(rt), &one, &sum, 1, DDPC_I32, DDPC_SUM) != DDPC_OK)
        return 1;
    if (ddpc_world(rt)->rank == 0)
        printf("hello from ddpc %s: %d ranks\n", ddpc_version(), sum);
    ddpc_finalize(rt);
    return 0;
}
C
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$ROOT"
# shellcheck disable=SC2046
$MPICC -o "$TMP/hello" "$TMP/hello.c" $(pkg-config --cflags --libs ddpc) \
    || fail "building against the installed ddpc with pkg-config"
LD_LIBRARY_PATH="$(dirname "$pc")/.." mpirun_t 2 "$TMP/hello" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "running it"; }
grep -q "hello from ddpc $(cat "$top_srcdir/VERSION"): 2 ranks" "$TMP/out" || { cat "$TMP/out"; fail "output"; }
echo "ok: installed tree builds and runs a program"

# make uninstall with the same DESTDIR removes every file make install put
# there (directories may stay, as automake leaves them)
make -s -C "$top_builddir" uninstall DESTDIR="$ROOT" >"$TMP/uninstall.log" 2>&1 \
    || { tail -20 "$TMP/uninstall.log"; fail "make uninstall"; }
left=$(find "$ROOT" ! -type d | sed "s|^$ROOT||")
[ -z "$left" ] || fail "make uninstall DESTDIR=X left files under X: $left"
echo "ok: make uninstall leaves no files in the DESTDIR root"
