#!/bin/sh
# test_docs_links.sh - the README stays a page a newcomer reads in minutes, and
# the documentation's relative links lead somewhere. Prints TAP.
#
# 1. README.md has at most 300 lines (issue 40: the rest lives in docs/);
# 2. README.md's "Where things are" names every page of docs/;
# 3. every relative link and image of README.md, docs/*.md and the examples'
#    READMEs names a file or folder that exists, and every #anchor one of that
#    page's headings (tests/docs_links.py, GitHub's anchor rule);
# 4-7. negative controls: a page with a link to a missing file and one with a
#    missing anchor are caught, a link inside code is not taken for one and a
#    page's own anchor resolves, a README of 301 lines fails point 1;
# 8. README.md's Quick start holds exactly the two commands, and
#    scripts/quickstart.sh takes both (a third command, or one the script
#    does not know, fails).
# Pages a branch adds while another links them (PENDING) may be linked before
# they exist: a missing one is a TAP comment, an existing one is checked like
# the others. Empty when nothing is pending.
set -u
SG_TEST_NAME=docs_links; . "${SG_SRCDIR:-.}/tests/test_env.sh"
PENDING=""
CHECK="$SRC/tests/docs_links.py"
plan 8

# short_readme FILE: true when FILE has at most 300 lines; lines = its lines
short_readme() {
	lines=$(wc -l <"$1")
	[ "$lines" -le 300 ]
}
if short_readme "$SRC/README.md"; then
	ok 0 "README.md has $lines lines (at most 300)"
else
	ok 1 "README.md has $lines lines, more than 300: move details to docs/"
fi

missing=
for p in "$SRC"/docs/*.md; do
	page=docs/${p##*/}
	grep -q "](${page})" "$SRC/README.md" || missing="$missing $page"
done
if [ -z "$missing" ]; then
	ok 0 "README.md links every page of docs/"
else
	ok 1 "README.md does not link:$missing"
fi

ok_args=
for p in $PENDING; do ok_args="$ok_args --missing-ok $p"; done
# the pages, relative to the source tree
pages=$(cd "$SRC" && ls README.md docs/*.md examples/README.md examples/*/README.md)
# shellcheck disable=SC2086 # word splitting of the lists is meant
if "$PY" "$CHECK" "$SRC" $pages $ok_args >"$TMP/links.out" 2>&1 &&
	! grep -v ': pending$' "$TMP/links.out" | grep -q .; then
	ok 0 "every relative link of $(echo "$pages" | wc -w) pages resolves"
else
	ok 1 "broken links:"
	sed 's/^/# /' "$TMP/links.out"
fi
grep ': pending$' "$TMP/links.out" | sed 's/^/# not here yet (another branch adds the page): /'

# negative controls, on a tree of their own
mkdir -p "$TMP/neg/docs"
printf '# Title\n\n## A `code` heading\n\ntext\n' >"$TMP/neg/docs/a.md"
printf '# B\n\n[gone](a-missing.md) and [fine](a.md)\n' >"$TMP/neg/docs/b.md"
printf '# C\n\n[no anchor](a.md#no-such-heading) [anchor](a.md#a-code-heading)\n' \
	>"$TMP/neg/docs/c.md"
printf '# D\n\n`[in code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n[self](#d)\n' \
	>"$TMP/neg/docs/d.md"
if ! "$PY" "$CHECK" "$TMP/neg" docs/b.md >"$TMP/neg.out" 2>&1 &&
	grep -q "a-missing.md: no such file" "$TMP/neg.out" && ! grep -q "a.md:" "$TMP/neg.out"; then
	ok 0 "a link to a missing file is caught (negative control)"
else
	ok 1 "a link to a missing file is not caught"
	sed 's/^/# /' "$TMP/neg.out"
fi
if ! "$PY" "$CHECK" "$TMP/neg" docs/c.md >"$TMP/neg.out" 2>&1 &&
	grep -q "#no-such-heading: no heading" "$TMP/neg.out" &&
	! grep -q "#a-code-heading" "$TMP/neg.out"; then
	ok 0 "a missing anchor is caught, a heading's own is not (negative control)"
else
	ok 1 "anchors are not checked as GitHub makes them"
	sed 's/^/# /' "$TMP/neg.out"
fi
if "$PY" "$CHECK" "$TMP/neg" docs/d.md >"$TMP/neg.out" 2>&1 && ! grep -q . "$TMP/neg.out"; then
	ok 0 "links inside code are not links; a page's own anchor resolves"
else
	ok 1 "code or a page's own anchor misread"
	sed 's/^/# /' "$TMP/neg.out"
fi
# the README check of point 1, on 301 lines
awk 'BEGIN { for (i = 0; i < 301; i++) print "line" }' >"$TMP/neg/README.md"
if ! short_readme "$TMP/neg/README.md"; then
	ok 0 "a README of $lines lines fails point 1 (negative control)"
else
	ok 1 "a README of $lines lines passes point 1"
fi

# the Quick start's code block: exactly `scripts/quickstart.sh run` and `test`
# (each with its comment), and the script's own dispatch knows both
cmds=$(awk '/^## Quick start/ { q = 1; next } q && /^## / { exit }
	q && /^```/ { if (inb) exit; inb = 1; next } inb { print $1, $2 }' "$SRC/README.md")
want=$(printf '%s\n' "scripts/quickstart.sh run" "scripts/quickstart.sh test")
if [ "$cmds" = "$want" ] && grep -q '^	run) cmd_run' "$SRC/scripts/quickstart.sh" &&
	grep -q '^	test) cmd_test' "$SRC/scripts/quickstart.sh"; then
	ok 0 "Quick start: exactly scripts/quickstart.sh run and test, both known to the script"
else
	ok 1 "Quick start's commands: $(echo "$cmds" | tr '\n' ';')"
fi
