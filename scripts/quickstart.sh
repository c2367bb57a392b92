#!/usr/bin/env bash
# From a fresh clone to a result, as root on Debian 12:
#   scripts/quickstart.sh run   set up, build, run the default job
#   scripts/quickstart.sh test  set up, build, run `make check`, then the unit tests again
#                               under ASan + UBSan (scripts/sanitize.sh); the last line is the
#                               summary of both, "N passed, N failed[, N skipped]"
# Options after the subcommand (e.g. --no-simgrid) are passed on to scripts/setup.sh.
# STEPGRAPH_CHECK_ARM64=1 (as .ci/run sets): `test` also runs `scripts/setup.sh --arm64`
# (Debian's arm64 libraries, StarPU cross-built), so that tests/test_arm64_build.sh builds
# and trains the AArch64 build under qemu; should that set-up fail, the test is skipped.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
JOBS=$(nproc 2>/dev/null || echo 2)


# ---------------------------------------------------------------- the default job
# What `quickstart.sh run` does once everything is built. Change it here.
default_job() {
	./stepgraph graph configs/default.json --format svg -o default-step.svg
	say "step graph SVG written to $REPO_ROOT/default-step.svg"
	# the main job: train the tiny model on the CPU; its step graph runs on StarPU
	./stepgraph run configs/default.json --trace default-trace.json \
		--metrics default-metrics.jsonl
	say "timeline of the last step: $REPO_ROOT/default-trace.json (open in ui.perfetto.dev)"
}

# ---------------------------------------------------------------- setup and build
# prepare [SETUP-OPTIONS...]: dependencies, env, autoreconf, configure, make.
# Each step is checked explicitly: it is also called where `set -e` does not apply.
prepare() {
	cd "$REPO_ROOT" || return 1
	say "setting up dependencies (scripts/setup.sh $*)"
	bash scripts/setup.sh "$@" || { say "scripts/setup.sh failed"; return 1; }
	# shellcheck disable=SC1091
	. .deps-build/env.sh || { say "could not source .deps-build/env.sh"; return 1; }

	if [ ! -x configure ] || [ configure -ot configure.ac ]; then
		say "autoreconf -fi"
		autoreconf -fi || { say "autoreconf failed"; return 1; }
	fi

	# Reconfigure when the flags changed too (a new StarPU prefix after a setup change).
	local flags_file=.deps-build/configure-flags
	local old_flags=""
	[ -f "$flags_file" ] && old_flags=$(cat "$flags_file")
	if [ ! -f Makefile ] || [ ! -f config.status ] || [ config.status -ot configure ] ||
		[ "$old_flags" != "$STEPGRAPH_CONFIGURE_FLAGS" ]; then
		local cfg=()
		read -r -a cfg <<<"$STEPGRAPH_CONFIGURE_FLAGS"
		say "./configure ${cfg[*]}"
		./configure "${cfg[@]}" || { say "./configure failed (see config.log)"; return 1; }
		printf '%s\n' "$STEPGRAPH_CONFIGURE_FLAGS" >"$flags_file"
	fi

	say "make -j$JOBS"
	make -j"$JOBS" || { say "make failed"; return 1; }
}

# ---------------------------------------------------------------- test results
# tap_counts DIR: "PASSED FAILED SKIPPED" over the automake .trs files under DIR
tap_counts() {
	local dir=$1
	local files=()
	if [ -d "$dir" ]; then
		while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$dir" -name '*.trs' -print0)
	fi
	if [ "${#files[@]}" -eq 0 ]; then
		echo "0 0 0"
		return 0
	fi
	awk '
		$1 == ":test-result:" {
			if ($2 == "PASS" || $2 == "XFAIL") pass++
			else if ($2 == "SKIP") skip++
			else fail++    # FAIL, XPASS, ERROR and anything unknown
		}
		END { printf "%d %d %d\n", pass, fail, skip }
	' "${files[@]}"
}

# summary_line PASSED FAILED SKIPPED
summary_line() {
	if [ "$3" -gt 0 ]; then
		printf '%d passed, %d failed, %d skipped\n' "$1" "$2" "$3"
	else
		printf '%d passed, %d failed\n' "$1" "$2"
	fi
}

