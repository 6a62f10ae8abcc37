#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# modulefile.sh: `make install` writes the modulefiles with the final install
# directories: $(modulefilesdir)/ddpc/VERSION.lua (Lmod) and its Tcl twin
# $(tclmodulefilesdir)/ddpc/VERSION (Environment Modules), and puts the sbatch
# scripts in $(pkgdatadir)/slurm. Checked here:
#  - DESTDIR install: the files are where they belong and name the prefix's
#    directories, never DESTDIR;
#  - the Tcl twin under tclsh with stub module commands (the environment it
#    sets, its whatis and help), and loaded by Lmod, which also reads Tcl;
#  - Lmod: syntax checks, load, help, whatis, show; two versions side by side
#    in one central tree (one prefix per version), each loaded in turn, the
#    default the highest, a load swapping the other out, unload;
#  - `make install prefix=P2` writes P2's directories, its ddpc-info runs
#    after `module load`, and `make uninstall prefix=P2` removes the
#    modulefiles and their ddpc/ directories (tests/install.sh checks that
#    uninstall leaves no file at all).
. "$(dirname "$0")/lib.sh"
mkvar() { # the value of a make variable of this build
    printf 'ddpc-print-%%:\n\t@echo $($*)\n' | env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
        make -s --no-print-directory -C "$top_builddir" -f Makefile -f - "ddpc-print-$1"
}
minst() { # minst LOG MAKE-ARGS...: run make in the build tree, or fail showing the log
    log="$TMP/$1"; shift
    make -s -C "$top_builddir" "$@" >"$log" 2>&1 || { tail -20 "$log"; fail "make $*"; }
}
V=$(mkvar PACKAGE_VERSION) prefix=$(mkvar prefix) bindir=$(mkvar bindir) libdir=$(mkvar libdir)
includedir=$(mkvar includedir) mandir=$(mkvar mandir)
slurmdir=$(mkvar slurmdir) mfdir=$(mkvar modulefilesdir) tcldir=$(mkvar tclmodulefilesdir)
url=$(mkvar DDPC_URL)
[ -n "$V" ] && [ -n "$prefix" ] && [ -n "$mfdir" ] && [ -n "$tcldir" ] \
    || fail "cannot read the install directories from the Makefile"
skipped=""

# ---------------------------------------------------------------- DESTDIR install
ROOT="$TMP/root"
minst install.log install DESTDIR="$ROOT"
lua="$ROOT$mfdir/ddpc/$V.lua" tcl="$ROOT$tcldir/ddpc/$V"
[ -f "$lua" ] || fail "Lmod modulefile not installed at $mfdir/ddpc/$V.lua"
[ -f "$tcl" ] || fail "Tcl modulefile not installed at $tcldir/ddpc/$V"
[ ! -e "$ROOT$mfdir/ddpc.lua" ] || fail "the old flat $mfdir/ddpc.lua is still installed"
for s in train-cpu.sbatch train-gpu.sbatch train-preemptible.sbatch; do
    [ -x "$ROOT$slurmdir/$s" ] || fail "$s not installed in $slurmdir"
done
for want in "local base = \"$prefix\"" "setenv(\"DDPC_ROOT\", base)" 'family("ddpc")' \
             "prepend_path(\"PATH\", \"$bindir\")" "prepend_path(\"LD_LIBRARY_PATH\", \"$libdir\")" \
             "prepend_path(\"PKG_CONFIG_PATH\", \"$libdir/pkgconfig\")" \
             "prepend_path(\"CPATH\", \"$includedir\")" "prepend_path(\"MANPATH\", \"$mandir\")" \
             'append_path("MANPATH", "")' \
             'help([[' 'whatis("Name: ddpc")' "whatis(\"Version: $V\")" 'whatis("Description: ' \
             "whatis(\"URL: $url\")"; do
    grep -qF "$want" "$lua" || { cat "$lua"; fail "$mfdir/ddpc/$V.lua lacks: $want"; }
done
head -n1 "$tcl" | grep -q '^#%Module' || fail "$tcldir/ddpc/$V does not start with #%Module"
for want in 'proc ModulesHelp' 'conflict ddpc' "set base \"$prefix\"" 'setenv DDPC_ROOT $base' \
             "prepend-path PATH \"$bindir\"" "prepend-path MANPATH \"$mandir\"" 'append-path MANPATH {}'; do
    grep -qF "$want" "$tcl" || { cat "$tcl"; fail "$tcldir/ddpc/$V lacks: $want"; }
