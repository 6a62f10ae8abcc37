#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# layers.sh: libddpc's layers stay strict (doc/layers.md). Every file under
# src/ has a layer; no file may include a header of a higher layer, and
# (when the library's objects are built) no object may call or use a symbol
# that only an object of a higher layer defines. Fails naming the file, the
# line and what runs upward. Peers within a layer may use each other.
#
#   tests/layers.sh [SRCDIR [BUILDDIR]]   (make check passes top_srcdir and
#                                          top_builddir in the environment)
LC_ALL=C
export LC_ALL
srcdir=${1:-${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}}
builddir=${2:-${top_builddir:-}}
srcdir=$(cd "$srcdir" && pwd) || exit 99

# The layer of a file, by path relative to srcdir; "-" when it has none.
layer_of() {
    case $1 in
    src/util/*) echo 0 ;;
    src/pmix/*) echo 1 ;;
    src/comm/*) echo 2 ;;
    src/core/internal.h | src/sampler/*) echo 3 ;;
    src/ddp/*) echo 4 ;;
    src/ckpt/*) echo 5 ;;
    src/core/*) echo 6 ;;
    src/tools/*) echo 7 ;;
    *) echo - ;;
    esac
}
layer_name() {
    case $1 in
    0) echo "0 util" ;;
    1) echo "1 discovery" ;;
    2) echo "2 comm" ;;
    3) echo "3 sampler" ;;
    4) echo "4 ddp" ;;
    5) echo "5 ckpt" ;;
    6) echo "6 init" ;;
    7) echo "7 tools" ;;
    esac
}

bad=0
tmp=${TMPDIR:-/tmp}/ddpc-layers.$$
mkdir "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM

# Where a quoted include of a file in directory d resolves, the way the
# compiler looks: d itself, then -I include, -I src/core (AM_CPPFLAGS).
# Prints the path relative to srcdir, or nothing (config.h, system headers).
resolve() {
    for dir in "$1" include src/core; do
        if [ -f "$srcdir/$dir/$2" ]; then
            p=$(cd "$srcdir/$dir/$(dirname "$2")" && pwd)/$(basename "$2")
            echo "${p#"$srcdir"/}"
            return
        fi
    done
}

# ---------------------------------------------------------------- includes
files=$(cd "$srcdir" && find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort)
nfiles=0
for f in $files; do
    nfiles=$((nfiles + 1))
    lf=$(layer_of "$f")
    if [ "$lf" = - ]; then
        echo "layers: $f: not in the layer map of tests/layers.sh (add its directory there" \
            "and to doc/layers.md)"
        bad=1
        continue
    fi
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$srcdir/$f" |
        sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/' >"$tmp/inc"
    while read -r line inc; do
        to=$(resolve "$(dirname "$f")" "$inc")
        case $to in
        '' | include/*) continue ;; # config.h, system, the public API
        esac
        lt=$(layer_of "$to")
        if [ "$lt" = - ] || [ "$lt" -gt "$lf" ]; then
            echo "layers: $f:$line: includes \"$inc\" ($to, layer $(layer_name "$lt"))" \
                "from layer $(layer_name "$lf"): an include that runs upward"
            bad=1
        fi
    done <"$tmp/inc"
done
echo "layers: includes of $nfiles files under src/ checked"

# ---------------------------------------------------------------- calls
# The library's objects are the .lo files under BUILDDIR/src; each names its
# PIC object (or, static only, its plain one).
if [ -z "$builddir" ] || [ ! -d "$builddir/src" ]; then
    echo "layers: calls not checked: no build directory (give it as the second argument)"
    exit $bad
fi
if ! command -v nm >/dev/null 2>&1; then
    echo "layers: calls not checked: no nm"
    exit $bad
fi
builddir=$(cd "$builddir" && pwd)
: >"$tmp/objs"
for lo in $(cd "$builddir" && find src -name '*.lo' | sort); do
    d=$(dirname "$lo")
    o=$(sed -n "s/^pic_object='\(.*\)'$/\1/p" "$builddir/$lo")
    [ -z "$o" ] || [ "$o" = none ] && o=$(sed -n "s/^non_pic_object='\(.*\)'$/\1/p" "$builddir/$lo")
    [ -f "$builddir/$d/$o" ] || continue
    n=$(basename "$lo" .lo)
    n=${n#libddpc_la-}
    src=
    for ext in c cu; do
        [ -f "$srcdir/$d/$n.$ext" ] && src=$d/$n.$ext
    done
    [ -n "$src" ] || continue
    echo "$src $builddir/$d/$o" >>"$tmp/objs"
done
if [ ! -s "$tmp/objs" ]; then
    echo "layers: calls not checked: no library objects under $builddir/src (build first)"
    exit $bad
fi
# defs: "symbol source" for every global symbol an object defines (weak
# ones, C++ inline functions, excepted: every user may have them)
: >"$tmp/defs"
while read -r src o; do
    nm -g --defined-only "$o" | awk -v s="$src" 'NF == 3 && $2 !~ /^[wWvVU]$/ {print $3, s}'
done <"$tmp/objs" | sort >"$tmp/defs"
nobj=0
while read -r src o; do
    nobj=$((nobj + 1))
    lf=$(layer_of "$src")
    nm -u "$o" | awk '{print $NF}' | sort -u >"$tmp/und"
    join "$tmp/und" "$tmp/defs" >"$tmp/uses"
    while read -r sym def; do
        ld=$(layer_of "$def")
        [ "$ld" = - ] || [ "$ld" -le "$lf" ] && continue
        at=$(grep -n -w "$sym" "$srcdir/$src" | head -n 1 | cut -d: -f1)
        echo "layers: $src:${at:-?}: uses $sym, defined in $def (layer $(layer_name "$ld"))," \
            "from layer $(layer_name "$lf"): a call that runs upward"
        bad=1
    done <"$tmp/uses"
done <"$tmp/objs"
echo "layers: calls of $nobj library objects in $builddir checked"
[ $bad = 0 ] && echo "layers: no include or call runs upward"
exit $bad
