#!/usr/bin/env bash
# bench_lib.sh - what scripts/bench_adam.sh and scripts/bench_adam_chain.sh
# share; sourced, not run. The caller sets N, THREADS, REPS, tmp (a scratch
# directory) and say (its progress printer) first.

# bench_check_args: exits 2 with a message when THREADS is not a comma list
# of thread counts or REPS not a positive integer.
bench_check_args() {
	case "$THREADS" in '' | *[!0-9,]* | ,* | *, | *,,*)
		say "THREADS must be a comma list of thread counts (got '$THREADS')"
		exit 2
		;;
	esac
	case "$REPS" in '' | *[!0-9]* | 0)
		say "REPS must be a positive integer (got '$REPS')"
		exit 2
		;;
	esac
}

# bench_time_peer LABEL PYTHON SCRIPT KIND [EXTRA...]: runs
# `PYTHON SCRIPT KIND N T REPS EXTRA...` once per thread count T of THREADS,
# each in its own process with OMP_NUM_THREADS, MKL_NUM_THREADS and
# OPENBLAS_NUM_THREADS set to T, and reads its `peer_seconds=S` line; prints
# "T:S,..." (S = 0 where it failed, with the error's last lines on stderr).
# shellcheck disable=SC2154 # tmp is the caller's
bench_time_peer() {
	local label=$1 py=$2 script=$3 kind=$4 out="" t s tl
	shift 4
	IFS=, read -r -a tl <<<"$THREADS"
	for t in "${tl[@]}"; do
		say "timing $label, $t thread(s)"
		if s=$(OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t \
			"$py" "$script" "$kind" "$N" "$t" "$REPS" "$@" 2>"$tmp/peer.err" |
			sed -n 's/^peer_seconds=//p') && [ -n "$s" ]; then
			say "  $label, $t thread(s): $s s per step"
		else
			say "  $label failed, n/a: $(grep -v 'WARNING' "$tmp/peer.err" | tail -n 4 | tr '\n' ' ')"
			s=0
		fi
		out="$out${out:+,}$t:$s"
	done
	printf '%s' "$out"
}
