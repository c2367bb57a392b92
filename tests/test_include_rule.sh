#!/bin/sh
# test_include_rule.sh - the dependency rule of docs/architecture.md holds:
# tests/include_rule.py checks every #include "..." of the tree's
# .c/.h/.cu/.cc files (tests/ aside) against tests/include_rule.txt. Prints TAP.
#
# 1. the tree keeps the rule: no include crosses it (FILE:LINE and the rule
#    broken are printed otherwise), no StarPU header in a pure folder, no
#    cycle between modules; breaches still being fixed ("known") are listed
#    as TAP comments;
# 2-6. negative controls on a small tree of their own (a tree that keeps its
#    rule passes): a lower folder that includes an upper one, StarPU in a
#    pure folder, two modules that include each other, a file under no
#    folder of the rule, and a "known" breach that no longer exists are each
#    caught, naming the file and line.
set -u
SG_TEST_NAME=include_rule; . "${SG_SRCDIR:-.}/tests/test_env.sh"
CHECK="$SRC/tests/include_rule.py"
echo "1..6"

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
