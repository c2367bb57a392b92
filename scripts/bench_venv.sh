#!/usr/bin/env bash
# shellcheck disable=SC2034  # BENCH_* are read by the scripts that source this file
# bench_venv.sh - the benchmark-only Python environment of scripts/bench_train.sh
# and scripts/bench_adam.sh: PyTorch 2.x from PyPI (the build a user gets
# with `pip install torch`), DeepSpeed (for DeepSpeedCPUAdam, JIT-built with
# ninja on first use), ninja and numpy, in a virtual environment under
# ~/.cache/stepgraph. stepgraph itself never needs any of it: only these
# benchmarks install it, to compare against the best PyTorch a user would run.
#
# Sourced, not run:
#     . scripts/bench_venv.sh
#     bench_venv_setup            # sets BENCH_PY (empty when it could not be set up)
# or run directly to create / check it:  bash scripts/bench_venv.sh
#
# Environment:
#   BENCH_VENV         the environment (default ${STEPGRAPH_CACHE:-~/.cache/stepgraph}/venv-bench)
#   BENCH_VENV_PYTHON  the interpreter that creates it (default /usr/bin/python3,
#                      Debian's, whose python3-dev headers DeepSpeed's JIT build needs;
#                      else python3 on PATH)
#   BENCH_NO_VENV=1    use no environment: the PyPI columns show n/a
#   BENCH_OFFLINE=1    install nothing; use the environment only if it is complete
#   TORCH_INDEX_URL    where torch comes from (default: the CPU-only wheels of
#                      https://download.pytorch.org/whl/cpu when that answers,
#                      else PyPI's default wheel, which also pulls CUDA runtimes)
#   BENCH_TORCH_SPEC   default "torch>=2,<3";  BENCH_DEEPSPEED_SPEC default "deepspeed"
#
# Idempotent: when every package is already in the environment (and torch is
# 2.x and imports), nothing is installed or contacted; the versions are printed.
# When PyPI cannot be reached, it says so and BENCH_PY stays empty (or points
# at whatever the environment already has: BENCH_HAVE_DS=0 without DeepSpeed).
# The first install downloads ~1 GB (CPU wheel) to ~3 GB (PyPI's wheel with
# the CUDA libraries) and takes a few minutes.

BENCH_VENV=${BENCH_VENV:-${STEPGRAPH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph}/venv-bench}
BENCH_TORCH_SPEC=${BENCH_TORCH_SPEC:-torch>=2,<3}
BENCH_DEEPSPEED_SPEC=${BENCH_DEEPSPEED_SPEC:-deepspeed}
BENCH_PY=""
BENCH_HAVE_TORCH=0
BENCH_HAVE_DS=0

_bv_say() { printf 'bench_venv: %s\n' "$*" >&2; }

# _bv_versions PY: "torch=V deepspeed=V ninja=V numpy=V" (missing ones as -)
_bv_versions() {
	"$1" - <<'EOF' 2>/dev/null
import importlib.metadata as m
out = []
for p in ("torch", "deepspeed", "ninja", "numpy"):
    try:
        out.append("%s=%s" % (p, m.version(p)))
    except Exception:
        out.append("%s=-" % p)
print(" ".join(out))
EOF
}

# _bv_reachable URL: 0 when URL answers within 10 s
_bv_reachable() {
	"$BENCH_PY_BASE" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=10).read(1)
EOF
}

_bv_pip() { "$BENCH_VENV/bin/python" -m pip --disable-pip-version-check -q "$@" >&2; }

