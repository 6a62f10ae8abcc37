#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# embed.sh: the embedding example as a user gets it. `make install
# prefix=P`, copy $(docdir)/examples/embed out of P, build it with its
# Makefile (mpicc, pkg-config --cflags --libs ddpc, -Werror), run it on 2
# ranks: the first run trains and checkpoints, the second resumes from the
# step it stopped at and ends exactly where an uninterrupted run ends; a bad
# option and an unusable checkpoint directory end it non-zero with a message.
# A static link of it with gcc and with g++ (libddpc.a, pkg-config --static),
# and a C++17 program against the installed headers, on 2 ranks.
# Once more with nothing but `module load ddpc` (Lmod) to find ddpc.
. "$(dirname "$0")/lib.sh"
mkvar() { # mkvar NAME [MAKE-ARGS]: the value of a make variable of this build
    v=$1; shift
    printf 'ddpc-print-%%:\n\t@echo $($*)\n' | env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
        make -s --no-print-directory -C "$top_builddir" -f Makefile -f - "$@" "ddpc-print-$v"
}
umake() { # umake ARGS: make as a user runs it (nothing inherited from make check)
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make "$@"
}
P="$TMP/prefix"
make -s -C "$top_builddir" install prefix="$P" >"$TMP/install.log" 2>&1 \
    || { tail -20 "$TMP/install.log"; fail "make install prefix=$P"; }
embeddir=$(mkvar embeddir prefix="$P") mfdir=$(mkvar modulefilesdir prefix="$P")
for f in embed.c Makefile README.md; do
    [ -f "$embeddir/$f" ] || fail "examples/embed/$f not installed in ${embeddir#"$P"/} (under the prefix)"
done

# ddpc.pc is written at install time: after `make install prefix=P` plain
# pkg-config must give P's flags
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
PKGC=pkg-config
pc_prefix=$(pkg-config --variable=prefix ddpc) || fail "pkg-config finds no ddpc.pc in $P/lib/pkgconfig"
[ "$pc_prefix" = "$P" ] || fail "the installed ddpc.pc says prefix=$pc_prefix, not $P"
cflags=$($PKGC --cflags ddpc) libs=$($PKGC --libs ddpc)
case " $cflags " in *" -I$P/include "*) ;; *) fail "$PKGC --cflags ddpc: want -I$P/include, got: $cflags" ;; esac
case " $libs " in *" -L$P/lib "*) ;; *) fail "$PKGC --libs ddpc: want -L$P/lib, got: $libs" ;; esac
echo "ok: installed with prefix=P: examples/embed in ${embeddir#"$P"/}, $PKGC gives P's flags"

# build the user's copy; its Makefile records P/lib as rpath: no LD_LIBRARY_PATH
cp -r "$embeddir" "$TMP/embed"
umake -C "$TMP/embed" CC="$MPICC" PKG_CONFIG="$PKGC" CFLAGS="-O2 -std=c11 -Wall -Wextra -Wpedantic -Werror" \
    >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; fail "make in the copied examples/embed"; }
cd "$TMP/embed" || fail "cd $TMP/embed"
[ -x ./embed ] || fail "make in examples/embed built no ./embed"
env -u LD_LIBRARY_PATH ldd ./embed | grep -q "$P/lib/libddpc" \
    || { ldd ./embed; fail "./embed does not load libddpc from $P/lib"; }

run() { # run OUT ARGS: ./embed on 2 ranks, output in $TMP/OUT
    out="$TMP/$1"; shift
    (unset LD_LIBRARY_PATH; mpirun_t 2 ./embed "$@") >"$out" 2>&1 \
        || { rc=$?; cat "$out"; fail "mpiexec -n 2 ./embed $* (exit $rc)"; }
}
run first --steps 20 --save-every 5 --ckpt-dir "$TMP/ck"
grep -q '^start: fresh, 2 ranks' "$TMP/first" && grep -q '^step=20 loss=[0-9.]* checkpoint saved' "$TMP/first" \
    && grep -q '^done: step=20 loss=' "$TMP/first" || { cat "$TMP/first"; fail "first run: no fresh start, checkpoint or end"; }
[ -f "$TMP/ck/ckpt-00000020.h5" ] || { ls -l "$TMP/ck"; fail "first run: no checkpoint ckpt-00000020.h5"; }
run second --steps 40 --save-every 5 --ckpt-dir "$TMP/ck"
grep -q "^start: resumed step=20 from $TMP/ck/ckpt-00000020.h5" "$TMP/second" \
    || { cat "$TMP/second"; fail "second run: did not say it resumed from step 20"; }
[ "$(grep -m1 '^step=' "$TMP/second" | cut -d' ' -f1)" = step=21 ] \
    || { cat "$TMP/second"; fail "second run: did not continue at step 21"; }
# the same 40 steps in one go: a resume restores parameters and momentum exactly
run whole --steps 40 --save-every 5 --ckpt-dir "$TMP/ck-whole"
a=$(grep '^done:' "$TMP/second") b=$(grep '^done:' "$TMP/whole")
[ -n "$a" ] && [ "$a" = "$b" ] || { cat "$TMP/second" "$TMP/whole"; fail "resumed run ends at '$a', uninterrupted at '$b'"; }
l1=$(grep -m1 '^step=1 ' "$TMP/first" | sed 's/.*loss=\([0-9.]*\).*/\1/')
l40=$(echo "$a" | sed 's/.*loss=//')
awk -v a="$l1" -v b="$l40" 'BEGIN { exit !(b < a) }' || { cat "$TMP/first" "$TMP/second"; fail "the loss did not go down: step 1 $l1, step 40 $l40"; }
echo "ok: embed trained 20 steps on 2 ranks, resumed at step 20, ends as 40 steps in one go (loss $l1 at step 1, $l40 at 40)"
expect_fail_msg 'embed: parsing the options failed: invalid argument or option: --bogus' \
    mpirun_t 2 ./embed --bogus 1
