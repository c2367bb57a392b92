#!/bin/sh
# test_include_rule.sh - the dependency rule of docs/architecture.md holds:
# tests/include_rule.py checks every #include "..." of the tree's
# .c/.h/.cu/.cc files (tests/ aside) against tests/include_rule.txt. Prints TAP.
#
# 1. the tree keeps the rule: no include crosses it (FILE:LINE and the rule
#    broken are printed otherwise), no StarPU header in a pure folder, no
#    cycle between modules, and Makefile.am's libraries follow the folders
#    (each holds its folder's sources; link lines name them upper layer
#    first, once); breaches still being fixed ("known") are listed as TAP
#    comments;
# 2-7. negative controls on a small tree of their own (a tree that keeps its
#    rule passes): a lower folder that includes an upper one, StarPU in a
#    pure folder, two modules that include each other, a file under no
#    folder of the rule, a "known" breach that no longer exists, and
#    libraries that hold another folder's source, link a lower library first
#    or twice, or have no rule, are each caught, naming the file and line.
set -u
SG_TEST_NAME=include_rule; . "${SG_SRCDIR:-.}/tests/test_env.sh"
CHECK="$SRC/tests/include_rule.py"
echo "1..7"

"$PY" "$CHECK" "$SRC" >"$TMP/tree.out" 2>&1
rc=$?
ok $rc "the tree keeps the include rule of tests/include_rule.txt"
[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/tree.out"
grep '^known: ' "$TMP/tree.out" | sed 's/^/# /'

# a tree of three layers: base <- mid <- top; base is pure
neg=$TMP/neg
mkdir -p "$neg/base" "$neg/mid" "$neg/top"
printf 'base:\nmid: base\ntop: mid\npure: base\n' >"$neg/rule.txt"
printf '#include "base/b.h"\n' >"$neg/mid/m.h"
printf '#include "mid/m.h"\n#include "base/b.h"\n#include <stdio.h>\n' >"$neg/top/t.c"
: >"$neg/base/b.h"
: >"$neg/top/t.h"
# caught WHAT PATTERN: the checker fails on $neg and prints PATTERN
caught() {
	if "$PY" "$CHECK" "$neg" "$neg/rule.txt" >"$TMP/neg.out" 2>&1; then
		ok 1 "$1 is not caught"
	elif grep -q "$2" "$TMP/neg.out"; then
		ok 0 "$1 is caught"
	else
		ok 1 "$1: not the expected message"
		sed 's/^/# /' "$TMP/neg.out"
	fi
}
# the small tree itself passes (top/ includes mid/ and base/)
"$PY" "$CHECK" "$neg" "$neg/rule.txt" >"$TMP/neg.out" 2>&1 || sed 's/^/# clean tree: /' "$TMP/neg.out"

printf '#include "top/t.h"\n' >"$neg/base/up.c"
caught "base/ including top/ (an upper layer)" '^base/up.c:1: base includes top/t.h (top)'
rm "$neg/base/up.c"

printf '#include <stdio.h>\n#include <starpu.h>\n' >"$neg/base/sp.c"
caught "a StarPU header in a pure folder" '^base/sp.c:2: includes <starpu.h>'
rm "$neg/base/sp.c"

printf '#include "mid/y.h"\n' >"$neg/mid/x.c"
printf '#include "mid/x.h"\n' >"$neg/mid/y.c"
: >"$neg/mid/x.h"
: >"$neg/mid/y.h"
caught "two modules that include each other" 'mid/x <-> mid/y'
rm "$neg/mid/x.c" "$neg/mid/y.c" "$neg/mid/x.h" "$neg/mid/y.h"

# a rule line for lib/core makes lib/ scanned; lib/w.c, beside lib/core/,
# is under no line
printf 'lib/core: base\n' >>"$neg/rule.txt"
mkdir -p "$neg/lib/core"
printf 'int z;\n' >"$neg/lib/core/z.c"
printf 'int w;\n' >"$neg/lib/w.c"
caught "a file in no folder of the rule" '^lib/w.c:1: in no folder of the include rule'
rm -rf "$neg/lib"
sed -i '/^lib\/core: /d' "$neg/rule.txt"

printf 'known: base/gone.c top/t.h\n' >>"$neg/rule.txt"
caught "a known breach that no longer exists" '"known: base/gone.c top/t.h" matches no include any more'
sed -i '/^known: /d' "$neg/rule.txt"

# libraries: libbase.a holds base/, libmid.a mid/, libtop.a top/; a source of
# mid/ in libbase.a, a link line with libbase.a before libtop.a, a library
# linked twice and a library with no line are each a breach
printf 'library: libtop.a top\nlibrary: libmid.a mid\nlibrary: libbase.a base\n' >>"$neg/rule.txt"
: >"$neg/base/b.c"
: >"$neg/mid/m.c"
cat >"$neg/Makefile.am" <<'EOF'
noinst_LIBRARIES = libbase.a libmid.a libtop.a libextra.a
libbase_a_SOURCES = base/b.c base/b.h \
	mid/m.c
libmid_a_SOURCES = mid/m.h
libtop_a_SOURCES = top/t.c
LOW_LIBS = libmid.a libbase.a -lm
prog_LDADD = libbase.a libtop.a $(LOW_LIBS)
good_LDADD = libtop.a $(LOW_LIBS)
EOF
if ! "$PY" "$CHECK" "$neg" "$neg/rule.txt" >"$TMP/neg.out" 2>&1 &&
	grep -q '^Makefile.am:2: libbase.a holds mid/m.c, which is not of base' "$TMP/neg.out" &&
	grep -q '^Makefile.am:7: prog_LDADD links libbase.a before libtop.a' "$TMP/neg.out" &&
	grep -q '^Makefile.am:7: prog_LDADD links libbase.a twice' "$TMP/neg.out" &&
	grep -q '^Makefile.am:1: libextra.a has no "library:" line' "$TMP/neg.out" &&
	! grep -q 'good_LDADD' "$TMP/neg.out"; then
	ok 0 "a library with another folder's source, a lower library linked first or twice, and a library with no rule are caught"
else
	ok 1 "libraries that do not follow the folders are not caught"
	sed 's/^/# /' "$TMP/neg.out"
fi