done
for f in "$lua" "$tcl"; do
    ! grep -n '@[a-zA-Z_]*@' "$f" || fail "$f has unsubstituted @...@"
    ! grep -nF "$ROOT" "$f" || fail "$f names the DESTDIR staging root"
done
echo "ok: modulefiles at $mfdir/ddpc/$V.lua and $tcldir/ddpc/$V (no DESTDIR in them), sbatch scripts in $slurmdir"

# ---------------------------------------------------------------- the Tcl twin under tclsh
# Environment Modules is not installable beside Lmod (Debian: they conflict):
# run the file with stubs of the commands it may use; any other command fails.
cat >"$TMP/stub.tcl" <<'TCL'
rename puts tcl_puts
proc puts {args} { ;# ModulesHelp writes to stderr: "help: LINE"
    if {[llength $args] == 2 && [lindex $args 0] eq "stderr"} {
        tcl_puts stdout "help: [lindex $args 1]"
    } else { tcl_puts {*}$args }
}
proc module-whatis {s} { tcl_puts "whatis $s" }
proc conflict {args} { tcl_puts "conflict $args" }
proc setenv {name value} { tcl_puts "setenv $name $value" }
proc prepend-path {var value} { tcl_puts "prepend-path $var $value" }
proc append-path {var value} { tcl_puts "append-path $var <$value>" }
source [lindex $argv 0]
if {[info procs ModulesHelp] eq ""} { error "no proc ModulesHelp" }
ModulesHelp
TCL
if command -v tclsh >/dev/null; then
    tclsh "$TMP/stub.tcl" "$tcl" >"$TMP/tcl.out" 2>&1 || { cat "$TMP/tcl.out"; fail "tclsh $tcldir/ddpc/$V"; }
    for want in "whatis Name: ddpc" "whatis Version: $V" "whatis URL: $url" "conflict ddpc" \
                "setenv DDPC_ROOT $prefix" "prepend-path PATH $bindir" \
                "prepend-path LD_LIBRARY_PATH $libdir" "prepend-path PKG_CONFIG_PATH $libdir/pkgconfig" \
                "prepend-path CPATH $includedir" "prepend-path MANPATH $mandir" "append-path MANPATH <>" \
                "help:   sbatch $slurmdir/train-preemptible.sbatch"; do
        grep -qxF "$want" "$TMP/tcl.out" || { cat "$TMP/tcl.out"; fail "tclsh: the Tcl twin does not say: $want"; }
    done
    grep -q "^whatis Description: ." "$TMP/tcl.out" && grep -q "^help: ddpc $V: " "$TMP/tcl.out" \
        || { cat "$TMP/tcl.out"; fail "tclsh: the Tcl twin lacks its description or help"; }
    echo "ok: the Tcl twin under tclsh sets DDPC_ROOT and prepends the 5 paths, has whatis and help"
else
    skipped="$skipped no tclsh to run the Tcl twin (apt-get install tcl);"
fi

# ---------------------------------------------------------------- Lmod
init=/usr/share/lmod/lmod/init/bash
[ -f "$init" ] && command -v bash >/dev/null \
    || skip "$skipped no Lmod here (apt-get install lmod) to load the modulefiles"
lmod_syntax=$(dirname "$init")/../libexec/check_module_tree_syntax
# lmod OUT 'COMMANDS': COMMANDS in a bash with Lmod and nothing else loaded
# (a clean environment: no modules of the caller's shell, HOME for Lmod's cache)
lmod() {
    out="$TMP/$1"; shift
    env -i HOME="$TMP" PATH=/usr/bin:/bin bash --norc --noprofile -c ". $init && $1" >"$out" 2>&1
}
# envline: the variables a modulefile sets, first element of each path
envline='echo "ROOT=${DDPC_ROOT-unset} PATH=${PATH%%:*} LD=${LD_LIBRARY_PATH%%:*} PKG=${PKG_CONFIG_PATH%%:*} CPATH=${CPATH%%:*} MAN=${MANPATH%%:*}"'
expect_env() { # expect_env OUT PREFIX BINDIR LIBDIR INCLUDEDIR MANDIR WHAT
    grep -qxF "ROOT=$2 PATH=$3 LD=$4 PKG=$4/pkgconfig CPATH=$5 MAN=$6" "$TMP/$1" \
        || { cat "$TMP/$1"; fail "$7 set the wrong environment (want ROOT=$2 PATH=$3 LD=$4 PKG=$4/pkgconfig CPATH=$5 MAN=$6)"; }
}

