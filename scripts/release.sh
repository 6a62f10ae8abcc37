#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# release.sh: ddpc's release tarball (the tarball of `make dist`), built
# reproducibly, and the package recipes that name it. Not a build or install
# step: run it from a configured build directory (`make release` does).
#
#   release.sh                  `make release`: make dist, make distcheck on that
#                               tarball (it must come out with the same bytes),
#                               ddpc-VERSION.tar.gz.sha256, and the version and
#                               checksum written into contrib/spack/package.py and
#                               contrib/easybuild/ddpc-VERSION-*.eb
#   release.sh --tarball OUTDIR the tarball and its .sha256 in OUTDIR, without
#                               distcheck, leaving the build directory as it was
#                               (tests/recipes.sh)
#   release.sh --recipes CONTRIBDIR TARBALL
#                               write TARBALL's version and sha256 into the recipes
#                               under CONTRIBDIR
#   release.sh --tar DIR        a reproducible tar of DIR on stdout (make dist's tar)
#   release.sh --epoch          the SOURCE_DATE_EPOCH the tarball's times are set to
#
# Reproducible: every file's mtime is SOURCE_DATE_EPOCH (from the environment,
# else the time of the last commit that changed a file of the tarball, i.e.
# any but the recipes, else the .source-date-epoch file that the tarball
# carries), names sorted, owner and group 0, modes u=rwX,go=rX, ustar format,
# `gzip -n`. The same tree and the same autotools give the same bytes.
# The recipes are repository files, not in the tarball: writing the checksum
# into them does not change it (doc/site.md, "Releases").
set -eu
me="release.sh"
srcdir=$(cd "$(dirname "$0")/.." && pwd)
MAKE=${MAKE:-make}
TAR=${TAR:-tar}
PACKAGE=ddpc

die() { echo "$me: error: $*" >&2; exit 1; }
say() { echo "$me: $*" >&2; }

# the paths of the source tree that are not in the tarball (git pathspecs)
not_in_tarball() { printf '%s\n' ':(exclude)contrib/spack' ':(exclude)contrib/easybuild'; }

is_git_top() {
    command -v git >/dev/null 2>&1 || return 1
    top=$(git -C "$srcdir" rev-parse --show-toplevel 2>/dev/null) || return 1
    [ "$(cd "$top" && pwd -P)" = "$(cd "$srcdir" && pwd -P)" ]
}

check_epoch() {
    case $1 in
        '' | *[!0-9]*) die "SOURCE_DATE_EPOCH must be seconds since 1970 (got \"$1\" from $2)" ;;
    esac
    echo "$1"
}

epoch() {
    if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
        check_epoch "$SOURCE_DATE_EPOCH" "the environment"
    elif is_git_top; then
        # shellcheck disable=SC2046
        t=$(git -C "$srcdir" log -1 --format=%ct -- . $(not_in_tarball))
        check_epoch "$t" "git log in $srcdir"
    elif [ -f "$srcdir/.source-date-epoch" ]; then
        check_epoch "$(cat "$srcdir/.source-date-epoch")" "$srcdir/.source-date-epoch"
    else
        die "no SOURCE_DATE_EPOCH: $srcdir is neither a git checkout nor an unpacked" \
            "release (no .source-date-epoch); set SOURCE_DATE_EPOCH"
    fi
}

# tar_dir DIR: the reproducible tar stream of DIR, DIR's last component at the top
tar_dir() {
    d=${1%/}
    [ -d "$d" ] || die "--tar $d: not a directory"
    "$TAR" --version 2>/dev/null | grep -q 'GNU tar' \
        || die "$TAR is not GNU tar: a reproducible tarball needs --sort=name, --mtime, --owner (set TAR=gtar?)"
    if [ -f "$d/.source-date-epoch" ]; then
        e=$(check_epoch "$(cat "$d/.source-date-epoch")" "$d/.source-date-epoch")
    else
        e=$(epoch)
    fi
    "$TAR" -C "$(dirname "$d")" --format=ustar --sort=name --mtime="@$e" \
        --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX -chf - "$(basename "$d")"
}

version() {
    v=$(cat "$srcdir/VERSION") || die "no $srcdir/VERSION"
    case $v in '' | *[!0-9A-Za-z.+~-]*) die "$srcdir/VERSION: \"$v\" is not a version" ;; esac
    echo "$v"
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# write_sha TARBALL: TARBALL.sha256 in sha256sum's format (sha256sum -c reads it)
write_sha() {
    (cd "$(dirname "$1")" && sha256sum "$(basename "$1")") >"$1.sha256.tmp"
    mv -f "$1.sha256.tmp" "$1.sha256"
}

