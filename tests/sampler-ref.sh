#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# sampler-ref.sh: the C sampler against the independent Python implementation
# of doc/sampler.md (tests/sampler_ref.py) over ~7000 cases: generator,
# permutation, padding, drop_last, batches, resume at several positions.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "python3 not found: cannot run the reference implementation"
ref="$top_srcdir/tests/sampler_ref.py"
python3 "$ref" cases >"$TMP/cases" || fail "sampler_ref.py cases"
python3 "$ref" expect <"$TMP/cases" >"$TMP/want" || fail "sampler_ref.py expect"
"$top_builddir/tests/sampler_dump" <"$TMP/cases" >"$TMP/got" || fail "sampler_dump failed"
[ -s "$TMP/want" ] || fail "empty reference output"
if ! diff "$TMP/want" "$TMP/got" >"$TMP/diff"; then
    head -20 "$TMP/diff"
    fail "C sampler differs from the reference (first differences above)"
fi
echo "ok: $(grep -c '^case' "$TMP/want") cases, $(wc -l <"$TMP/want") lines identical"
