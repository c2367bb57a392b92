#!/bin/sh
# test_ranks_watchdog.sh - the partition watchdog on one host (docs/ranks.md,
# "When a rank stops answering"; runtime/dist/watchdog.h), where network
# namespaces are not needed: 2 ranks under mpirun, ZeRO 3, a checkpoint
# every 2 steps, comm_timeout 3 s; rank 1 frozen (SIGSTOP) after rank 0
# logged 5 steps:
# - rank 0 ends by itself (a guard of 120 s against the hang), its error
#   naming rank 1 as silent, the checkpoint `latest` names, and a bound of
#   max(3 s, 10 x the mean step time in its metrics) that had passed;
# - comm_timeout out of range is refused naming the key and the value.
# The multi-host cases (link down, frozen and killed hosts) are in
# tests/test_multihost_partition.sh. Skips without mpirun or MPI support.
# Prints TAP.
set -u
SG_TEST_NAME=ranks_wd
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/ranks_env.sh"

ds z3 1 1 '{"stage": 3}'
# the ranks' process ids, by rank
cat >"$TMP/pid.sh" <<SHEOF
echo \$\$ >"$TMP/pid.\${OMPI_COMM_WORLD_RANK:-0}"
exec sh "$TMP/rank.sh" "\$@"
SHEOF

plan 4
"$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 sh "$TMP/pid.sh" "$BIN" run "$TMP/z3.json" \
	--dp_size 2 --max_length 32 --ncpus 1 --steps 100000 --comm_timeout 3 --save "$TMP/ck" \
	--save_interval 2 --metrics "$TMP/m.jsonl" >"$TMP/run.out" 2>"$TMP/run.err" &
mpid=$!
i=0
while [ "$(cat "$TMP/m.jsonl" 2>/dev/null | wc -l)" -lt 5 ] && kill -0 $mpid 2>/dev/null &&
	[ $i -lt 1200 ]; do
	sleep 0.1
	i=$((i + 1))
done
r0=$(cat "$TMP/pid.0" 2>/dev/null) r1=$(cat "$TMP/pid.1" 2>/dev/null)
[ -n "$r1" ] && kill -STOP "$r1"
i=0
while [ -n "$r0" ] && kill -0 "$r0" 2>/dev/null && [ $i -lt 1200 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -n "$r0" ] && [ -n "$r1" ] && ! kill -0 "$r0" 2>/dev/null
ok $? "rank 1 frozen (SIGSTOP): rank 0 ended by itself ($((i / 10)) s after, comm_timeout 3)"
[ -n "$r1" ] && kill -CONT "$r1" 2>/dev/null
# mpirun ends the frozen rank once it runs again
i=0
while kill -0 $mpid 2>/dev/null && [ $i -lt 300 ]; do
	sleep 0.1
	i=$((i + 1))
done
kill -0 $mpid 2>/dev/null && kill -9 $mpid
wait $mpid
rc=$?
[ -n "$r1" ] && kill -9 "$r1" 2>/dev/null
grep "^stepgraph: rank" "$TMP/run.err" | sed 's/^/# /'
LATEST=$(cat "$TMP/ck/latest" 2>/dev/null)
[ $rc -ne 0 ] && [ -n "$LATEST" ] &&
	grep -q "^stepgraph: rank 0 on .*: no collective completed .*stopped answering: rank 1 on .* silent .*last complete checkpoint: $TMP/ck/$LATEST; ending this rank" \
		"$TMP/run.err"
ok $? "rank 0's error names rank 1 and the checkpoint latest names ($LATEST); mpirun failed (exit $rc)"
"$PY" "$SRC/tests/watchdog_bound.py" "$TMP/run.err" "$TMP/m.jsonl" 3
ok $? "the bound is max(comm_timeout 3 s, 10 x the mean step time of the metrics), and it had passed"

"$BIN" run "$TMP/z3.json" --comm_timeout 0 --steps 1 >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
[ $rc -ne 0 ] && grep -q "comm_timeout: 0 is out of range" "$TMP/bad.err"
ok $? "--comm_timeout 0: refused naming the key and the value"
