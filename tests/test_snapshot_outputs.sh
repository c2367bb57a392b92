#!/bin/sh
# test_snapshot_outputs.sh - scripts/snapshot_outputs.sh, the snapshot of
# stepgraph's deterministic outputs that a refactoring must leave alone.
#
# Two --quick snapshots of the same tree are equal under diff -r and hold
# every output the script lists; the losses it keeps are those of the run's
# own metrics file, read here; a change of behaviour (another seed) shows as
# a difference in the run's files and in no other; bad arguments exit 2.
# Prints TAP.
set -u
SG_TEST_NAME=snapshot_outputs
. "${SG_SRCDIR:-.}/tests/test_env.sh"
SNAP="$SRC/scripts/snapshot_outputs.sh"
export STEPGRAPH="$BIN"
case "$BIN" in /*) ;; *) STEPGRAPH="$PWD/$BIN" ;; esac

bash "$SNAP" --quick "$TMP/a" >"$TMP/a.out" 2>&1
rc1=$?
bash "$SNAP" --quick "$TMP/b" >"$TMP/b.out" 2>&1
rc2=$?
diff -r "$TMP/a" "$TMP/b" >"$TMP/ab.diff" 2>&1
rc3=$?
sed 's/^/# /' "$TMP/ab.diff" | head -20
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ]
ok $? "two snapshots of the same tree are equal (diff -r)"

missing=""
for f in run losses dot unfold.dot json summary cuda.summary config sim; do
	[ -s "$TMP/a/z0.$f" ] || missing="$missing z0.$f"
done
grep -qx 'rc=0' "$TMP/a/z0.sim" && grep -q '^digraph step' "$TMP/a/z0.dot" ||
	missing="$missing (content)"
[ -z "$missing" ]
ok $? "the snapshot: run, losses, DOT, JSON, summaries, config, sim${missing:+; missing:$missing}"

# the losses kept are the run's own: step 1 of the same run, read from its metrics here
"$BIN" run "$SRC/configs/deepspeed/zero0.json" --model tiny-llama --steps 1 --ncpus 1 \
	--metrics "$TMP/m.jsonl" >"$TMP/m.out" 2>&1
want=$("$PY" -c 'import json,sys; print(repr(json.loads(open(sys.argv[1]).readline())["loss"]))' \
	"$TMP/m.jsonl" 2>&1)
got=$(awk '$1 == 1 { print $2 }' "$TMP/a/z0.losses")
echo "# step 1 loss: snapshot $got, run $want; $(wc -l <"$TMP/a/z0.losses") steps kept"
[ -n "$want" ] && [ "$got" = "$want" ] && [ "$(wc -l <"$TMP/a/z0.losses")" -eq 5 ]
ok $? "the losses kept are the run's (step 1 as a run of its own reports it), 5 steps"

SNAPSHOT_RUN_ARGS="--seed 7" bash "$SNAP" --quick "$TMP/c" >"$TMP/c.out" 2>&1
diff -rq "$TMP/a" "$TMP/c" >"$TMP/ac.diff" 2>&1
differ=$(sed -n 's/^Files .*\/a\/\([^ ]*\) and .*/\1/p' "$TMP/ac.diff" | sort | tr '\n' ' ')
echo "# with --seed 7, differ: $differ"
[ "$differ" = "z0.losses z0.run " ] || [ "$differ" = "z0.losses " ]
ok $? "a change of behaviour (another seed) shows in the run's files and no other"

bash "$SNAP" >"$TMP/bad.out" 2>&1
rc1=$?
bash "$SNAP" --help >"$TMP/help.out" 2>&1
rc2=$?
[ $rc1 -eq 2 ] && grep -q "usage: scripts/snapshot_outputs.sh" "$TMP/bad.out" &&
	[ $rc2 -eq 0 ] && grep -q "diff -r" "$TMP/help.out"
ok $? "no OUTDIR: exit 2 with the usage; --help prints the header"

echo "1..$n"