# (whichever rank aborts first ends the others: rank 1's message quotes rank 0's)
expect_fail_msg 'embed: ddpc_ckpt_load failed: input/output error: ddpc\[rank [01]/2 .*directory /dev/null/ck' \
    mpirun_t 2 ./embed --ckpt-dir /dev/null/ck

# a static link with a plain compiler (no MPI wrapper): libddpc.a and
# pkg-config --static, whose Libs.private must carry MPI's flags; once linked
# by gcc, once by g++ (a C++ program's link)
if [ -f "$P/lib/libddpc.a" ]; then
    slibs=$($PKGC --static --libs ddpc | sed -e 's/ -lddpc / /' -e 's/^-lddpc //' -e 's/ -lddpc$//')
    for pc in $($PKGC --static --libs ddpc); do
        case $pc in -L*|-Wl,-rpath,*) ;; *) continue ;; esac
        [ "$($PKGC --static --libs ddpc | tr ' ' '\n' | grep -cxF -- "$pc")" -eq 1 ] ||
            fail "$PKGC --static --libs ddpc repeats $pc"
    done
    gcc -O2 -std=c11 -c -o "$TMP/embed.o" "$TMP/embed/embed.c" $($PKGC --cflags ddpc) ||
        fail "gcc -c embed.c with pkg-config --cflags ddpc"
    for ld in gcc g++; do
        # shellcheck disable=SC2086
        $ld -o "$TMP/embed-static-$ld" "$TMP/embed.o" "$P/lib/libddpc.a" $slibs >"$TMP/static.log" 2>&1 ||
            { cat "$TMP/static.log"; fail "$ld embed.o libddpc.a \$($PKGC --static --libs ddpc): the static link"; }
        ! env -u LD_LIBRARY_PATH ldd "$TMP/embed-static-$ld" | grep -q libddpc ||
            fail "the static $ld link of embed still loads libddpc.so"
        (unset LD_LIBRARY_PATH; mpirun_t 2 "$TMP/embed-static-$ld" --steps 10 --ckpt-dir "$TMP/ck-static-$ld") \
            >"$TMP/static-$ld" 2>&1 || { cat "$TMP/static-$ld"; fail "mpiexec -n 2 embed-static-$ld"; }
        grep -q '^done: step=10 loss=' "$TMP/static-$ld" || { cat "$TMP/static-$ld"; fail "the static $ld build of embed"; }
    done
    echo "ok: embed linked statically (libddpc.a + pkg-config --static) by gcc and by g++, runs on 2 ranks"
else
    echo "note: no $P/lib/libddpc.a (configure --disable-static): no static link tried"
fi

# a C++ program against the installed headers: -std=c++17 -Wall -Wextra -Werror -pedantic
if command -v g++ >/dev/null; then
    # shellcheck disable=SC2046
    g++ -std=c++17 -Wall -Wextra -Werror -pedantic -o "$TMP/cxx_hello" "$top_srcdir/tests/cxx_hello.cpp" \
        $($PKGC --cflags --libs ddpc) -Wl,-rpath,"$P/lib" >"$TMP/cxx.log" 2>&1 ||
        { cat "$TMP/cxx.log"; fail "g++ -std=c++17 -Werror -pedantic tests/cxx_hello.cpp against the installed ddpc"; }
    (unset LD_LIBRARY_PATH; mpirun_t 2 "$TMP/cxx_hello") >"$TMP/cxx.out" 2>&1 || { cat "$TMP/cxx.out"; fail "mpiexec -n 2 cxx_hello"; }
    [ "$(grep -c '^cxx: rank [01]/2 sum=3$' "$TMP/cxx.out")" -eq 2 ] || { cat "$TMP/cxx.out"; fail "cxx_hello: expected sum=3 on both ranks"; }
    echo "ok: a C++17 program (-Wall -Wextra -Werror -pedantic) builds against the installed ddpc and runs on 2 ranks"
else
    fail "no g++ here to build a C++ program against ddpc (apt-get install g++)"
fi

# with Lmod: nothing but `module load ddpc`
init=/usr/share/lmod/lmod/init/bash
[ -f "$init" ] && command -v bash >/dev/null || skip "no Lmod here (apt-get install lmod) to build with module load ddpc (every other check passed)"
cp -r "$embeddir" "$TMP/embed-mod"
env -i HOME="$TMP" PATH=/usr/bin:/bin MPICC="$MPICC" PKGC="$PKGC" bash --norc --noprofile -c \
    ". $init && module use '$mfdir' && module load ddpc && cd '$TMP/embed-mod' &&
     make CC=\"\$MPICC\" PKG_CONFIG=\"\$PKGC\" && ldd ./embed | grep libddpc" >"$TMP/mod.log" 2>&1 \
    || { cat "$TMP/mod.log"; fail "module load ddpc && make in examples/embed"; }
grep -q "libddpc.so.* => $P/lib/" "$TMP/mod.log" || { cat "$TMP/mod.log"; fail "the module-built ./embed does not load $P/lib/libddpc"; }
cd "$TMP/embed-mod" || fail "cd $TMP/embed-mod"
run mod-run --steps 5 --ckpt-dir "$TMP/ck-mod"
grep -q '^done: step=5 loss=' "$TMP/mod-run" || { cat "$TMP/mod-run"; fail "the module-built ./embed"; }
echo "ok: module load ddpc && make builds examples/embed, and it runs"