# report_tests MAKE_CHECK_RC: print the summary as the last line; return non-zero on failure.
# Counts the main build's tests and the sanitizer build's (build-asan/tests).
report_tests() {
	local check_rc=$1 passed failed skipped ok=1 p2 f2 s2
	read -r passed failed skipped < <(tap_counts "$REPO_ROOT/tests")
	read -r p2 f2 s2 < <(tap_counts "$REPO_ROOT/build-asan/tests")
	passed=$((passed + p2)) failed=$((failed + f2)) skipped=$((skipped + s2))
	[ "$check_rc" -eq 0 ] || ok=0
	[ "$failed" -eq 0 ] || ok=0
	if [ $((passed + failed)) -eq 0 ]; then
		say "no test ran"
		ok=0
	fi
	if [ "$ok" = 0 ]; then
		# tests/Makefile.am (recursive make) or a top-level TESTS (non-recursive)
		local log
		for log in tests/test-suite.log test-suite.log ""; do
			[ -z "$log" ] || [ -f "$REPO_ROOT/$log" ] && break
		done
		if [ -n "$log" ]; then
			echo "==================== $log ===================="
			cat "$REPO_ROOT/$log"
			echo "==================== end of $log ===================="
		else
			say "no test-suite.log (make check rc=$check_rc)"
		fi
		log=build-asan/test-suite.log
		if [ "$f2" -gt 0 ] && [ -f "$REPO_ROOT/$log" ]; then
			echo "==================== $log (ASan + UBSan) ===================="
			cat "$REPO_ROOT/$log"
			echo "==================== end of $log ===================="
		fi
	fi
	summary_line "$passed" "$failed" "$skipped"
	[ "$ok" = 1 ]
}

# ---------------------------------------------------------------- subcommands
cmd_run() {
	prepare "$@" || exit 1
	say "running the default job"
	default_job
}

cmd_test() {
	local rc=0
	# Only this run's results count: not those of an earlier run or of removed tests.
	find "$REPO_ROOT/tests" "$REPO_ROOT/build-asan/tests" -name '*.trs' -delete 2>/dev/null || true
	rm -f "$REPO_ROOT/tests/test-suite.log" "$REPO_ROOT/test-suite.log" \
		"$REPO_ROOT/build-asan/test-suite.log"
	if prepare "$@"; then
		if [ "${STEPGRAPH_CHECK_ARM64:-0}" = 1 ]; then
			say "scripts/setup.sh --arm64 (the AArch64 build's libraries and StarPU)"
			if bash scripts/setup.sh --arm64 "$@"; then
				# shellcheck disable=SC1091
				. .deps-build/env.sh
			else
				say "the arm64 set-up failed: tests/test_arm64_build.sh will be skipped"
			fi
		fi
		say "make -j$JOBS check"
		make -j"$JOBS" check || rc=$?
		# the pure-C unit tests again under ASan + UBSan (their results count too)
		say "scripts/sanitize.sh"
		local src=0
		JOBS=$JOBS bash scripts/sanitize.sh || src=$?
		if [ "$src" = 77 ]; then
			say "sanitizer tests skipped: no clang with ASan/UBSan (scripts/setup.sh installs it)"
		elif [ "$src" != 0 ] && [ "$rc" = 0 ]; then
			rc=$src
		fi
	else
		rc=1
	fi
	report_tests "$rc"
}

usage() {
	cat <<'EOF'
usage: scripts/quickstart.sh run|test [setup options]

  run   install dependencies, build StarPU and stepgraph, run the default job
  test  the same setup and build, then `make check`; prints "N passed, N failed" last
EOF
}

main() {
	local cmd=${1:-}
	[ $# -gt 0 ] && shift
	case "$cmd" in
	run) cmd_run "$@" ;;
	test) cmd_test "$@" ;;
	-h | --help | help) usage ;;
	*) usage >&2; exit 2 ;;
	esac
}

# Sourcing the script (for its functions, e.g. in a test) runs nothing.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	main "$@"
fi
