#!/usr/bin/env bash
# check_cuda_vs_torch.sh - every kernel of codelets/cuda/cuda_ops.h against PyTorch:
# tools/cuda_ops_dump runs the kernels on fixed inputs (f32 and bf16) and writes
# inputs and outputs to files, tests/torch_cuda_ops_ref.py recomputes each op with
# PyTorch and compares (max abs error, max error relative to max|ref|, tolerance).
#
#   scripts/check_cuda_vs_torch.sh                 # on the GPU machine: real kernels,
#                                                  # PyTorch on cuda
#   scripts/check_cuda_vs_torch.sh --emulated      # anywhere: emulated kernels, Debian's
#                                                  # CPU PyTorch (/usr/bin/python3)
#   scripts/check_cuda_vs_torch.sh --help
#
# Builds nothing. See usage() for what it runs and tests/torch_cuda_ops_ref.py for the
# references and the tolerances.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


usage() {
	cat <<'EOF'
usage: scripts/check_cuda_vs_torch.sh [options]

Runs, from the repository root, and builds nothing:
  1. BIN DIR --dtype D --seed N   for each D of --dtypes (default f32,bf16): the kernels
     of codelets/cuda/cuda_ops.h on fixed inputs; writes DIR/D/manifest.json and the
     inputs and outputs as raw little-endian files;
  2. PY tests/torch_cuda_ops_ref.py DIR --device DEV --ref REF --markdown ...: every op
     recomputed with PyTorch and compared, one line per op, case and output (max abs
     error, max error relative to max|ref|, tolerance, PASS/FAIL), then
     "N passed, M failed".
Prints that table and writes it, with the commands, as Markdown to --out.

Options:
  --emulated        the emulated kernels (BIN tools/cuda_ops_dump_emu, linked with
                    libsgcudaemu.a: they run on the CPU) and PyTorch on the CPU
                    (--device cpu, PY /usr/bin/python3: Debian's torch); for testing
                    the check without a GPU
  --bin PATH        the dump program (default tools/cuda_ops_dump, linked with
                    libsgcuda.a; tools/cuda_ops_dump_emu with --emulated)
  --python PY       Python with torch and numpy (default $PYTHON, else python3;
                    /usr/bin/python3 with --emulated)
  --device DEV      PyTorch device (default cuda; cpu with --emulated)
  --ref MODE        torch: PyTorch's own ops in the stored dtype (F.rms_norm, SDPA,
                    F.linear, ...); fp32: the same formulas in fp32, rounded once;
                    auto (default): torch on cuda, fp32 on cpu
  --dtypes LIST     comma-separated, of f32 and bf16 (default f32,bf16)
  --seed N          input seed (default 1)
  --dir DIR         where the dumps go (default: a new temporary directory, removed
                    at the end when everything passed)
  --keep            keep the dump directory
  --out FILE        Markdown report (default cuda-vs-torch.md)
  --verbose         the worst element of every line, not only of failed ones
  -h, --help        this help
Relative paths are taken from the repository root.

Build the dump programs first (make; or by hand):
  gcc -std=c11 -O1 -Wall -I. tools/cuda_ops_dump.c libsgcudaemu.a libsgcpu.a \
      libsggraph.a libsgmodels.a libsgcommon.a -lcjson -lopenblas -lm -lstdc++ -lpthread \
      -o tools/cuda_ops_dump_emu
  gcc -std=c11 -O1 -Wall -I. tools/cuda_ops_dump.c libsgcuda.a libsgcpu.a \
      libsggraph.a libsgmodels.a libsgcommon.a -lcjson -lopenblas -lm -L/usr/local/cuda/lib64 \
      -Wl,-rpath,/usr/local/cuda/lib64 -lcublas -lcublasLt -lcudart -lnccl \
      -lstdc++ -lpthread -o tools/cuda_ops_dump

Exit status: 0 every comparison passed; 1 a comparison failed or a program failed;
2 a usage error, a missing program, a Python without torch, or no CUDA device
(for the real kernels or for --device cuda).
EOF
}

# ---- options ------------------------------------------------------------------------

EMULATED=0 BIN="" PY="" DEVICE="" REF=auto DTYPES=f32,bf16 SEED=1 DIR="" KEEP=0
OUT=cuda-vs-torch.md VERBOSE=0
need() {
	if [ "$#" -lt 2 ] || [ -z "$2" ]; then
		usage >&2
		die "option $1 needs a value" 2
	fi
}
while [ "$#" -gt 0 ]; do
	case "$1" in
	--emulated) EMULATED=1; shift ;;
	--bin) need "$@"; BIN=$2; shift 2 ;;
	--python) need "$@"; PY=$2; shift 2 ;;
	--device) need "$@"; DEVICE=$2; shift 2 ;;
	--ref) need "$@"; REF=$2; shift 2 ;;
	--dtypes) need "$@"; DTYPES=$2; shift 2 ;;
	--seed) need "$@"; SEED=$2; shift 2 ;;
	--dir) need "$@"; DIR=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	--out) need "$@"; OUT=$2; shift 2 ;;
	--verbose) VERBOSE=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown option: $1" 2 ;;
	esac
