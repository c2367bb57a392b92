#!/usr/bin/env bash
# check_arm64.sh - builds stepgraph for AArch64 (NVIDIA Grace, the CPU of a
# GH200) with Debian's cross compilers and arm64 libraries, runs it under
# qemu-aarch64 and checks that it trains as the native build does.
#
#   scripts/setup.sh --arm64      # once, as root: arm64 libraries, StarPU cross-built
#   scripts/check_arm64.sh        # about 2.5 min once StarPU is built (2 min of it in qemu)
#   scripts/check_arm64.sh --steps 8 --keep /tmp/sg-arm64
#
# What it does:
#   1. copies the source tree (tracked and untracked files, not build outputs)
#      into a build directory, configures it with --host=aarch64-linux-gnu
#      --without-cuda --without-mpi against the arm64 StarPU of
#      `scripts/setup.sh --arm64` (STARPU_ARM64_PREFIX in .deps-build/env.sh)
#      and builds `stepgraph`;
#   2. trains the default job (tiny-llama, AdamW with clipping, 4 micro-steps of
#      accumulation) at --max_length 64 for STEPS steps (default 6; the
#      learning rate is 0 for two steps, then at its peak, so steps 4 on show
#      the updates), natively with ./stepgraph and under qemu-aarch64 with the
#      arm64 build, each with a private STARPU_HOME; every loss must be finite
#      and the two within 1e-5 relative (the two targets contract a * b + c
#      into fused multiply-adds in different places and run different BLAS
#      kernels, so bit equality is not expected);
#   3. runs tests/test_adam_neon.sh (CPU Adam's NEON variant against the AVX
#      ones, bit for bit).
# Prints a table of both runs' losses and exits non-zero on any failure.
# Under qemu a step takes about a thousand times as long as natively: this
# checks the build and the arithmetic, not the speed of a real Grace.
#
# Options: --steps N (1..20), --keep DIR (build there and keep it; default a
# temporary directory, removed), --help. Needs the native build (./stepgraph,
# `make`) and, from `scripts/setup.sh --arm64`, aarch64-linux-gnu-gcc,
# qemu-aarch64 and Debian's arm64 libraries.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
die() { printf 'check_arm64: ERROR: %s\n' "$*" >&2; exit 1; }

STEPS=6
KEEP=""
while [ $# -gt 0 ]; do
	case "$1" in
	--steps) [ $# -ge 2 ] || die "--steps needs a value"; STEPS=$2; shift 2 ;;
	--keep) [ $# -ge 2 ] || die "--keep needs a directory"; KEEP=$2; shift 2 ;;
	-h | --help) sg_usage; exit 0 ;;
	*) sg_usage >&2; die "unknown argument: $1" ;;
	esac
done
case "$STEPS" in '' | *[!0-9]*) die "--steps $STEPS: expected 1..20" ;; esac
[ "$STEPS" -ge 1 ] && [ "$STEPS" -le 20 ] || die "--steps $STEPS: expected 1..20"

[ -f "$REPO_ROOT/.deps-build/env.sh" ] || die "no .deps-build/env.sh: run scripts/setup.sh --arm64 first"
# shellcheck disable=SC1091
. "$REPO_ROOT/.deps-build/env.sh"
[ -n "${STARPU_ARM64_PREFIX:-}" ] && [ -f "$STARPU_ARM64_PREFIX/lib/pkgconfig/starpu-1.4.pc" ] ||
	die "no arm64 StarPU: run scripts/setup.sh --arm64 first (as root)"
for tool in aarch64-linux-gnu-gcc qemu-aarch64 python3; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool not found: run scripts/setup.sh --arm64 first"
done
NATIVE=$REPO_ROOT/stepgraph
[ -x "$NATIVE" ] || die "no native build at $NATIVE: run ./configure and make first"

if [ -n "$KEEP" ]; then
	mkdir -p "$KEEP"
	BUILD=$(cd "$KEEP" && pwd)
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_arm64_run.XXXXXX")
	trap 'rm -rf "$TMP"' EXIT
else
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_arm64.XXXXXX")
	trap 'rm -rf "$TMP"' EXIT
	BUILD=$TMP/build
	mkdir -p "$BUILD"
fi

# 1. the source tree, configured for aarch64
say "copying the source tree into $BUILD"
if git -C "$REPO_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
	(cd "$REPO_ROOT" && git ls-files -z --cached --others --exclude-standard |
		xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) | tar -xf - -C "$BUILD"
