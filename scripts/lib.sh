# lib.sh - the preamble the bash scripts of scripts/ share; sourced, not run,
# right after `set -euo pipefail` (before any cd):
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# It sets
#   REPO_ROOT   the repository root, from the sourcing script's own path
#   SG_SCRIPT   the sourcing script's name without .sh (its messages' prefix)
# and defines
#   say MESSAGE...        "SG_SCRIPT: MESSAGE" on standard error
#   die MESSAGE [STATUS]  say MESSAGE, then exit STATUS (default 1); a script
#                         whose errors read otherwise defines its own after
#   sg_usage              the script's header comment, from its second line
#                         up to `set -euo`, without the "# " (its --help)
#   sg_env_only_args ARG  for scripts set by environment variables alone:
#                         -h/--help prints sg_usage and exits 0, no argument
#                         returns, anything else is refused (exit 2)
# shellcheck shell=bash

# the script that sources this file (quickstart.sh is itself sourced, so $0
# may be bash)
_sg_lib_caller=${BASH_SOURCE[1]:-$0}
REPO_ROOT=$(cd "$(dirname "$_sg_lib_caller")/.." && pwd)
SG_SCRIPT=$(basename "$_sg_lib_caller" .sh)

say() { printf '%s: %s\n' "$SG_SCRIPT" "$*" >&2; }
die() {
	say "$1"
	exit "${2:-1}"
}

sg_usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$_sg_lib_caller"
}

sg_env_only_args() {
	case "${1:-}" in
	-h | --help)
		sg_usage
		exit 0
		;;
	"") ;;
	*)
		printf '%s: no arguments (environment variables only, see --help)\n' "$SG_SCRIPT" >&2
		exit 2
		;;
	esac
}