for tree in "$mfdir" "$tcldir"; do
    # syntax: Lmod's tree checker, and --checkSyntax in a shell where no ddpc
    # is loaded (Lmod 8.6.19 recurses without end when one is)
    [ ! -x "$lmod_syntax" ] || "$lmod_syntax" "$ROOT$tree" >"$TMP/syntax" 2>&1 \
        || { cat "$TMP/syntax"; fail "check_module_tree_syntax $tree"; }
    lmod check "module use '$ROOT$tree' && module --checkSyntax load ddpc/$V" \
        || { cat "$TMP/check"; fail "module --checkSyntax load ddpc/$V ($tree)"; }
    ! grep -qi error "$TMP/check" || { cat "$TMP/check"; fail "module --checkSyntax load ddpc/$V ($tree)"; }
    lmod load "module use '$ROOT$tree' && module load ddpc/$V && $envline" \
        || { cat "$TMP/load"; fail "module load ddpc/$V ($tree)"; }
    expect_env load "$prefix" "$bindir" "$libdir" "$includedir" "$mandir" "module load ddpc/$V ($tree)"
    lmod help "module use '$ROOT$tree' && module help ddpc/$V" || { cat "$TMP/help"; fail "module help ddpc/$V ($tree)"; }
    grep -q "^ddpc $V: a C runtime" "$TMP/help" && grep -qF "sbatch $slurmdir/train-preemptible.sbatch" "$TMP/help" \
        || { cat "$TMP/help"; fail "module help ddpc/$V ($tree): not the help text"; }
    lmod whatis "module use '$ROOT$tree' && module whatis ddpc" || { cat "$TMP/whatis"; fail "module whatis ddpc ($tree)"; }
    for w in "Name: ddpc" "Version: $V" "Description: data-parallel" "URL: $url"; do
        grep -q "^ddpc/$V *: $w" "$TMP/whatis" || { cat "$TMP/whatis"; fail "module whatis ddpc ($tree) lacks $w"; }
    done
    lmod show "module use '$ROOT$tree' && module show ddpc/$V" || { cat "$TMP/show"; fail "module show ddpc/$V ($tree)"; }
    grep -qF "$ROOT$tree/ddpc/$V" "$TMP/show" && grep -q "DDPC_ROOT" "$TMP/show" \
        || { cat "$TMP/show"; fail "module show ddpc/$V ($tree)"; }
    echo "ok: Lmod on $tree: syntax, load ddpc/$V, help, whatis, show"
done

# ---------------------------------------------------------------- two versions side by side
# A site's central tree with one prefix per version: install this build
# twice, as $V and as 9.9.9 (PACKAGE_VERSION overridden), each in its prefix.
ROOT2="$TMP/site" V2=9.9.9
for v in "$V" "$V2"; do
    minst "install-$v.log" install DESTDIR="$ROOT2" prefix="/opt/ddpc/$v" PACKAGE_VERSION="$v" \
        modulefilesdir=/opt/modulefiles tclmodulefilesdir=/opt/modulefiles-tcl