bench_venv_setup() {
	BENCH_PY=""
	BENCH_HAVE_TORCH=0
	BENCH_HAVE_DS=0
	if [ "${BENCH_NO_VENV:-0}" = 1 ]; then
		_bv_say "BENCH_NO_VENV=1: no PyPI torch / DeepSpeed (their columns show n/a)"
		return 0
	fi
	BENCH_PY_BASE=${BENCH_VENV_PYTHON:-/usr/bin/python3}
	[ -x "$BENCH_PY_BASE" ] || BENCH_PY_BASE=$(command -v python3 || true)
	if [ -z "$BENCH_PY_BASE" ]; then
		_bv_say "no python3: the PyPI torch / DeepSpeed columns show n/a"
		return 0
	fi
	local py="$BENCH_VENV/bin/python" v
	if [ ! -x "$py" ]; then
		if [ "${BENCH_OFFLINE:-0}" = 1 ]; then
			_bv_say "BENCH_OFFLINE=1 and no environment at $BENCH_VENV: PyPI columns show n/a"
			return 0
		fi
		if ! "$BENCH_PY_BASE" -c 'import ensurepip, venv' 2>/dev/null; then
			if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
				_bv_say "installing python3-venv and python3-dev (Debian) for the benchmark environment"
				DEBIAN_FRONTEND=noninteractive apt-get -y -q install python3-venv python3-dev >&2 ||
					_bv_say "apt-get install python3-venv python3-dev failed"
			else
				_bv_say "$BENCH_PY_BASE has no venv module: run 'sudo apt-get install python3-venv python3-dev'; PyPI columns show n/a"
				return 0
			fi
		fi
		_bv_say "creating $BENCH_VENV with $BENCH_PY_BASE"
		mkdir -p "$(dirname "$BENCH_VENV")"
		if ! "$BENCH_PY_BASE" -m venv "$BENCH_VENV" >&2; then
			_bv_say "python3 -m venv $BENCH_VENV failed: PyPI columns show n/a"
			rm -rf "$BENCH_VENV"
			return 0
		fi
	fi
	v=$(_bv_versions "$py")
	case "$v" in
	*"torch=2."*" deepspeed=-"* | *"=-"* | "") need=1 ;;
	*"torch=2."*) need=0 ;;
	*) need=1 ;;
	esac
	if [ "$need" = 1 ] && [ "${BENCH_OFFLINE:-0}" != 1 ]; then
		local index="${TORCH_INDEX_URL:-}"
		if [ -z "$index" ] && _bv_reachable https://download.pytorch.org/whl/cpu/torch/; then
			index=https://download.pytorch.org/whl/cpu
		fi
		if ! _bv_reachable "${PIP_INDEX_URL:-https://pypi.org/simple/}"; then
			_bv_say "cannot reach ${PIP_INDEX_URL:-https://pypi.org/simple/} (offline?): installing nothing"
		else
			case "$v" in *"torch=2."*) ;; *)
				_bv_say "pip install '$BENCH_TORCH_SPEC' from ${index:-the default index (PyPI)} (first time: a few minutes)"
				if [ -n "$index" ]; then
					_bv_pip install "$BENCH_TORCH_SPEC" --index-url "$index" --extra-index-url https://pypi.org/simple/
				else
					_bv_pip install "$BENCH_TORCH_SPEC"
				fi || _bv_say "pip install torch failed"
				;;
			esac
			case "$(_bv_versions "$py")" in *"ninja=-"* | *"numpy=-"*)
				_bv_say "pip install ninja numpy"
				_bv_pip install ninja numpy || _bv_say "pip install ninja numpy failed" ;;
			esac
			case "$(_bv_versions "$py")" in *"torch=2."*" deepspeed=-"*)
				# DeepSpeed's setup.py imports torch: build it against the torch just installed.
				# DS_BUILD_OPS=0: no op compiled now; cpu_adam is JIT-built with ninja on first use.
				_bv_say "pip install '$BENCH_DEEPSPEED_SPEC' (ops JIT-built on first use)"
				DS_BUILD_OPS=0 _bv_pip install --no-build-isolation "$BENCH_DEEPSPEED_SPEC" ||
					_bv_say "pip install deepspeed failed" ;;
			esac
		fi
	fi
	v=$(_bv_versions "$py")
	case "$v" in *"torch=2."*) ;; *)
		_bv_say "no torch 2.x in $BENCH_VENV ($v): PyPI columns show n/a"
		return 0 ;;
	esac
	if ! "$py" -c 'import torch, numpy' >/dev/null 2>&1; then
		_bv_say "torch or numpy in $BENCH_VENV does not import: PyPI columns show n/a"
		"$py" -c 'import torch, numpy' 2>&1 | tail -n 3 >&2
		return 0
	fi
	BENCH_PY=$py
	BENCH_HAVE_TORCH=1
	case "$v" in *"deepspeed=-"*) ;; *) BENCH_HAVE_DS=1 ;; esac
	_bv_say "$BENCH_VENV: $v"
	return 0
}

# bench_blas_kernels STEPGRAPH: give every peer that uses OpenBLAS (Debian's
# torch, numpy) the kernels stepgraph uses. Debian 12's OpenBLAS falls back
# to its SSE3 "Prescott" kernels on CPUs newer than its tables (sgemm at an
# eighth of the AVX-512 rate); stepgraph then re-executes itself with
# OPENBLAS_CORETYPE set (codelets/cpu/blas_core.h), and a peer left on
# Prescott would be a crippled peer. Exports OPENBLAS_CORETYPE when stepgraph
# chose the kernels and the caller did not set it; prints what it did.
bench_blas_kernels() {
	local line k
	[ -n "${OPENBLAS_CORETYPE:-}" ] && {
		_bv_say "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (set by the caller) for stepgraph and the peers"
		return 0
	}
	line=$("$1" version 2>/dev/null | grep '^BLAS:' || true)
	case "$line" in *"chosen by stepgraph"*)
		k=$(sed -n 's/.*kernels \([A-Za-z0-9]*\).*/\1/p' <<<"$line")
		if [ -n "$k" ]; then
			export OPENBLAS_CORETYPE=$k
			_bv_say "OpenBLAS kernels $k for stepgraph and the OpenBLAS peers ($line)"
		fi ;;
	esac
	return 0
}

# Run directly: set the environment up and report.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -eu
	case "${1:-}" in -h | --help)
		sed -n '3,/^$/s/^# \{0,1\}//p' "$0"
		exit 0 ;;
	esac
	bench_venv_setup
	[ -n "$BENCH_PY" ] || exit 1
fi
