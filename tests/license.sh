#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# license.sh: LICENSE is BSD-3-Clause and every source file (C, CUDA, C++,
# shell, Python, Autotools and make fragments, the sbatch scripts and
# modulefiles) says so in its first lines (SPDX-License-Identifier), so
# that a file copied out of the tree keeps its license; shows that the check can fail on a file without one. Names each file
# that does not.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir" || fail "cd $top_srcdir"
grep -q '^Redistribution and use in source and binary forms' LICENSE &&
    grep -q 'Neither the name of the copyright holder' LICENSE || fail "LICENSE is not the BSD 3-Clause text"
has_spdx() { head -n 3 "$1" | grep -q 'SPDX-License-Identifier: BSD-3-Clause'; }
# the check itself can fail: a file without the line, and one with it too late
printf '/* x.c */\nint x;\n' >"$TMP/x.c"
printf '/* x.c */\n\n\n\n/* SPDX-License-Identifier: BSD-3-Clause */\n' >"$TMP/late.c"
! has_spdx "$TMP/x.c" && ! has_spdx "$TMP/late.c" || fail "the check passes a file without the SPDX line"
n=0 bad=0
for f in $(find . -path ./tests/fuzz/seeds -prune -o -path './build*' -prune -o -path ./autom4te.cache -prune \
    -o -path ./config -prune -o -path './_build' -prune -o -type f \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cpp' \
    -o -name '*.sh' -o -name '*.py' -o -name '*.am' -o -name '*.mk' -o -name '*.sbatch' -o -name '*.in' \
    -o -name configure.ac -o -name '*.eb' \) -print | sort); do
    case $f in ./configure|./Makefile.in|*/Makefile.in|./config.h.in|./aclocal.m4) continue ;; esac
    n=$((n + 1))
    has_spdx "$f" && continue
    echo "FAIL: $f: no 'SPDX-License-Identifier: BSD-3-Clause' in its first 3 lines" >&2
    bad=$((bad + 1))
done
[ "$n" -gt 150 ] || fail "found only $n source files under $top_srcdir: the search is broken"
[ "$bad" -eq 0 ] || fail "$bad of $n source files lack the SPDX line"
echo "ok: LICENSE is BSD-3-Clause; all $n source files carry its SPDX identifier"