else
	tar -C "$REPO_ROOT" --exclude=.deps-build --exclude='*.o' --exclude='*.a' -cf - . |
		tar -xf - -C "$BUILD"
fi
say "configuring for aarch64-linux-gnu (StarPU $STARPU_ARM64_PREFIX)"
(
	cd "$BUILD"
	autoreconf -fi >"$TMP/autoreconf.log" 2>&1 || { cat "$TMP/autoreconf.log" >&2; exit 1; }
	PKG_CONFIG_LIBDIR="$STARPU_ARM64_PREFIX/lib/pkgconfig:/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig" \
		PKG_CONFIG_PATH="" ./configure --host=aarch64-linux-gnu --without-cuda --without-mpi \
		>"$TMP/configure.log" 2>&1 || { tail -n 30 "$TMP/configure.log" >&2; exit 1; }
	say "building stepgraph for aarch64"
	make -j"$(nproc)" stepgraph >"$TMP/make.log" 2>&1 || { grep -E -A5 'error' "$TMP/make.log" | tail -n 40 >&2; exit 1; }
) || die "the aarch64 build failed (logs above)"
file_out=$(od -An -tx1 -j18 -N2 "$BUILD/stepgraph" | tr -d ' \n')
[ "$file_out" = "b700" ] || die "$BUILD/stepgraph is not an AArch64 executable (e_machine $file_out)"
ok_build=$(qemu-aarch64 "$BUILD/stepgraph" version 2>&1 | head -n 3) || die "the aarch64 stepgraph does not start under qemu: $ok_build"
printf '%s\n' "$ok_build" | sed 's/^/  arm64: /' >&2

# 2. the same training natively and under qemu
run_one() { # NAME BINARY DIR
	local name=$1 bin=$2 dir=$3 t0 t1
	mkdir -p "$TMP/home-$name"
	t0=$(date +%s.%N)
	(cd "$dir" && STARPU_HOME="$TMP/home-$name" "${@:4}" "$bin" run configs/default.json \
		--steps "$STEPS" --max_length 64 --warmup_steps 0 --log_interval 1 \
		--set scheduler.params.warmup_num_steps=1 \
		--metrics "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1) ||
		{ tail -n 20 "$TMP/$name.out" >&2; die "the $name run failed"; }
	t1=$(date +%s.%N)
	printf '%s' "$(python3 -c "print('%.1f' % ($t1 - $t0))")"
}
say "training $STEPS steps natively"
t_native=$(run_one native "$NATIVE" "$REPO_ROOT")
say "training $STEPS steps under qemu-aarch64 (slow: about 20 s per step)"
t_arm=$(run_one arm64 "$BUILD/stepgraph" "$BUILD" qemu-aarch64)

python3 - "$TMP/native.jsonl" "$TMP/arm64.jsonl" "$t_native" "$t_arm" <<'PYEOF'
import json, math, sys
def losses(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if line:
            rec = json.loads(line)
            if "step" in rec and "loss" in rec:
                out[int(rec["step"])] = float(rec["loss"])
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("| step | native loss | arm64 loss (qemu) | relative difference |")
print("|---|---|---|---|")
bad = []
for s in sorted(set(a) | set(b)):
    x, y = a.get(s), b.get(s)
    if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
        bad.append(s)
        print("| %d | %s | %s | missing or not finite |" % (s, x, y))
        continue
    d = abs(x - y) / max(abs(x), 1e-30)
    if d > 1e-5:
        bad.append(s)
    print("| %d | %.7f | %.7f | %.2e |" % (s, x, y, d))
print("wall time: native %s s, arm64 under qemu %s s" % (sys.argv[3], sys.argv[4]))
if not a or bad:
    sys.exit("check_arm64: losses differ or are missing at steps %s" % bad)
PYEOF

# 3. CPU Adam's NEON variant, bit for bit against the AVX ones
say "tests/test_adam_neon.sh"
SG_SRCDIR="$REPO_ROOT" sh "$REPO_ROOT/tests/test_adam_neon.sh" | tee "$TMP/neon.tap"
if grep -q '^not ok' "$TMP/neon.tap"; then
	die "tests/test_adam_neon.sh failed"
fi
say "AArch64 build: builds, trains as the native build (within 1e-5), NEON Adam bit for bit"