done
hi=$(printf '%s\n%s\n' "$V" "$V2" | sort -V | tail -n1)
for tree in /opt/modulefiles /opt/modulefiles-tcl; do
    [ -f "$ROOT2$tree/ddpc/$V" ] || [ -f "$ROOT2$tree/ddpc/$V.lua" ] || fail "$tree/ddpc/$V not installed"
    [ -f "$ROOT2$tree/ddpc/$V2" ] || [ -f "$ROOT2$tree/ddpc/$V2.lua" ] || fail "$tree/ddpc/$V2 not installed"
    use="module use '$ROOT2$tree'"
    lmod avail "$use && module -t avail ddpc" || { cat "$TMP/avail"; fail "module avail ($tree)"; }
    grep -qx "ddpc/$V" "$TMP/avail" && grep -qx "ddpc/$V2" "$TMP/avail" \
        || { cat "$TMP/avail"; fail "module avail ($tree) does not list ddpc/$V and ddpc/$V2"; }
    lmod default "$use && module load ddpc && $envline" || { cat "$TMP/default"; fail "module load ddpc ($tree)"; }
    expect_env default "/opt/ddpc/$hi" "/opt/ddpc/$hi/bin" "/opt/ddpc/$hi/lib" "/opt/ddpc/$hi/include" \
        "/opt/ddpc/$hi/share/man" "module load ddpc (the default, $hi; $tree)"
    for v in "$V" "$V2"; do
        lmod "load-$v" "$use && module load ddpc/$v && $envline" || { cat "$TMP/load-$v"; fail "module load ddpc/$v ($tree)"; }
        expect_env "load-$v" "/opt/ddpc/$v" "/opt/ddpc/$v/bin" "/opt/ddpc/$v/lib" "/opt/ddpc/$v/include" \
            "/opt/ddpc/$v/share/man" "module load ddpc/$v ($tree)"
    done
    # in turn: loading the other version replaces the first one entirely
    lmod swap "$use && module load ddpc/$V && module load ddpc/$V2 && module -t list && $envline &&
               echo \"ALL=\$PATH:\$LD_LIBRARY_PATH:\$PKG_CONFIG_PATH:\$CPATH:\$MANPATH\" &&
               module unload ddpc && echo \"AFTER=\${DDPC_ROOT-unset}:\$PATH:\${LD_LIBRARY_PATH-}:\${CPATH-}\"" \
        || { cat "$TMP/swap"; fail "module load ddpc/$V then ddpc/$V2 ($tree)"; }
    expect_env swap "/opt/ddpc/$V2" "/opt/ddpc/$V2/bin" "/opt/ddpc/$V2/lib" "/opt/ddpc/$V2/include" \
        "/opt/ddpc/$V2/share/man" "module load ddpc/$V then ddpc/$V2 ($tree)"
    ! grep "^ALL=.*/opt/ddpc/$V/" "$TMP/swap" || fail "ddpc/$V's paths are left after loading ddpc/$V2 ($tree)"
    [ "$(grep -c '^ddpc/' "$TMP/swap")" = 1 ] || { cat "$TMP/swap"; fail "more than one ddpc loaded ($tree)"; }
    grep -q "^AFTER=unset:" "$TMP/swap" && ! grep -q "^AFTER=.*/opt/ddpc" "$TMP/swap" \
        || { cat "$TMP/swap"; fail "module unload ddpc left ddpc in the environment ($tree)"; }
    echo "ok: $tree: ddpc/$V and ddpc/$V2 side by side, default $hi, each in turn, swap and unload clean"
done

