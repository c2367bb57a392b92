#!/bin/sh
# test_multihost.sh - several hosts (docs/ranks.md, "Several hosts"): two
# network namespaces on this machine are two hosts (scripts/netns_hosts.sh),
# Open MPI runs the ranks in them over TCP.
# - the script as docs/ranks.md's recipe runs it: 2 hosts x 2 ranks, each
#   pair in its own namespace with its own address, nothing left behind;
# - the same numbers as one process (tests/ranks_compare.py on 6 steps'
#   losses and gradient norms, relative 1e-5, as tests/test_ranks.sh holds
#   several ranks on one host): 2 hosts x 1 rank and 2 hosts x 2 ranks, ZeRO
#   2 with the optimizer offloaded and ZeRO 3 with accumulation 2;
# - checkpoints: 2 hosts x 2 ranks save at step 3 (ranks on both hosts
#   write their partition), resumed on one host (2 ranks of micro 2, no
#   namespace): steps 4-6 continue the uninterrupted run within 1e-5.
# Skips without root / network namespaces, mpirun or MPI support. Prints TAP.
set -u
SG_TEST_NAME=multihost
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/ranks_env.sh"
. "$SRC/tests/multihost_env.sh"

STEPS=6
one() { # one NAME DS ARGS...: one process, no namespace
	name=$1 cfg=$2
	shift 2
	"$BIN" run "$TMP/$cfg.json" --max_length 32 --ncpus 1 --metrics "$TMP/$name.jsonl" \
		"$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
	echo $? >"$TMP/$name.rc"
}
# compare ONE MANY RTOL [SKIP]: both ran; MANY's values = ONE's (after SKIP steps)
compare() {
	tail -n +$((${4:-0} + 1)) "$TMP/$1.jsonl" >"$TMP/$1.cmp.jsonl"
	[ "$(cat "$TMP/$1.rc")" = 0 ] && [ "$(cat "$TMP/$2.rc")" = 0 ] &&
		"$PY" "$SRC/tests/ranks_compare.py" "$TMP/$1.cmp.jsonl" "$TMP/$2.jsonl" "$3" \
			>"$TMP/$2.cmp" 2>&1
	s=$?
	[ $s -eq 0 ] || cat "$TMP/$2.cmp" "$TMP/$1.err" "$TMP/$2.err" | head -20 | sed 's/^/# /'
	sed 's/^/# /' "$TMP/$2.cmp"
	return $s
}
# on_hosts NP: ranks 0..NP-1 ran on the 2 hosts' addresses, the first half on host 1
on_hosts() {
	half=$(($1 / 2)) r=0
	while [ $r -lt "$1" ]; do
		want=$NH_ADDR1
		[ $r -ge $half ] && want=$NH_ADDR2
		[ "$(host_of $r)" = "$want" ] || { echo "# rank $r ran on '$(host_of $r)', not $want"; return 1; }
		r=$((r + 1))
	done
}

plan 8
# 1. the script itself, as a command (its own hosts, removed at its exit)
"$SRC/scripts/netns_hosts.sh" --hosts 2 --ranks-per-host 2 -- sh -c \
	'echo "rank $OMPI_COMM_WORLD_RANK $(ip -4 -o addr show eth0 | awk "{print \$4}")"' \
	>"$TMP/script.out" 2>"$TMP/script.err" &
spid=$!
wait_for $spid 60
wait $spid
rc=$?
sed 's/^/# /' "$TMP/script.out"
addrs=$(awk '{ print $3 }' "$TMP/script.out" | sort | uniq -c | awk '{ print $1 }' | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$(wc -l <"$TMP/script.out")" -eq 4 ] && [ "$addrs" = "2 2 " ] &&
	! ip netns list | grep -q "^sgh${spid}h" && ! ip link show "sgb$spid" >/dev/null 2>&1
ok $? "netns_hosts.sh --hosts 2 --ranks-per-host 2: 4 ranks, 2 on each of 2 addresses; its namespaces and bridge removed"

# 2-5. per_layout NAME ZERO-JSON ACCUM WHAT: 2 hosts x 1 rank, then 2 hosts
# x 2 ranks of micro 1, against one process of micro 2, then 4
per_layout() {
	ds "$1_1" 2 "$3" "$2"
	ds "$1_2" 1 "$3" "$2"
	ds "$1_4one" 4 "$3" "$2"
	one "$1_one" "$1_1" --steps $STEPS
	hosts "$1_h2" 1 "$1_2" --steps $STEPS
	compare "$1_one" "$1_h2" 1e-5 && on_hosts 2
	ok $? "2 hosts x 1 rank, $4: 1 process's losses and norms (micro 2) within 1e-5"
	one "$1_one4" "$1_4one" --steps $STEPS
	hosts "$1_h4" 2 "$1_2" --steps $STEPS
	compare "$1_one4" "$1_h4" 1e-5 && on_hosts 4
	ok $? "2 hosts x 2 ranks, $4: 1 process's (micro 4) within 1e-5"
}
per_layout z3 '{"stage": 3}' 2 "ZeRO 3, accumulation 2"
per_layout off '{"stage": 2, "sub_group_size": 100000, "offload_optimizer": {"device": "cpu"}}' 1 \
	"ZeRO 2 with the optimizer offloaded"

# 6-8. a checkpoint written by both hosts, resumed on one
hosts ck_a 2 z3_2 --steps 3 --save "$TMP/ck"
CK=$TMP/ck/step-00000003
[ "$(cat "$TMP/ck_a.rc")" = 0 ] && [ "$(cat "$TMP/ck/latest")" = step-00000003 ] &&
	[ -f "$CK/model.safetensors" ] && [ -s "$CK/optim.rank0-of-4.safetensors" ] &&
	[ -s "$CK/optim.rank1-of-4.safetensors" ] && [ -s "$CK/optim.rank2-of-4.safetensors" ] &&
	[ -s "$CK/optim.rank3-of-4.safetensors" ] && on_hosts 4
ok $? "2 hosts x 2 ranks save at step 3: latest, model.safetensors, optim.rank0..3-of-4 (ranks 2, 3 on host 2)"
timeout 300 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 sh "$TMP/rank.sh" "$BIN" run \
	"$TMP/z3_1.json" --dp_size 2 --max_length 32 --ncpus 1 --steps 3 --load "$TMP/ck" \
	--metrics "$TMP/ck_b.jsonl" >"$TMP/ck_b.out" 2>"$TMP/ck_b.err"
echo $? >"$TMP/ck_b.rc"
compare z3_one4 ck_b 1e-5 3 && grep -q "^Step 4 |" "$TMP/ck_b.out"
ok $? "resumed on one host (2 ranks of micro 2, no namespace): steps 4-6 = the uninterrupted run within 1e-5"
one ck_c z3_4one --steps 3 --load "$TMP/ck"
compare z3_one4 ck_c 1e-5 3
ok $? "resumed by one process (micro 4): steps 4-6 = the uninterrupted run within 1e-5"