# recipes CONTRIBDIR TARBALL: version("V", sha256=...) in the Spack recipe,
# above the versions there (newest first, main last); checksums = [...] in
# the easyconfig of version V (made from the newest one if there is none yet)
recipes() {
    contrib=$1 tb=$2
    base=$(basename "$tb" .tar.gz)
    v=${base#"$PACKAGE"-}
    [ "$v" != "$base" ] || die "$tb is not a $PACKAGE-VERSION.tar.gz"
    h=$(sha256 "$tb")
    spack="$contrib/spack/package.py"
    [ -f "$spack" ] || die "no $spack"
    awk -v v="$v" -v h="$h" '
        BEGIN { line = "    version(\"" v "\", sha256=\"" h "\")" }
        index($0, "    version(\"" v "\",") == 1 { print line; done = 1; next }
        /^    version\(/ && !done { print line; done = 1 }
        { print }
        END { if (!done) exit 3 }' "$spack" >"$spack.tmp" \
        || { rm -f "$spack.tmp"; die "$spack: no version(...) line to put version(\"$v\") above"; }
    mv -f "$spack.tmp" "$spack"
    eb=$(ls "$contrib/easybuild/$PACKAGE-$v"-*.eb 2>/dev/null | head -n1 || true)
    if [ -z "$eb" ]; then
        # a new version: start from the newest easyconfig there is
        old=$(ls "$contrib/easybuild/$PACKAGE"-*.eb 2>/dev/null | sort -V | tail -n1 || true)
        [ -n "$old" ] || die "no easyconfig in $contrib/easybuild"
        oldv=$(sed -n "s/^version = '\(.*\)'$/\1/p" "$old")
        [ -n "$oldv" ] || die "$old: no version = '...' line"
        eb="$contrib/easybuild/$(basename "$old" | sed "s/^$PACKAGE-$oldv-/$PACKAGE-$v-/")"
        sed "s/^version = '.*'$/version = '$v'/" "$old" >"$eb"
        say "new easyconfig $eb (from $(basename "$old"))"
    fi
    # replace the checksums line, or put one after sources = [...]
    has=0
    grep -q '^checksums = ' "$eb" && has=1
    awk -v h="$h" -v has="$has" '
        BEGIN { line = "checksums = [\x27" h "\x27]" }
        /^checksums = / { print line; done = 1; next }
        { print }
        /^sources = / && !has { print line; done = 1 }
        END { if (!done) exit 3 }' "$eb" >"$eb.tmp" \
        || { rm -f "$eb.tmp"; die "$eb: no sources = line to put checksums after"; }
    mv -f "$eb.tmp" "$eb"
    echo "$spack: version(\"$v\", sha256=\"$h\")"
    echo "$eb: checksums = ['$h']"
}

# tarball OUTDIR: make distdir into a scratch directory, tar and gzip it
tarball() {
    out=$1 v=$(version)
    [ -f Makefile ] || die "run me from a configured build directory (no Makefile in $(pwd))"
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    work=$(mktemp -d "${TMPDIR:-/tmp}/ddpc-release.XXXXXX")
    trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
    "$MAKE" -s distdir distdir="$work/$PACKAGE-$v" >"$work/log" 2>&1 \
        || { cat "$work/log" >&2; die "make distdir"; }
    tar_dir "$work/$PACKAGE-$v" | gzip -9 -n >"$out/$PACKAGE-$v.tar.gz.tmp"
    mv -f "$out/$PACKAGE-$v.tar.gz.tmp" "$out/$PACKAGE-$v.tar.gz"
    write_sha "$out/$PACKAGE-$v.tar.gz"
    cat "$out/$PACKAGE-$v.tar.gz.sha256"
}

release() {
    v=$(version)
    [ -f Makefile ] || die "run me from a configured build directory (make release)"
    [ "${PACKAGE_VERSION:-$v}" = "$v" ] \
        || die "configure says version $PACKAGE_VERSION, VERSION says $v: run ./autogen.sh and configure again"
    tb="$PACKAGE-$v.tar.gz"
    e=$(epoch)
    if is_git_top; then
        # shellcheck disable=SC2046
        dirty=$(git -C "$srcdir" status --porcelain -- . $(not_in_tarball))
        if [ -n "$dirty" ]; then
            [ -n "${DDPC_RELEASE_DIRTY:-}" ] || die "uncommitted changes in files of the tarball" \
                "(commit them first, or DDPC_RELEASE_DIRTY=1 for a trial):
$dirty"
            say "warning: uncommitted changes: this tarball is not the one of a commit"
        fi
    fi
    export SOURCE_DATE_EPOCH="$e"
    say "$tb with every mtime at SOURCE_DATE_EPOCH=$e ($(date -u -d "@$e" '+%Y-%m-%d %H:%M:%S UTC' 2>/dev/null || echo "$e"))"
    "$MAKE" dist GZIP_ENV="-9 -n" || die "make dist"
    first=$(sha256 "$tb")
    # distcheck makes the tarball again (make dist) and builds, checks, installs it
    "$MAKE" distcheck GZIP_ENV="-9 -n" || die "make distcheck"
    again=$(sha256 "$tb")
    [ "$first" = "$again" ] || die "$tb is not reproducible: sha256 $first, then $again from distcheck's make dist"
    write_sha "$tb"
    say "$tb: the same bytes twice (make dist, then distcheck's), sha256 $again"
    recipes "$srcdir/contrib" "$tb"
    say "done: publish $tb and $tb.sha256; commit the recipes (they are not in the tarball)"
}

case ${1:-} in
    --epoch) epoch ;;
    --tar) [ $# -eq 2 ] || die "usage: --tar DIR"; tar_dir "$2" ;;
    --tarball) [ $# -eq 2 ] || die "usage: --tarball OUTDIR"; tarball "$2" ;;
    --recipes) [ $# -eq 3 ] || die "usage: --recipes CONTRIBDIR TARBALL"; recipes "$2" "$3" ;;
    '') release ;;
    *) die "unknown argument $1 (see the comment at the top of $0)" ;;
esac