# ---------------------------------------------------------------- Environment Modules
# The Tcl twin with Environment Modules' own modulecmd.tcl (bootstrap.sh
# unpacks it: the Debian package conflicts with Lmod): load, help, whatis,
# two versions side by side with the default, in a clean sh.
EM=${DDPC_ENVMODULES:-/usr/local/lib/ddpc-ci/environment-modules}
modcmd=$EM/usr/lib/x86_64-linux-gnu/modulecmd.tcl
if [ -f "$modcmd" ] && command -v tclsh >/dev/null; then
    # em OUT TREE 'MODULE ARGS' ['SHELL AFTER']: run module in sh, then the rest
    em() {
        out="$TMP/$1" tree=$2 margs=$3 after=${4:-:}
        env -i HOME="$TMP" PATH=/usr/bin:/bin MODULEPATH="$tree" sh -c \
            "eval \"\$(tclsh '$modcmd' sh $margs)\" && $after" >"$out" 2>&1
    }
    em em-load "$ROOT$tcldir" "load ddpc/$V" "$envline && man -w ls" || { cat "$TMP/em-load"; fail "Environment Modules: module load ddpc/$V, then man -w ls (the system's pages)"; }
    expect_env em-load "$prefix" "$bindir" "$libdir" "$includedir" "$mandir" "Environment Modules: module load ddpc/$V"
    em em-help "$ROOT$tcldir" "help ddpc/$V" || { cat "$TMP/em-help"; fail "Environment Modules: module help ddpc/$V"; }
    grep -q "ddpc $V: a C runtime" "$TMP/em-help" || { cat "$TMP/em-help"; fail "Environment Modules: module help ddpc/$V: not the help text"; }
    em em-whatis "$ROOT$tcldir" "whatis ddpc/$V" || { cat "$TMP/em-whatis"; fail "Environment Modules: module whatis ddpc/$V"; }
    grep -q "Version: $V" "$TMP/em-whatis" || { cat "$TMP/em-whatis"; fail "Environment Modules: module whatis ddpc/$V lacks the version"; }
    for v in "$V" "$V2"; do
        em "em-load-$v" "$ROOT2/opt/modulefiles-tcl" "load ddpc/$v" "$envline" \
            || { cat "$TMP/em-load-$v"; fail "Environment Modules: module load ddpc/$v (side by side)"; }
        expect_env "em-load-$v" "/opt/ddpc/$v" "/opt/ddpc/$v/bin" "/opt/ddpc/$v/lib" "/opt/ddpc/$v/include" \
            "/opt/ddpc/$v/share/man" "Environment Modules: module load ddpc/$v"
    done
    em em-default "$ROOT2/opt/modulefiles-tcl" "load ddpc" "$envline" || { cat "$TMP/em-default"; fail "Environment Modules: module load ddpc"; }
    expect_env em-default "/opt/ddpc/$hi" "/opt/ddpc/$hi/bin" "/opt/ddpc/$hi/lib" "/opt/ddpc/$hi/include" \
        "/opt/ddpc/$hi/share/man" "Environment Modules: module load ddpc (the default, $hi)"
    echo "ok: Environment Modules ($modcmd): load, help, whatis, ddpc/$V and ddpc/$V2 side by side, default $hi"
else
    skipped="$skipped no Environment Modules modulecmd.tcl in $EM (bootstrap.sh unpacks it);"
fi

# ---------------------------------------------------------------- make install prefix=P2
P2="$TMP/p2"
minst install-p2.log install prefix="$P2"
lua2="$P2/share/modulefiles/ddpc/$V.lua"
[ -f "$lua2" ] && [ -f "$P2/share/modulefiles-tcl/ddpc/$V" ] || fail "make install prefix=P2 wrote no modulefiles under P2"
grep -qF "local base = \"$P2\"" "$lua2" && grep -qF "set base \"$P2\"" "$P2/share/modulefiles-tcl/ddpc/$V" \
    || { cat "$lua2"; fail "make install prefix=P2: the modulefiles do not name P2"; }
for tree in modulefiles modulefiles-tcl; do
    lmod p2.out "module use '$P2/share/$tree' && module load ddpc && $envline && ddpc-info --version && man -w ls && man -w ddpc_ckpt_create" \
        || { cat "$TMP/p2.out"; fail "module load ddpc && ddpc-info --version, installed with prefix=P2 ($tree)"; }
    expect_env p2.out "$P2" "$P2/bin" "$P2/lib" "$P2/include" "$P2/share/man" "module load ddpc, prefix=P2 ($tree)"
    grep -q "^ddpc-info (ddpc) $V" "$TMP/p2.out" || { cat "$TMP/p2.out"; fail "ddpc-info --version from the P2 module"; }
    # MANPATH was unset: the module keeps man's default path (the system's pages)
    grep -qx '/usr/share/man/man1/ls.1.gz' "$TMP/p2.out" && grep -qxE "$P2/share/man/man3/ddpc_ckpt(_create)?\.3" "$TMP/p2.out" \
        || { cat "$TMP/p2.out"; fail "after module load ddpc ($tree), man -w ls or man -w ddpc_ckpt_create fails"; }
done
minst uninstall-p2.log uninstall prefix="$P2"
left=$(find "$P2/share/modulefiles" "$P2/share/modulefiles-tcl" ! -type d)
[ -z "$left" ] || fail "make uninstall prefix=P2 left modulefiles: $left"
[ ! -d "$P2/share/modulefiles/ddpc" ] && [ ! -d "$P2/share/modulefiles-tcl/ddpc" ] \
    || fail "make uninstall prefix=P2 left the empty ddpc/ modulefile directories"
echo "ok: make install prefix=P2 writes P2 into the modulefiles, ddpc-info runs from the module; uninstall removes them"

[ -z "$skipped" ] || skip "$skipped (every other check passed)"
