#!/bin/sh
# test_tap_lib.sh - tests/tap_lib.sh, which every shell test uses: small
# scripts under sh (dash) and bash source it and their TAP output, exit
# status and left-overs are checked against what TAP and the library's
# comment say: checks numbered from 1, failures counted in the plan's status,
# skips as "ok N # SKIP", a whole-test skip as "1..0 # SKIP" with status 0,
# the clean-up commands run newest first, all of them, at a normal end, at
# `exit 3` (which stays the status) and at SIGTERM (status 143), the
# temporary directory gone in each case; sourced twice, the count goes on;
# tests/test_env.sh gives a private STARPU_HOME inside TMP, no CUDA worker
# unless SG_TEST_CUDA=1 (then the caller's choice is unset too). Prints TAP.
set -u
SG_TEST_NAME=tap_lib
. "${SG_SRCDIR:-.}/tests/test_env.sh"

# child MODE: a script of 4 checks (the second fails unless MODE says pass)
# and 2 clean-up commands; its TMP's name in $TMP/child.dir
cat >"$TMP/child.sh" <<'SHEOF'
set -u
. "$SRC/tests/tap_lib.sh"
. "$SRC/tests/tap_lib.sh"
tap_tmpdir tap_child
echo "$TMP" >"$OUTDIR/child.dir"
at_exit 'echo "# older"; false'
at_exit 'echo "# newer"'
ok 0 "first"
case "$MODE" in pass) ok 0 "second" ;; *) ok 1 "second" ;; esac
skip "not here" 2
case "$MODE" in
exit3) exit 3 ;;
term) kill -TERM $$; sleep 5 ;;
skipall) skip_all "nothing to test" ;;
esac
done_testing
SHEOF
# run SH MODE RC: the child under SH exits with RC and its TMP is gone;
# its output in $TMP/SH.MODE.out
run() {
	SRC=$SRC OUTDIR=$TMP MODE=$2 "$1" "$TMP/child.sh" >"$TMP/$1.$2.out" 2>&1
	[ $? = "$3" ] && ! [ -e "$(cat "$TMP/child.dir")" ]
}
printf '%s\n' "ok 1 - first" "not ok 2 - second" "ok 3 # SKIP not here" "ok 4 # SKIP not here" \
	"1..4" "# newer" "# older" >"$TMP/want"
for sh in sh bash; do
	if ! command -v $sh >/dev/null 2>&1; then
		skip "no $sh" 6
		continue
	fi
	run $sh fail 1 && cmp -s "$TMP/want" "$TMP/$sh.fail.out"
	ok $? "$sh: a failing check: TAP lines, plan, clean-up newest first, status 1, TMP removed"
	run $sh pass 0 && grep -q "^ok 2 - second" "$TMP/$sh.pass.out"
	ok $? "$sh: every check passing: status 0, TMP removed"
	run $sh exit3 3 && [ "$(tail -n 2 "$TMP/$sh.exit3.out" | tr '\n' ' ')" = "# newer # older " ] &&
		! grep -q '^1\.\.' "$TMP/$sh.exit3.out"
	ok $? "$sh: exit 3 stays the status, the clean-up runs, TMP removed"
	run $sh term 143 && grep -q "^# older" "$TMP/$sh.term.out"
	ok $? "$sh: SIGTERM: status 143, the clean-up runs, TMP removed"
	run $sh skipall 0 && grep -q "^1\.\.0 # SKIP nothing to test$" "$TMP/$sh.skipall.out"
	ok $? "$sh: skip_all prints the plan 1..0 with its reason and exits 0, TMP removed"
	grep -c '^ok\|^not ok' "$TMP/$sh.fail.out" | grep -qx 4
	ok $? "$sh: sourced twice, the checks are counted once from 1"
done

case "$STARPU_HOME" in
"$TMP"/*) [ -d "$STARPU_HOME" ] && [ "$STARPU_NCUDA" = 0 ] ;;
*) false ;;
esac
ok $? "test_env.sh: STARPU_HOME is a directory inside TMP, no CUDA worker"
printf 'set -u\nSG_TEST_CUDA=1; . "$SG_SRCDIR/tests/test_env.sh"\necho "ncuda=${STARPU_NCUDA:-unset} sched=${STARPU_SCHED:-unset}"\n' \
	>"$TMP/cuda.sh"
[ "$(STARPU_NCUDA=3 STARPU_SCHED=lws SG_SRCDIR=$SRC SG_BUILDDIR=$BUILD sh "$TMP/cuda.sh")" = "ncuda=unset sched=unset" ]
ok $? "test_env.sh with SG_TEST_CUDA=1: the caller's STARPU_NCUDA and STARPU_SCHED unset"
done_testing
