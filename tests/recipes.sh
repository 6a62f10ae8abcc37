#!/bin/sh
# recipes.sh: the Spack recipe (contrib/spack/package.py) and the EasyBuild
# easyconfig (contrib/easybuild/*.eb) parse as Python, have what a site
# relies on, and pass only configure options and variables that
# `configure --help` lists (tests/recipes_check.py). Neither tool runs here.
# The checker itself is tested on copies with an option configure lacks.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "no python3 to parse the recipes"
check="python3 $top_srcdir/tests/recipes_check.py"
spack="$top_srcdir/contrib/spack/package.py"
eb="$top_srcdir/contrib/easybuild/ddpc-0.1.0-gompi-2025a-CUDA-12.8.0.eb"
"$top_srcdir/configure" --help >"$TMP/help" 2>&1 || { cat "$TMP/help"; fail "configure --help"; }
$check "$TMP/help" "$spack" "$eb" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "the recipes"; }
cat "$TMP/out"

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
