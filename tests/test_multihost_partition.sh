#!/bin/sh
# test_multihost_partition.sh - a partitioned job ends, it does not hang
# (docs/ranks.md, "When a rank stops answering"; runtime/dist/watchdog.h).
# Two hosts as network namespaces (scripts/netns_hosts.sh), one rank each,
# ZeRO 3, a checkpoint every 2 steps, comm_timeout 3 s, a run of 100000
# steps cut after step 5:
# - host 2's link (at 100 Mbit/s) down: both ranks end by themselves (within 120 s, against
#   a hang of minutes before the watchdog), rank 0 naming rank 1 and host
#   2's address, the last complete checkpoint (the one `latest` names) and
#   its bound, max(3 s, 10 x the mean step time) - checked against the step
#   times rank 0 wrote to its metrics file; `latest` names a complete
#   checkpoint (both partitions, the model) that one process resumes;
# - host 2 frozen (SIGSTOP to every process in it): rank 0 ends, naming rank
#   1 and host 2;
# - host 2 killed (SIGKILL to every process in it): rank 0 and mpirun end;
# - host 2's link limited to 100 Mbit/s (tc htb), then with 20 ms delay and
#   2% loss (tc netem; skipped where the kernel has no sch_netem): the same
#   losses and norms as the clean link, bit for bit (the mean step times
#   are printed, not compared: no timed assertion).
# mpirun itself may wait on the lost host's daemon after the ranks ended
# (TCP retransmissions): the test says so in a comment and kills it.
# Skips without root / network namespaces, mpirun or MPI support. Prints TAP.
set -u
SG_TEST_NAME=multihost_part
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/ranks_env.sh"
. "$SRC/tests/multihost_env.sh"
. "$SRC/tests/multihost_faults.sh"

ds z3 1 1 '{"stage": 3}'
# check_bound NAME: rank 0's error states the bound max(comm_timeout 3 s,
# 10 x the mean step time of its metrics), and that it had passed
check_bound() {
	"$PY" "$SRC/tests/watchdog_bound.py" "$TMP/$1.err" "$TMP/$1.jsonl" 3
}

plan 9
# 1-4. link down
# (host 2's link at 100 Mbit/s first: steps long enough that 10 of them
# exceed comm_timeout, the bound's other term)
nh_rate 2 100mbit
BOTH=1 cut down linkdown
ok $? "host 2's link down: the ranks on both hosts ended by themselves (comm_timeout 3)"
grep "^stepgraph: rank" "$TMP/down.err" | sed 's/^/# /'
LATEST=$(cat "$TMP/down.ck/latest" 2>/dev/null)
grep -q "^stepgraph: rank 0 on .*($NH_ADDR1): no collective completed .*stopped answering: rank 1 on .*($NH_ADDR2) silent .*last complete checkpoint: $TMP/down.ck/$LATEST; ending this rank" \
	"$TMP/down.err" && [ -n "$LATEST" ]
ok $? "rank 0's error names rank 1 and host 2 ($NH_ADDR2), and the checkpoint latest names ($LATEST)"
check_bound down
ok $? "the bound is max(comm_timeout 3 s, 10 x the mean step time of the metrics), and it had passed"
CK=$TMP/down.ck/$LATEST
"$BIN" run "$TMP/z3.json" --max_length 32 --ncpus 1 --steps 2 --load "$TMP/down.ck" \
	--set train_micro_batch_size_per_gpu=2 >"$TMP/res.out" 2>"$TMP/res.err"
rc=$?
first=$(sed -n 's/^Step \([0-9]*\) |.*/\1/p' "$TMP/res.out" | head -n1)
[ $rc -eq 0 ] && [ -f "$CK/model.safetensors" ] && [ -s "$CK/optim.rank0-of-2.safetensors" ] &&
	[ -s "$CK/optim.rank1-of-2.safetensors" ] && [ "$first" = "$(expr "${LATEST#step-}" + 1)" ]
ok $? "latest ($LATEST) is complete (model, both partitions): one process resumes it at step $first"
[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/res.err" | head -5
settle down

# 5. host 2 frozen
cut stop freeze
ok $? "host 2 frozen (SIGSTOP): rank 0 on host 1 ended by itself"
grep "^stepgraph: rank" "$TMP/stop.err" | sed 's/^/# /'
grep -q "^stepgraph: rank 0 on .*($NH_ADDR1): no collective completed .*stopped answering: rank 1 on .*($NH_ADDR2) silent .*last complete checkpoint: $TMP/stop.ck/step-" \
	"$TMP/stop.err" && check_bound stop
ok $? "frozen host: rank 0's error names rank 1, host 2 ($NH_ADDR2) and a checkpoint; its bound is right"
settle stop

# 6. host 2 killed
cut dead slay
s=$?
wait_for $MPID 120
m=$?
wait $MPID
rc=$?
[ $s -eq 0 ] && [ $m -eq 0 ] && [ $rc -ne 0 ]
ok $? "host 2 killed (SIGKILL to everything in it): rank 0 and mpirun ended (exit $rc)"
settle dead

# 8-9. a slower link, then loss and delay: the same numbers
mean_ms() {
	"$PY" -c 'import json, sys; t = [json.loads(l)["time_ms"] for l in open(sys.argv[1])]; print("%.1f" % (sum(t) / len(t)))' "$1"
}
# same_as_clean NAME: NAME ran, its losses and norms are the clean link's, bit for bit
same_as_clean() {
	[ "$(cat "$TMP/clean.rc")" = 0 ] && [ "$(cat "$TMP/$1.rc")" = 0 ] &&
		"$PY" "$SRC/tests/ranks_compare.py" "$TMP/clean.jsonl" "$TMP/$1.jsonl" 0 >"$TMP/$1.cmp" 2>&1
	s=$?
	sed 's/^/# /' "$TMP/$1.cmp"
	return $s
}
hosts clean 1 z3 --steps 5
nh_rate 2 100mbit
hosts slow 1 z3 --steps 5
echo "# mean step: clean link $(mean_ms "$TMP/clean.jsonl") ms, 100 Mbit/s $(mean_ms "$TMP/slow.jsonl") ms"
same_as_clean slow
ok $? "host 2's link at 100 Mbit/s (tc htb): the clean link's losses and norms, bit for bit"
nh_clear 2
if nh_netem 2 delay 20ms loss 2% 2>"$TMP/netem.err"; then
	hosts lossy 1 z3 --steps 5
	echo "# mean step: clean link $(mean_ms "$TMP/clean.jsonl") ms, 20 ms delay and 2% loss $(mean_ms "$TMP/lossy.jsonl") ms"
	same_as_clean lossy
	ok $? "20 ms delay and 2% loss on host 2's link (tc netem): the clean link's losses and norms, bit for bit"
else
	skip "no tc netem here: $(head -n1 "$TMP/netem.err")"
fi
