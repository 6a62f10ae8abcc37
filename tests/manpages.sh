#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# manpages.sh: the man pages of doc/man. Each is lint-free (groff -ww -z -man
# and man --warnings -l print nothing), says this VERSION in its .TH line, has
# its sections, and refers only to ddpc pages that exist; together they cover
# what they document: every option (and command) that `trainer --help`,
# `ddpc-info --help` and `ddpc-ckpt --help` print, every DDPC_* environment
# variable of the library sources (ddpc.7) and of the trainer and its Slurm
# scripts (trainer.1), every DDPC_API function of include/*.h in a section 3
# NAME, with its prototype in that page's SYNOPSIS exactly as in the header.
# `make install` puts them where `man -w` finds them. Skipped (77) only
# without groff.
. "$(dirname "$0")/lib.sh"
command -v groff >/dev/null 2>&1 || skip "no groff here (apt-get install groff) to lint the man pages"
command -v man >/dev/null 2>&1 || fail "no man here: install man-db (apt-get install man-db) for the lint"
SRC="$top_srcdir/doc/man"
VERSION=$(cat "$top_srcdir/VERSION")
LC_ALL=C MANWIDTH=80
export LC_ALL MANWIDTH
unset MANPATH MANOPT MANSECT

nbad=0 mark=0
bad() { echo "FAIL: $*" >&2; nbad=$((nbad + 1)); }
ok() { [ "$nbad" -eq "$mark" ] && echo "ok: $*"; mark=$nbad; } # when no failure since the last ok
# the text of a page as man shows it, without overstriking, lines not wrapped
render() { (cd "$T" && groff -man -Tascii -rcR=1 -rLL=250n -P-c -P-b -P-u -P-o "$1" 2>/dev/null); }
# one section (NAME, SYNOPSIS, ...) of rendered text on stdin
section() { awk -v s="$1" '$0 == s { on = 1; next } /^[A-Z]/ { on = 0 } on'; }
# has WORD FILE: WORD occurs in FILE, not as a part of a longer name
has() { grep -qE -- "(^|[^A-Za-z0-9_-])$1([^A-Za-z0-9_-]|\$)" "$2"; }

# ------------------------------------------------------------------ the pages
pages=$(cd "$SRC" && ls -- *.1 *.3 *.7 2>/dev/null | sort)
[ -n "$pages" ] || fail "no pages in $SRC"
echo "$pages" >"$TMP/pages"
sed -n 's|.*doc/man/\([^ \\]*\.[137]\).*|\1|p' "$SRC/local.mk" | sort >"$TMP/listed"
if ! cmp -s "$TMP/pages" "$TMP/listed"; then
    comm -23 "$TMP/pages" "$TMP/listed" | sed 's/^/  not in dist_man_MANS (doc\/man\/local.mk): /' >&2
    comm -13 "$TMP/pages" "$TMP/listed" | sed 's/^/  in dist_man_MANS but not in doc\/man: /' >&2
    bad "doc/man and dist_man_MANS differ"
fi
# a man tree (man1/, man3/, man7/), so that the link pages' .so man3/... resolve
T="$TMP/man"
mkdir -p "$T/man1" "$T/man3" "$T/man7"
for p in $pages; do cp "$SRC/$p" "$T/man${p##*.}/"; done