done

cd "$REPO_ROOT"
if [ "$EMULATED" = 1 ]; then
	BIN=${BIN:-tools/cuda_ops_dump_emu}
	PY=${PY:-/usr/bin/python3}
	DEVICE=${DEVICE:-cpu}
else
	BIN=${BIN:-tools/cuda_ops_dump}
	PY=${PY:-${PYTHON:-python3}}
	DEVICE=${DEVICE:-cuda}
fi
case "$REF" in auto | torch | fp32) ;; *) die "--ref $REF: auto, torch or fp32" 2 ;; esac
case "$SEED" in '' | *[!0-9]*) die "--seed $SEED: a non-negative integer" 2 ;; esac
IFS=, read -r -a DTS <<<"$DTYPES"
[ "${#DTS[@]}" -gt 0 ] || die "--dtypes is empty" 2
for d in "${DTS[@]}"; do
	case "$d" in f32 | bf16) ;; *) die "--dtypes: $d is not f32 or bf16" 2 ;; esac
done

[ -x "$BIN" ] || die "$BIN: no such program; build it first (see --help: make, or the gcc line)" 2
command -v "$PY" >/dev/null 2>&1 || die "$PY: no such Python" 2
"$PY" -c 'import numpy, torch' 2>/dev/null || die "$PY cannot import numpy and torch" 2

TMP_MADE=0
if [ -z "$DIR" ]; then
	DIR=$(mktemp -d "${TMPDIR:-/tmp}/cuda-vs-torch.XXXXXX")
	TMP_MADE=1
fi
mkdir -p "$DIR"
MD_TABLE="$DIR/table.md"

# ---- run ------------------------------------------------------------------------------

CMDS=()
STATUS=0
for d in "${DTS[@]}"; do
	cmd=("$BIN" "$DIR" --dtype "$d" --seed "$SEED")
	CMDS+=("${cmd[*]}")
	say "${cmd[*]}"
	set +e
	"${cmd[@]}" 2>"$DIR/dump-$d.log"
	rc=$?
	set -e
	if [ "$rc" != 0 ]; then
		cat "$DIR/dump-$d.log" >&2
		[ "$rc" = 2 ] && die "$BIN failed (exit 2: usage or no CUDA device); files in $DIR" 2
		die "$BIN --dtype $d failed (exit $rc); files in $DIR" 1
	fi
done

ref=("$PY" tests/torch_cuda_ops_ref.py "$DIR" --device "$DEVICE" --ref "$REF"
	--markdown "$MD_TABLE")
[ "$VERBOSE" = 1 ] && ref+=(--verbose)
CMDS+=("${ref[*]}")
say "${ref[*]}"
set +e
"${ref[@]}" | tee "$DIR/table.txt"
rc=${PIPESTATUS[0]}
set -e
case "$rc" in
0) ;;
1) STATUS=1 ;;
*) die "torch_cuda_ops_ref.py failed (exit $rc); files in $DIR" "$([ "$rc" = 2 ] && echo 2 || echo 1)" ;;
esac

# ---- report ---------------------------------------------------------------------------

{
	echo "# stepgraph CUDA kernels vs PyTorch"
	echo
	echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host: $(hostname)"
	echo "- source: $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
		git -C "$REPO_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
	if [ "$EMULATED" = 1 ]; then
		echo "- kernels: emulated ($BIN, on the CPU), PyTorch on $DEVICE"
	else
		echo "- kernels: $BIN (CUDA), PyTorch on $DEVICE"
		if command -v nvidia-smi >/dev/null 2>&1; then
			echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
		fi
	fi
	echo
	cat "$MD_TABLE"
	echo
	echo "Commands (from the repository root):"
	echo
	echo '```'
	printf '%s\n' "${CMDS[@]}"
	echo '```'
} >"$OUT"
say "report: $OUT"

if [ "$STATUS" = 0 ] && [ "$KEEP" = 0 ] && [ "$TMP_MADE" = 1 ]; then
	rm -rf "$DIR"
elif [ "$STATUS" != 0 ] || [ "$KEEP" = 1 ]; then
	say "dumps kept in $DIR"
fi
exit "$STATUS"
