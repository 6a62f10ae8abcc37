#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# recipes.sh: the Spack recipe (contrib/spack/package.py) and the EasyBuild
# easyconfig (contrib/easybuild/*.eb) parse as Python, have what a site
# relies on, and pass only configure options and variables that
# `configure --help` lists (tests/recipes_check.py). The release tarball
# (scripts/release.sh, without distcheck) comes out byte-identical twice, and
# the release step writes its version and sha256 into the recipes (in a
# scratch copy); the committed recipes name this tree's tarball unless the
# tree has changed since their release. CI runs the real eb (.ci/run).
# The checker itself is tested on copies with an option configure lacks.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "no python3 to parse the recipes"
check="python3 $top_srcdir/tests/recipes_check.py"
release="sh $top_srcdir/scripts/release.sh"
spack="$top_srcdir/contrib/spack/package.py"
[ -f "$spack" ] || skip "no $spack: the recipes are repository files, not in the release tarball"
version=$(cat "$top_srcdir/VERSION")
eb=$(ls "$top_srcdir/contrib/easybuild/ddpc-$version"-*.eb 2>/dev/null | head -n1)
[ -n "$eb" ] || fail "no easyconfig contrib/easybuild/ddpc-$version-*.eb for VERSION $version"
"$top_srcdir/configure" --help >"$TMP/help" 2>&1 || { cat "$TMP/help"; fail "configure --help"; }
$check "$TMP/help" "$spack" "$eb" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "the recipes"; }
cat "$TMP/out"

# the release tarball, twice: the same bytes
tb="ddpc-$version.tar.gz"
for n in 1 2; do
    (cd "$top_builddir" && $release --tarball "$TMP/r$n") >"$TMP/rel.log" 2>&1 \
        || { cat "$TMP/rel.log"; fail "release.sh --tarball"; }
done
cmp "$TMP/r1/$tb" "$TMP/r2/$tb" || fail "two builds of $tb differ"
sum=$(cut -d' ' -f1 "$TMP/r1/$tb.sha256")
(cd "$TMP/r1" && sha256sum -c --quiet "$tb.sha256") || fail "$tb.sha256 does not match $tb"
echo "ok: $tb built twice, byte-identical, sha256 $sum ($(wc -c <"$TMP/r1/$tb") bytes)"
tar tzf "$TMP/r1/$tb" >"$TMP/list"
grep -qx "ddpc-$version/LICENSE" "$TMP/list" || fail "$tb has no LICENSE"
grep -qx "ddpc-$version/NEWS" "$TMP/list" || fail "$tb has no NEWS"
! grep -E '^ddpc-[^/]*/contrib/(spack|easybuild)/' "$TMP/list" || fail "$tb holds the recipes (they hold its checksum)"
tar tvzf "$TMP/r1/$tb" | awk '$2 != "0/0" { print; bad = 1 } END { exit bad }' || fail "$tb: owners other than 0/0"

# the release step, on a scratch copy of the recipes: version and checksum of
# that tarball, twice without a second version line
cp -R "$top_srcdir/contrib" "$TMP/contrib"
for n in 1 2; do
    $release --recipes "$TMP/contrib" "$TMP/r1/$tb" >"$TMP/rel.log" 2>&1 \
        || { cat "$TMP/rel.log"; fail "release.sh --recipes"; }
done
[ "$(grep -c "version(\"$version\"" "$TMP/contrib/spack/package.py")" = 1 ] \
    || fail "release.sh --recipes twice: not one version(\"$version\") line"
$check --tarball "$TMP/r1/$tb" "$TMP/help" "$TMP/contrib/spack/package.py" \
    "$TMP/contrib/easybuild/$(basename "$eb")" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "the released recipes"; }
sed 's/^/release step: /' "$TMP/out"

# the committed recipes: this tree's tarball, unless tarball files changed
# since the commit that wrote their checksum (the next release writes it again)
committed=$(sed -n "s/^    version(\"$version\", sha256=\"\([0-9a-f]*\)\")\$/\1/p" "$spack")
grep -q "^checksums = \['$committed'\]\$" "$eb" \
    || fail "$(basename "$eb") and package.py name different checksums of $version"
if [ "$committed" = "$sum" ]; then
    echo "ok: the committed recipes name this tree's $tb ($sum)"
elif [ -d "$top_srcdir/.git" ] || [ -f "$top_srcdir/.git" ]; then
    c=$(git -C "$top_srcdir" log -1 --format=%h -S"$committed" -- contrib/spack/package.py)
    [ -n "$c" ] || fail "no commit wrote the committed checksum $committed (edited by hand?)"
    changed=$(git -C "$top_srcdir" diff --name-only "$c" -- . ':(exclude)contrib/spack' ':(exclude)contrib/easybuild')
    [ -n "$changed" ] || fail "the tree's files of $tb are those of release commit $c, yet $tb's sha256 is $sum, not the committed $committed: the release is not reproducible here"
    echo "ok: the committed checksum is that of release $version at $c; $(echo "$changed" | wc -l) files of the tarball changed since (the next make release writes the new one)"
else
    echo "ok: not a git checkout and $tb differs from the committed release: the release step was checked on a scratch copy"
fi

# the checker fails on an option configure does not have, naming it
sed 's/--with-nccl=/--with-nccl-dir=/' "$spack" >"$TMP/package.py"
expect_fail_msg 'package.py: passes --with-nccl-dir, which configure --help does not list' \
    $check "$TMP/help" "$TMP/package.py"
mkdir -p "$TMP/eb"
sed "s/^configopts += '--with-blas=openblas '/configopts += '--with-blas=openblas --enable-gpu '/" "$eb" \
    >"$TMP/eb/$(basename "$eb")"
expect_fail_msg 'passes --enable-gpu, which configure --help does not list' \
    $check "$TMP/help" "$TMP/eb/$(basename "$eb")"
sed 's/^configopts = .MPICC=/configopts = '"'"'MPI_CC=/' "$eb" >"$TMP/eb/$(basename "$eb")"
expect_fail_msg "sets MPI_CC=, which is not one of configure's variables" \
    $check "$TMP/help" "$TMP/eb/$(basename "$eb")"
printf 'name = "ddpc"\nversion = (\n' >"$TMP/eb/$(basename "$eb")"
expect_fail_msg 'line [0-9]+: Python syntax error' $check "$TMP/help" "$TMP/eb/$(basename "$eb")"
# ... on a recipe without the license, without a CUDA architecture default,
# or naming another tarball than the one given
sed '/^    license("BSD-3-Clause")$/d' "$spack" >"$TMP/package.py"
expect_fail_msg 'package.py: no license\("BSD-3-Clause"\)' $check "$TMP/help" "$TMP/package.py"
sed '/^cuda_compute_capabilities = /d' "$eb" >"$TMP/eb/$(basename "$eb")"
expect_fail_msg 'uses a %\(cuda_...\)s template but sets no cuda_compute_capabilities default' \
    $check "$TMP/help" "$TMP/eb/$(basename "$eb")"
mkdir -p "$TMP/other"
{ cat "$TMP/r1/$tb"; echo; } >"$TMP/other/$tb"
expect_fail_msg "checksums \[.*\] are not the tarball's" \
    $check --tarball "$TMP/other/$tb" "$TMP/help" "$TMP/contrib/easybuild/$(basename "$eb")"
expect_fail_msg "package.py: no version\(\"$version\", sha256=\"[0-9a-f]{64}\"\) of the tarball" \
    $check --tarball "$TMP/other/$tb" "$TMP/help" "$TMP/contrib/spack/package.py"