links="" real=""
for p in $pages; do
    rel="man${p##*.}/$p"
    (cd "$T" && groff -ww -z -man "$rel") >"$TMP/g" 2>&1 || bad "$p: groff -man failed"
    if [ -s "$TMP/g" ]; then sed "s|^|  $p: |" "$TMP/g" >&2; bad "$p: groff -ww -z -man warns"; fi
    (cd "$T" && man --warnings -l "$rel") >/dev/null 2>"$TMP/m" || bad "$p: man -l failed"
    if [ -s "$TMP/m" ]; then sed "s|^|  $p: |" "$TMP/m" >&2; bad "$p: man --warnings -l warns"; fi
    if head -n 1 "$SRC/$p" | grep -q '^\.so '; then
        target=$(sed -n '1s/^\.so //p' "$SRC/$p")
        [ "$(wc -l <"$SRC/$p")" -eq 1 ] || bad "$p: a link page is one line, .so man3/PAGE.3"
        [ -f "$T/$target" ] || bad "$p: .so $target: no such page in doc/man"
        links="$links $p"
        continue
    fi
    real="$real $p"
    th=$(grep -m 1 '^\.TH ' "$SRC/$p")
    ver=$(printf '%s\n' "$th" | sed -n 's/^\.TH [^ ]* [^ ]* [^ ]* "\([^"]*\)".*/\1/p')
    [ "$ver" = "ddpc $VERSION" ] \
        || bad "$p: .TH says \"$ver\" but VERSION is $VERSION: update the .TH line of every page"
    set -- $th
    [ "$3" = "${p##*.}" ] || bad "$p: .TH section $3, file section ${p##*.}"
    title=$(printf '%s\n' "$2" | sed 's/\\-/-/g' | tr 'A-Z' 'a-z')
    [ "$title" = "${p%.*}" ] || bad "$p: .TH title $2 does not name the file"
    case $p in
    *.1) want="NAME SYNOPSIS DESCRIPTION EXIT_STATUS ENVIRONMENT SEE_ALSO" ;;
    *.3) want="NAME SYNOPSIS DESCRIPTION RETURN_VALUE ENVIRONMENT SEE_ALSO" ;;
    *.7) want="NAME DESCRIPTION ENVIRONMENT FILES EXIT_STATUS SEE_ALSO" ;;
    esac
    for s in $want; do
        s=$(echo "$s" | tr _ ' ')
        grep -q "^\.SH \"\{0,1\}$s\"\{0,1\}\$" "$SRC/$p" || bad "$p: no $s section"
    done
    render "$rel" >"$TMP/$p.txt"
