#!/bin/sh
# modulefile.sh: `make install` puts the Lmod modulefile in
# $(datadir)/modulefiles/ddpc.lua with this build's install directories, and
# the sbatch scripts in $(pkgdatadir)/slurm; with Lmod installed, `module
# load ddpc` sets DDPC_ROOT and prepends PATH, LD_LIBRARY_PATH,
# PKG_CONFIG_PATH, CPATH and MANPATH.
. "$(dirname "$0")/lib.sh"
ROOT="$TMP/root"
make -s -C "$top_builddir" install DESTDIR="$ROOT" >"$TMP/install.log" 2>&1 \
    || { tail -20 "$TMP/install.log"; fail "make install"; }
mkvar() { # the value of a make variable of this build
    printf 'ddpc-print-%%:\n\t@echo $($*)\n' | env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
        make -s --no-print-directory -C "$top_builddir" -f Makefile -f - "ddpc-print-$1"
}
prefix=$(mkvar prefix) bindir=$(mkvar bindir) libdir=$(mkvar libdir)
includedir=$(mkvar includedir) mandir=$(mkvar mandir) datadir=$(mkvar datadir)
pkgdatadir=$(mkvar pkgdatadir)
[ -n "$prefix" ] && [ -n "$datadir" ] || fail "cannot read the install directories from the Makefile"
lua="$ROOT$datadir/modulefiles/ddpc.lua"
[ -f "$lua" ] || fail "modulefile not installed at $datadir/modulefiles/ddpc.lua"
for s in train-cpu.sbatch train-gpu.sbatch train-preemptible.sbatch; do
    [ -x "$ROOT$pkgdatadir/slurm/$s" ] || fail "$s not installed in $pkgdatadir/slurm"
done
for want in "setenv(\"DDPC_ROOT\", base)" "local base = \"$prefix\"" \
             "prepend_path(\"PATH\", \"$bindir\")" "prepend_path(\"LD_LIBRARY_PATH\", \"$libdir\")" \
             "prepend_path(\"PKG_CONFIG_PATH\", \"$libdir/pkgconfig\")" \
             "prepend_path(\"CPATH\", \"$includedir\")" "prepend_path(\"MANPATH\", \"$mandir\")" \
             'help([[' 'whatis("Version: '; do
    grep -qF "$want" "$lua" || { cat "$lua"; fail "modulefile lacks: $want"; }
done
grep -q '@[a-zA-Z_]*@' "$lua" && { cat "$lua"; fail "modulefile has unsubstituted @...@"; }
echo "ok: modulefile and sbatch scripts installed"

init=/usr/share/lmod/lmod/init/bash
[ -f "$init" ] && command -v bash >/dev/null || skip "no Lmod here (apt-get install lmod) to load the modulefile"
bash -c ". $init && module use '$ROOT$datadir/modulefiles' && module load ddpc &&
         echo \"ROOT=\$DDPC_ROOT PATH=\${PATH%%:*} LD=\${LD_LIBRARY_PATH%%:*} CPATH=\${CPATH%%:*}\"" \
    >"$TMP/lmod" 2>&1 || { cat "$TMP/lmod"; fail "module load ddpc"; }
grep -qx "ROOT=$prefix PATH=$bindir LD=$libdir CPATH=$includedir" "$TMP/lmod" \
    || { cat "$TMP/lmod"; fail "module load ddpc set the wrong environment"; }
echo "ok: module load ddpc"
