#!/bin/sh
# test_gpu_verify.sh - scripts/gpu_verify.sh (the one-command check list for a lent GPU
# machine, docs/gpu.md) on a machine without a GPU: it must end cleanly with
# the env stage passing and every GPU stage reported as skip, in the summary format the
# docs describe (summary.md: one row per stage "| stage | result | seconds | key |" and a
# "result: P pass, F fail, S skip; T s of a B s budget" line; logs.txt: one section per
# stage). Also: --only, a broken carry archive (env fails, the later stages are still
# reported, exit 1) and usage errors. Prints TAP. Skips where a GPU is present (there,
# run the script itself).
set -u
SRC=${SG_SRCDIR:-.}
. "$SRC/tests/tap_lib.sh"
BUILD=${SG_BUILDDIR:-.}
if ! [ -x "$BUILD/stepgraph" ] || ! command -v bash >/dev/null 2>&1; then
	skip_all "needs $BUILD/stepgraph and bash"
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
	skip_all "a GPU is here: run scripts/gpu_verify.sh itself"
fi
tap_tmpdir gpu_verify
BUILD=$(cd "$BUILD" && pwd)
V="$SRC/scripts/gpu_verify.sh"
unset OUT GV_ASSUME_GPU
export GV_UNPACK="$TMP/unpack"


# the stages, from --list (12 of them, env first)
bash "$V" --list >"$TMP/list"
ok $? "--list exits 0"
stages=$(awk '{ print $1 }' "$TMP/list")
count=$(printf '%s\n' "$stages" | wc -l)
[ "$count" -eq 12 ] && [ "$(printf '%s\n' "$stages" | head -n1)" = env ]
ok $? "--list names 12 stages, env first (got $count)"

# 1. everything, no carry: the build in SG_BUILDDIR
t0=$(date +%s)
SG_BUILDDIR=$BUILD bash "$V" --out "$TMP/out" --carry "$TMP/no-carry" --budget 120 \
	>"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
secs=$(($(date +%s) - t0))
ok "$rc" "exit 0 without a GPU (every GPU stage a skip)"
echo "# the whole run took $secs s (not asserted: tests do not assert on timings)"
S=$TMP/out/summary.md
grep -q '^| stage | result | seconds | key numbers |$' "$S"
ok $? "summary.md has the table header"
bad=0
for s in $stages; do
	rows=$(grep -c "^| $s | " "$S")
	[ "$rows" -eq 1 ] || { echo "# $s: $rows rows" >&2; bad=1; }
done
ok $bad "one row per stage"
grep -q '^| env | pass | [0-9]* | .*stepgraph: ' "$S"
ok $? "env passes and reports what stepgraph version says"
bad=0
for s in $stages; do
	[ "$s" = env ] && continue
	grep -q "^| $s | skip | [0-9][0-9]* | no CUDA device |\$" "$S" || { grep "^| $s | " "$S" >&2; bad=1; }
done
ok $bad "every GPU stage: skip, 'no CUDA device'"
# the rows come in --list's order
[ "$(sed -n 's/^| \([a-z_0-9]*\) | \(pass\|fail\|skip\) |.*/\1/p' "$S")" = "$stages" ]
ok $? "rows in the order of --list"
grep -Eq '^result: 1 pass, 0 fail, 11 skip; [0-9]+ s of a 120 s budget$' "$S"
ok $? "the result line counts 1 pass, 0 fail, 11 skip against the budget"
[ "$(tail -n1 "$TMP/stdout")" = "$(tail -n1 "$S")" ] && grep -q '^| stage |' "$TMP/stdout"
ok $? "stdout ends with the summary (what the device tool's output_tail shows)"
L=$TMP/out/logs.txt
[ "$(grep -c '^=================== [a-z_0-9]*: \(pass\|fail\|skip\), [0-9]* s$' "$L")" -eq 12 ]
ok $? "logs.txt holds one section per stage"
[ "$(ls "$TMP/out" | wc -l)" -le 8 ]
ok $? "at most 8 files in OUT (the device tool brings back 8)"

# 2. --only: env always, then only the named stage
SG_BUILDDIR=$BUILD bash "$V" --out "$TMP/only" --carry "$TMP/no-carry" --only cuda_ops >/dev/null 2>&1
rc=$?
[ "$rc" -eq 0 ] && [ "$(grep -c '^| [a-z_0-9]* | \(pass\|fail\|skip\) |' "$TMP/only/summary.md")" -eq 2 ] &&
	grep -q '^| cuda_ops | skip |' "$TMP/only/summary.md"
ok $? "--only cuda_ops runs env and cuda_ops alone"

# 3. a broken carry archive: env fails, later stages still reported, exit 1
mkdir -p "$TMP/bad-carry"
echo "not an archive" >"$TMP/bad-carry/stepgraph-gpu.tar.xz"
SG_BUILDDIR=$BUILD bash "$V" --out "$TMP/bad" --carry "$TMP/bad-carry" --only cuda_ops,bench >/dev/null 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q '^| env | fail | .*could not unpack' "$TMP/bad/summary.md" &&
	grep -q '^| bench | skip |' "$TMP/bad/summary.md" &&
	grep -Eq '^result: 0 pass, 1 fail, 2 skip;' "$TMP/bad/summary.md"
ok $? "a broken carry archive fails env (exit 1) and the later stages are still reported"

# 4. usage errors
bash "$V" --only nosuch --out "$TMP/u" >/dev/null 2>&1
[ $? -eq 2 ]
ok $? "--only with an unknown stage: exit 2"
bash "$V" --budget soon --out "$TMP/u" >/dev/null 2>&1
[ $? -eq 2 ]
ok $? "--budget not a number: exit 2"
bash "$V" --help | grep -q '^usage: scripts/gpu_verify.sh'
ok $? "--help prints the usage"

done_testing
