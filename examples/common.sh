# common.sh - sourced by the examples' run.sh: the repository root, the
# stepgraph binary, the output directory and the size (EXAMPLE_SIZE=ci: small).
set -euo pipefail
EXAMPLE_DIR=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
REPO_ROOT=$(cd "$EXAMPLE_DIR/../.." && pwd)
STEPGRAPH=${STEPGRAPH:-$REPO_ROOT/stepgraph}
OUT=${OUT:-$EXAMPLE_DIR/out}
EXAMPLE_SIZE=${EXAMPLE_SIZE:-full}
PY=${SYSTEM_PYTHON:-python3}
case "$EXAMPLE_SIZE" in full | ci) ;; *) echo "EXAMPLE_SIZE must be full or ci" >&2; exit 2 ;; esac
[ -x "$STEPGRAPH" ] || { echo "example: build stepgraph first (no $STEPGRAPH)" >&2; exit 2; }
mkdir -p "$OUT"
# the examples' StarPU calibration stays with their outputs
export STARPU_HOME=${STARPU_HOME:-$OUT/starpu}
mkdir -p "$STARPU_HOME"
ci() { [ "$EXAMPLE_SIZE" = ci ]; }
say() { printf '\n== %s\n' "$*"; }
