#!/bin/sh
# test_source_sizes.sh - no source file over 900 lines and no function over
# 150 (scripts/source_sizes.sh; docs/architecture.md, "Sizes").
#
# The tree: every .c, .cu and .h outside tests/ and the CUDA emulator is
# within both limits; the file sizes agree with wc -l. The scanner itself,
# on files written here whose sizes are known by construction: a file of
# 901 lines is reported and one of 900 is not; a function of 151 lines is
# reported by name and line and one of 150 is not, counted from its
# declarator's first line to its closing brace; braces in strings,
# character literals, comments and preprocessor lines, a struct body and a
# long initialiser do not count as functions; the limits are options; bad
# arguments exit 2. Prints TAP.
set -u
SG_TEST_NAME=source_sizes
. "${SG_SRCDIR:-.}/tests/test_env.sh"
SIZES="$SRC/scripts/source_sizes.sh"

# ---- the tree ----------------------------------------------------------------
sh "$SIZES" >"$TMP/tree.out" 2>&1
rc=$?
sed 's/^/# /' "$TMP/tree.out"
[ $rc -eq 0 ] && ! [ -s "$TMP/tree.out" ]
ok $? "no source file over 900 lines, no function over 150 (scripts/source_sizes.sh)"

sh "$SIZES" --files >"$TMP/files" 2>&1
sh "$SIZES" --list >"$TMP/list" 2>&1
grep -q '\.cu$' "$TMP/files" && grep -q '\.h$' "$TMP/files" &&
	grep -qx 'graph/compile\.c' "$TMP/files" &&
	grep -q '^[0-9]* graph/compile\.c:[0-9]* sg_compile_step$' "$TMP/list" &&
	! grep -q '^tests/\|^codelets/cuda/emu/' "$TMP/files"
ok $? "the scan reads .c, .cu and .h files, and leaves tests/ and the emulator out"

# the largest scanned file by wc -l (an independent count) is within 900
max=$(cd "$SRC" && while read -r f; do wc -l <"$f"; done <"$TMP/files" | sort -n | tail -1)
echo "# the largest of $(wc -l <"$TMP/files") files: $max lines (wc -l)"
[ -n "$max" ] && [ "$max" -le 900 ]
ok $? "wc -l agrees: the largest scanned file has at most 900 lines"

# ---- the scanner on files of known sizes ----------------------------------------
# lines N FILE: N lines of a comment body
lines() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) print " * filler" }' >>"$2"; }
# func NAME TOTAL FILE: a function of TOTAL lines (declarator to closing brace)
func() {
	{
		echo "static int"
		echo "$1(int a,"
		echo "     int b)"
		echo "{"
		awk -v n="$(($2 - 6))" 'BEGIN { for (i = 0; i < n; i++) print "    a += b;" }'
		echo "    return a;"
		echo "}"
	} >>"$3"
}

: >"$TMP/big.c"
lines 901 "$TMP/big.c"
: >"$TMP/fits.c"
lines 900 "$TMP/fits.c"
sh "$SIZES" "$TMP/big.c" "$TMP/fits.c" >"$TMP/files.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qx "$TMP/big.c: 901 lines (over 900)" "$TMP/files.out" &&
	[ "$(wc -l <"$TMP/files.out")" -eq 1 ]
ok $? "a file of 901 lines is reported, one of 900 is not (exit 1)"

: >"$TMP/funcs.cu"
func too_long 151 "$TMP/funcs.cu"
echo "" >>"$TMP/funcs.cu"
func just_fits 150 "$TMP/funcs.cu"
sh "$SIZES" "$TMP/funcs.cu" >"$TMP/funcs.out" 2>&1
rc=$?
sed 's/^/# /' "$TMP/funcs.out"
[ $rc -eq 1 ] && grep -qx "$TMP/funcs.cu:1 too_long: 151 lines (over 150)" "$TMP/funcs.out" &&
	! grep -q just_fits "$TMP/funcs.out"
ok $? "a function of 151 lines is reported with its line and name, one of 150 is not"

sh "$SIZES" --list "$TMP/funcs.cu" >"$TMP/funcs.list"
grep -qx "151 $TMP/funcs.cu:1 too_long" "$TMP/funcs.list" &&
	grep -qx "150 $TMP/funcs.cu:153 just_fits" "$TMP/funcs.list"
ok $? "--list gives every function's length and first line"

# braces that are not code, a struct and an initialiser longer than 150 lines
cat >"$TMP/tricky.h" <<'EOF'
#define OPEN {
#define BLOCK(x) \
    do {        \
    } while (0)
/* { a comment's brace */
struct big {
EOF
awk 'BEGIN { for (i = 0; i < 160; i++) print "    int f" i ";" }' >>"$TMP/tricky.h"
cat >>"$TMP/tricky.h" <<'EOF'
};
static const int table[] = {
EOF
awk 'BEGIN { for (i = 0; i < 160; i++) print "    " i "," }' >>"$TMP/tricky.h"
cat >>"$TMP/tricky.h" <<'EOF'
};
static inline int braces(const char *s)
{
    int n = 0; // }
    if (s[0] == '{' || s[0] == '}')
        n++;
    const char *t = "}}} {";
    return n + (t[0] == '\'');
}
EOF
sh "$SIZES" --list "$TMP/tricky.h" >"$TMP/tricky.out" 2>&1
rc=$?
sed 's/^/# /' "$TMP/tricky.out"
[ $rc -eq 0 ] && [ "$(cat "$TMP/tricky.out")" = "8 $TMP/tricky.h:330 braces" ]
ok $? "braces in strings, chars, comments, macros; a struct, an initialiser: 1 function, 8 lines"

sh "$SIZES" --max-lines 100 --max-function 5 "$TMP/tricky.h" >"$TMP/lim.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "tricky.h: 337 lines (over 100)" "$TMP/lim.out" &&
	grep -q "tricky.h:330 braces: 8 lines (over 5)" "$TMP/lim.out"
ok $? "--max-lines and --max-function set the limits"

sh "$SIZES" --max-lines many "$TMP/tricky.h" >"$TMP/bad.out" 2>&1
rc1=$?
sh "$SIZES" --bogus >"$TMP/bad2.out" 2>&1
rc2=$?
[ $rc1 -eq 2 ] && [ $rc2 -eq 2 ] && grep -q "got 'many'" "$TMP/bad.out" &&
	grep -q "unknown option '--bogus'" "$TMP/bad2.out"
ok $? "a bad limit or an unknown option: exit 2, naming it"

echo "1..$n"
