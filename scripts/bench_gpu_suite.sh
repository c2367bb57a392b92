#!/usr/bin/env bash
# bench_gpu_suite.sh - the one device call of the GPU benchmark (issue 39 items 4-5,
# issue 41 item 4): on the lent GPU machine, unpacks the carry of scripts/gpu_prepare.sh
# (scripts/gpu_carry_env.sh), installs DeepSpeed from its wheels, and runs
# scripts/bench_gpu_suite.py with the carried stepgraph. The budget counts from this
# script's start. Arguments go to bench_gpu_suite.py (--help, --dry-run, --budget S,
# --only/--skip STAGES, --out DIR: default $OUT, the device tool's folder).
#
#   device tool: run, carry [".gpu-carry"], timeout_s 600,
#     command: bash scripts/bench_gpu_suite.sh --budget 570
#
# --carry DIR (first) names another carry (default .gpu-carry).
set -uo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export BENCH_T0=${BENCH_T0:-$(date +%s)}
CARRY=.gpu-carry
if [ "${1:-}" = --carry ]; then
	[ -n "${2:-}" ] || { echo "bench_gpu_suite: --carry needs a directory" >&2; exit 2; }
	CARRY=$2
	shift 2
fi
for a in "$@"; do
	case "$a" in
	-h | --help | --dry-run)
		# nothing to set up for these
		exec python3 "$REPO_ROOT/scripts/bench_gpu_suite.py" "$@"
		;;
	esac
done
cd "$REPO_ROOT" || exit 1
# shellcheck disable=SC1091
. "$REPO_ROOT/scripts/gpu_carry_env.sh"
gpu_carry_env "$CARRY" "$REPO_ROOT"
[ -z "$CARRY_NOTE" ] || echo "bench_gpu_suite: $CARRY_NOTE"
SITE=$(mktemp -d "${TMPDIR:-/tmp}/bench-gpu-site.XXXXXX")
gpu_carry_wheels "$SITE" || true
export STARPU_SILENT=1 PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
unset STARPU_NCPU STARPU_NCPUS STARPU_NCUDA STARPU_SCHED
BIN=${BIN:-$SG_BUILDDIR/stepgraph} exec python3 "$REPO_ROOT/scripts/bench_gpu_suite.py" "$@"