done
ok "lint of$real$links; .TH version ddpc $VERSION"
# every reference to a ddpc page, name(N), names a page (or link page) of doc/man
for p in $real; do
    for r in $(grep -oE '(ddpc|trainer)[a-z0-9_-]*\([1378]\)' "$TMP/$p.txt" | sort -u); do
        n=${r%(*} s=${r#*(}
        [ -f "$SRC/$n.${s%)}" ] || bad "$p refers to $r, which is no page of doc/man"
    done
done
ok "every ddpc page referred to exists"

# ------------------------------------------------------------------ programs
"$top_builddir/trainer" --help >"$TMP/help" 2>&1 || { cat "$TMP/help"; fail "trainer --help"; }
opts=$(grep -oE -- '--[a-z][a-z-]*' "$TMP/help" | sort -u)
[ "$(echo "$opts" | wc -l)" -ge 10 ] || { cat "$TMP/help"; fail "trainer --help: too few options found"; }
section OPTIONS <"$TMP/trainer.1.txt" >"$TMP/t"
for o in $opts; do has "$o" "$TMP/t" || bad "trainer.1 OPTIONS lacks $o (trainer --help prints it)"; done
ok "trainer.1 has the $(echo "$opts" | wc -l) options of trainer --help"

"$top_builddir/ddpc-info" --help >"$TMP/help" 2>&1 || { cat "$TMP/help"; fail "ddpc-info --help"; }
opts=$(grep -oE -- '--[a-z][a-z-]*' "$TMP/help" | sort -u)
section OPTIONS <"$TMP/ddpc-info.1.txt" >"$TMP/t"
for o in $opts --help; do has "$o" "$TMP/t" || bad "ddpc-info.1 OPTIONS lacks $o"; done
ok "ddpc-info.1 has the options of ddpc-info --help:" $opts

"$top_builddir/ddpc-ckpt" --help >"$TMP/help" 2>&1 || { cat "$TMP/help"; fail "ddpc-ckpt --help"; }
opts=$(grep -oE -- '--[a-z][a-z-]*' "$TMP/help" | sort -u)
cmds=$(sed -n '/^commands:/,/^$/p' "$TMP/help" | sed -n 's/^  \([a-z][a-z]*\) .*/\1/p')
[ -n "$cmds" ] || { cat "$TMP/help"; fail "ddpc-ckpt --help: no commands: found"; }
section OPTIONS <"$TMP/ddpc-ckpt.1.txt" >"$TMP/t"
for o in $opts; do has "$o" "$TMP/t" || bad "ddpc-ckpt.1 OPTIONS lacks $o (ddpc-ckpt --help prints it)"; done
section COMMANDS <"$TMP/ddpc-ckpt.1.txt" >"$TMP/t"
for c in $cmds; do
    grep -qE "^ +$c( |\$)" "$TMP/t" || bad "ddpc-ckpt.1 COMMANDS lacks $c (ddpc-ckpt --help lists it)"
done
ok "ddpc-ckpt.1 has the commands and options of ddpc-ckpt --help:" $cmds $opts

# ------------------------------------------------------------------ environment
# DDPC_* names in C sources that are not C identifiers (macros, enumerators,
# configure's defines) are environment variables.
idents() {
    find "$@" \( -name '*.[ch]' -o -name '*.cu' \) -exec cat {} + >"$TMP/c"
    {
        grep -oE '^[[:space:]]*#[[:space:]]*(define|ifndef)[[:space:]]+DDPC_[A-Z0-9_]+' "$TMP/c"
        grep -oE 'X\(DDPC_[A-Z0-9_]+' "$TMP/c"
        grep -oE 'AC_DEFINE(_UNQUOTED)?\(\[DDPC_[A-Z0-9_]+' "$top_srcdir/configure.ac"
        sed -e 's:/\*.*\*/::g' -e 's://.*$::' "$TMP/c" |
            awk '/enum[[:space:]]*[A-Za-z_]*[[:space:]]*\{/ { on = 1 } on { print } /\}/ { on = 0 }'
    } | grep -oE 'DDPC_[A-Z0-9_]+' | sort -u
}
envvars() { # the variables named in the C text on stdin
    grep -oE 'DDPC_[A-Z0-9_]+' | grep -v '_$' | sort -u | comm -23 - "$TMP/ids"
}
idents "$top_srcdir/src" "$top_srcdir/include" "$top_srcdir/examples" >"$TMP/ids"
vars=$(find "$top_srcdir/src" \( -name '*.[ch]' -o -name '*.cu' \) -exec cat {} + | envvars)
echo "$vars" | grep -qx DDPC_TIMEOUT || fail "no DDPC_TIMEOUT among the variables of src/: the extraction is broken ($vars)"
section ENVIRONMENT <"$TMP/ddpc.7.txt" >"$TMP/e"
for v in $vars; do has "$v" "$TMP/e" || bad "ddpc.7 ENVIRONMENT lacks $v (read in src/)"; done
ok "ddpc.7 lists the variables of src/:" $vars
tvars=$( { cat "$top_srcdir"/examples/*.[ch] | envvars
           grep -ohE 'DDPC_[A-Z0-9_]*[A-Z0-9]' "$top_srcdir"/slurm/*.sbatch; } | sort -u)
section ENVIRONMENT <"$TMP/trainer.1.txt" >"$TMP/e"
for v in $tvars; do has "$v" "$TMP/e" || bad "trainer.1 ENVIRONMENT lacks $v (examples/, slurm/)"; done
ok "trainer.1 lists the variables of the trainer and its scripts:" $tvars

# ------------------------------------------------------------------ section 3
# every DDPC_API declaration on one line, normalized
awk '
    /^[[:space:]]*#/ { next }
    { sub(/\/\*.*\*\//, "") }
    /^[[:space:]]*\/?\*/ && !on { next }
    /DDPC_API/ && !/#define/ { on = 1; buf = "" }
    on { buf = buf " " $0; if (index($0, ";")) { on = 0; print buf } }
' "$top_srcdir"/include/*.h |
    sed -e 's/DDPC_API//' -e 's/__attribute__((.*)))//' -e 's/[[:space:]][[:space:]]*/ /g' \
        -e 's/^ //' -e 's/ ;/;/' -e 's/ *$//' -e 's/( /(/g' -e 's/ )/)/g' >"$TMP/protos"
napi=$(wc -l <"$TMP/protos")
[ "$(cat "$top_srcdir"/include/*.h | grep -c "^DDPC_API")" -eq \
  "$napi" ] || fail "include/*.h: cannot read every DDPC_API declaration (found $napi)"
: >"$TMP/names"
for p in $real; do
    case $p in *.3) ;; *) continue ;; esac
    sed -n '/^\.SH NAME/,/^\.SH SYNOPSIS/p' "$SRC/$p" | grep -oE 'ddpc_[a-z0-9_]+' |
        sed "s/\$/ $p/" >>"$TMP/names"
    section SYNOPSIS <"$TMP/$p.txt" | tr -s ' \n' '  ' >"$TMP/$p.syn"
    grep -qF '#include <ddpc.h>' "$TMP/$p.syn" || bad "$p: SYNOPSIS lacks #include <ddpc.h>"
done
while read -r proto; do
    f=$(echo "$proto" | sed 's/^.*[ *]\(ddpc_[a-z0-9_]*\)(.*$/\1/')
    p=$(awk -v f="$f" '$1 == f { print $2; exit }' "$TMP/names")
    if [ -z "$p" ]; then
        bad "$f (include/*.h) is in no section 3 page's NAME"
        continue
    fi
    grep -qF -- "$proto" "$TMP/$p.syn" || bad "$p: SYNOPSIS lacks, exactly as in the header: $proto"
done <"$TMP/protos"
for f in $(awk '{ print $1 }' "$TMP/names" | sort -u); do
    grep -q "[ *]$f(" "$TMP/protos" || bad "$(awk -v f="$f" '$1 == f { print $2; exit }' "$TMP/names"): NAME lists $f, which no header declares"
done
for l in $links; do
    target=$(sed -n '1s/^\.so man3\///p' "$SRC/$l")
    grep -qx "${l%.3} $target" "$TMP/names" || bad "$l: ${l%.3} is not in the NAME of $target"
done
ok "the $napi DDPC_API functions are in section 3 NAMEs, their prototypes in the SYNOPSIS"

# ------------------------------------------------------------------ installed
ROOT="$TMP/root"
make -s -C "$top_builddir" install DESTDIR="$ROOT" >"$TMP/install.log" 2>&1 \
    || { tail -20 "$TMP/install.log"; fail "make install"; }
mkvar() { # the value of a make variable of this build
    printf 'ddpc-print-%%:\n\t@echo $($*)\n' | env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
        make -s --no-print-directory -C "$top_builddir" -f Makefile -f - "ddpc-print-$1"
}
mandir=$(mkvar mandir)
[ -n "$mandir" ] || fail "cannot read mandir from the Makefile"
M="$ROOT$mandir"
for p in $pages; do
    [ -f "$M/man${p##*.}/$p" ] || bad "$p is not installed in $mandir/man${p##*.}"
done
for q in "ddpc man7/ddpc.7" "trainer man1/trainer.1" "ddpc-ckpt man1/ddpc-ckpt.1" \
         "ddpc_init man3/ddpc_init.3" "ddpc_allreduce man3/ddpc_comm.3"; do
    set -- $q
    w=$(MANPATH="$M" man -w "$1" 2>"$TMP/w")
    [ "$w" = "$M/$2" ] || { cat "$TMP/w" >&2; bad "MANPATH=$mandir man -w $1 gives \"$w\", not $M/$2"; }
done
# every DDPC_API call: `man -w` resolves (a page, a .so link page, or the
# symbolic link make install makes to the page whose NAME lists it), to a
# page whose NAME lists the call
nres=0
while read -r proto; do
    f=$(echo "$proto" | sed 's/^.*[ *]\(ddpc_[a-z0-9_]*\)(.*$/\1/')
    w=$(MANPATH="$M" man -w "$f" 2>/dev/null)
    if [ -z "$w" ]; then bad "MANPATH=$mandir man -w $f: no manual entry"; continue; fi
    page=$(readlink -f "$w")
    head -n 1 "$page" | grep -q '^\.so ' && page="$M/$(sed -n '1s/^\.so //p' "$page")"
    sed -n '/^\.SH NAME/,/^\.SH SYNOPSIS/p' "$page" | grep -qw "$f" ||
        bad "man -w $f gives $w, whose page does not name $f"
    nres=$((nres + 1))
done <"$TMP/protos"
[ "$nres" -eq "$napi" ] && ok "man -w finds a page naming each of the $napi DDPC_API calls"
(cd "$M" && man --warnings -l man3/ddpc_allreduce.3) >"$TMP/out" 2>"$TMP/m"
[ -s "$TMP/m" ] && { cat "$TMP/m" >&2; bad "the installed link page ddpc_allreduce.3 warns"; }
grep -q 'ddpc_allreduce' "$TMP/out" || bad "the installed link page ddpc_allreduce.3 shows no ddpc_allreduce"
ok "installed in $mandir; man -w finds ddpc(7), trainer(1), ddpc-ckpt(1), ddpc_init(3)," \
    "and ddpc_comm(3) for ddpc_allreduce"

[ "$nbad" -eq 0 ] || fail "$nbad problem(s) with the man pages (above)"
ok "man pages"
