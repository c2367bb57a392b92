#!/bin/bash
# format.sh [--check] [FILE...] - the house style (.clang-format) applied to the C,
# header and CUDA files git tracks (or to the FILEs named), in place; --check lists
# the files that differ and exits 1 instead. The style is written for clang-format
# 14, Debian 12's (scripts/setup.sh installs it): another version formats some
# constructs differently, so this refuses to run with one.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = "--check" ]; then
	check=1
	shift
fi
CF=${CLANG_FORMAT:-clang-format}
ver=$("$CF" --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$ver" != 14 ]; then
	echo "format.sh: needs clang-format 14 (Debian 12's); $CF is ${ver:-missing}" >&2
	exit 2
fi
# the tracked sources, less the CUDA emulator (it mirrors CUDA's own headers)
sources() {
	git ls-files -- '*.c' '*.h' '*.cu' | grep -v '^codelets/cuda/emu/'
}
if [ $# -gt 0 ]; then files=("$@"); else mapfile -t files < <(sources); fi
if [ "$check" = 0 ]; then
	"$CF" -i --style=file "${files[@]}"
	exit 0
fi
bad=0
for f in "${files[@]}"; do
	if ! "$CF" --style=file "$f" | cmp -s - "$f"; then
		echo "$f"
		bad=1
	fi
done
exit $bad
