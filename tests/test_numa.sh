#!/bin/sh
# test_numa.sh - NUMA nodes (docs/training.md, "NUMA nodes") on an emulated two-node topology
# (numa_emulate 2: this machine's cores split in two, runtime/exec/numa_topo.h):
# StarPU starts one memory node per NUMA node, each CPU sub-group's state is
# on node s mod 2 and its Adam ran on that node's workers (the trace's numa
# and data_numa, checked by tests/numa_trace_check.py against that rule), the
# losses and the saved checkpoint are bit for bit the one-node run's, a run
# resumed with numa continues as one resumed without, SuperOffload's
# reserved optimizer core keeps every sub-group's state on its node, more
# nodes than cores and a topology already given are refused, and (with
# mpirun) bind_cores_to_rank binds rank 0 to node 0 and rank 1 to other CPUs
# (its StarPU worker thread's affinity, read from /proc while it runs), with
# the 2-rank losses unchanged. Prints TAP.
set -u
SG_TEST_NAME=numa
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"
CHECK="$SRC/tests/numa_trace_check.py"
if [ "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)" -lt 2 ]; then
	echo "1..0 # SKIP one core: no two NUMA nodes to emulate"
	exit 0
fi
unset HWLOC_XMLFILE HWLOC_SYNTHETIC STARPU_HWLOC_INPUT STARPU_USE_NUMA
# where numa_emulate writes its topology file (checked removed)
export TMPDIR="$TMP/tmpdir"
mkdir -p "$TMPDIR"
echo "1..16"
# bf16 with the optimizer offloaded and small sub-groups: 9 CPU sub-groups,
# each with its casts and Adam
ds off '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "sub_group_size": 100000,
        "offload_optimizer": {"device": "cpu"}}}'
# eager: a policy that does not weigh where data lives, so only the placement keeps a
# sub-group's Adam on its state's node (with the placement's task masks removed, check 4
# fails: Adam of sub-group 1 ran on node 0)
RUN="--model tiny-llama --steps 4 --log_interval 1 --sched eager"
train one off $RUN --save "$TMP/ck_one"
train two off $RUN --save "$TMP/ck_two" --numa_emulate 2 --trace "$TMP/two.trace.json"
[ "$(cat "$TMP/one.rc")" = 0 ] && [ "$(cat "$TMP/two.rc")" = 0 ]
ok $? "runs on one node and on 2 emulated NUMA nodes"
grep -q "NUMA: 2 memory nodes (emulated" "$TMP/two.out" && ! grep -q "NUMA:" "$TMP/one.out"
ok $? "the header names the 2 NUMA memory nodes (and only with numa_emulate)"
grep "NUMA:" "$TMP/two.out" | sed 's/^/# /'
same one two
ok $? "2 NUMA nodes: the losses are the one-node run's, bit for bit"
"$PY" "$CHECK" "$TMP/two.trace.json" 2 >"$TMP/two.check" 2>&1
ok $? "trace: sub-group s's state on node s mod 2, its Adam and casts on that node's workers"
sed 's/^/# /' "$TMP/two.check"
a="$TMP/ck_one/$(cat "$TMP/ck_one/latest" 2>/dev/null)" b="$TMP/ck_two/$(cat "$TMP/ck_two/latest" 2>/dev/null)"
[ -d "$a" ] && [ -d "$b" ] && diff -r "$a" "$b" >/dev/null
ok $? "the checkpoint saved from the two nodes is byte for byte the one-node run's"
! ls "$TMPDIR"/stepgraph-numa.* >/dev/null 2>&1
ok $? "the emulated topology's file is removed at the end"

# resumed: the state is loaded onto its nodes and read back from them
train res_one off --model tiny-llama --steps 6 --log_interval 1 --load "$a"
train res_two off --model tiny-llama --steps 6 --log_interval 1 --load "$a" --numa_emulate 2
[ "$(cat "$TMP/res_two.rc")" = 0 ] && same res_one res_two
ok $? "resumed with numa_emulate 2: the same losses as resumed on one node"

# SuperOffload reserves one of the two cores for the optimizer (cpuadam_cores_perc
# 0.5): that core's node holds every sub-group's state
ds so '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "sub_group_size": 100000,
       "offload_optimizer": {"device": "cpu", "super_offload": true, "cpuadam_cores_perc": 0.5}}}'
train so_one so $RUN
train so_two so $RUN --numa_emulate 2 --trace "$TMP/so.trace.json"
[ "$(cat "$TMP/so_two.rc")" = 0 ] && same so_one so_two
ok $? "SuperOffload, one core reserved: the same losses on 2 NUMA nodes"
node=$("$PY" -c 'import json,sys
ev=json.load(open(sys.argv[1]))["traceEvents"]
print(sorted({e["args"]["numa"] for e in ev
              if e.get("args", {}).get("kind") == "adam_cpu" and "node" in e["args"]}))' "$TMP/so.trace.json" 2>/dev/null)
case "$node" in "[0]") only=0 ;; "[1]") only=1 ;; *) only=x ;; esac
[ "$only" != x ] && "$PY" "$CHECK" "$TMP/so.trace.json" 2 "$only" >"$TMP/so.check" 2>&1
ok $? "SuperOffload: every sub-group's state on the reserved core's node $only, its Adam there"
sed 's/^/# /' "$TMP/so.check" 2>/dev/null

# --numa on this machine's own topology (one node here): runs, places nothing new
train own off $RUN --numa
[ "$(cat "$TMP/own.rc")" = 0 ] && same one own
ok $? "--numa on the machine's own topology: the one-node losses"

# refusals
many=$(($(getconf _NPROCESSORS_ONLN) + 1))
train bad off $RUN --numa_emulate $many
[ "$(cat "$TMP/bad.rc")" != 0 ] && grep -q "numa_emulate $many: this machine has [0-9]* core" "$TMP/bad.err"
ok $? "numa_emulate $many (more nodes than cores): refused with the core count"
HWLOC_XMLFILE=/nonexistent.xml train given off $RUN --numa_emulate 2
[ "$(cat "$TMP/given.rc")" != 0 ] && grep -q "HWLOC_XMLFILE is set" "$TMP/given.err"
ok $? "numa_emulate with HWLOC_XMLFILE already set: refused, naming it"
train neg off $RUN --numa_emulate -1
[ "$(cat "$TMP/neg.rc")" != 0 ] && grep -q "numa_emulate" "$TMP/neg.err"
ok $? "numa_emulate -1: refused naming the key"

# bind_cores_to_rank across the two nodes: rank r takes node r mod 2
MPIRUN_BIN=$(command -v mpirun || true)
if [ -z "$MPIRUN_BIN" ] || "$BIN" run --help | grep -q "This build has no MPI support"; then
	for k in 1 2 3; do n=$((n + 1)); echo "ok $n # SKIP no mpirun or no MPI support"; done
	exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
cat >"$TMP/rank.sh" <<'SHEOF'
export STARPU_HOME="$STARPU_HOME.${OMPI_COMM_WORLD_RANK:-0}"
mkdir -p "$STARPU_HOME"
exec "$@"
SHEOF
ranks() { # ranks NAME ARGS...: 2 ranks of micro 1
	name=$1
	shift
	timeout 300 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 sh "$TMP/rank.sh" \
		"$BIN" run "$TMP/off.json" --dp_size 2 --model tiny-llama --max_length 32 --steps 40 \
		--set train_micro_batch_size_per_gpu=1 --metrics "$TMP/$name.jsonl" "$@" \
		>"$TMP/$name.out" 2>"$TMP/$name.err"
	echo $? >"$TMP/$name.rc"
}
# worker_cpus RANK: the CPUs (Cpus_allowed_list) of that rank's StarPU CPU worker
# thread (named "CPU 0"), read from /proc while the run lasts (40 steps: long
# enough to be seen on a loaded machine); "" if not seen
worker_cpus() {
	for p in $(pgrep -x stepgraph); do
		env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)
		echo "$env" | grep -qx "OMPI_COMM_WORLD_RANK=$1" &&
			echo "$env" | grep -q "^STARPU_HOME=$TMP/" || continue
		for t in /proc/$p/task/*; do
			[ "$(cat "$t/comm" 2>/dev/null)" = "CPU 0" ] &&
				sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$t/status" 2>/dev/null && return 0
		done
	done
}
ranks r_one --ncpus 1
ranks r_two --numa_emulate 2 --bind_cores_to_rank --trace "$TMP/r_two.trace.json" &
bg=$!
c0="" c1="" i=0
while kill -0 $bg 2>/dev/null && [ $i -lt 600 ] && { [ -z "$c0" ] || [ -z "$c1" ]; }; do
	[ -n "$c0" ] || c0=$(worker_cpus 0)
	[ -n "$c1" ] || c1=$(worker_cpus 1)
	sleep 0.1
	i=$((i + 1))
done
wait $bg
echo "# bind_cores_to_rank: rank 0's CPU worker on CPUs '$c0', rank 1's on '$c1'"
[ "$(cat "$TMP/r_two.rc")" = 0 ] && grep -q "bound to the [0-9]* cores of NUMA node 0" "$TMP/r_two.out" &&
	"$PY" "$CHECK" "$TMP/r_two.trace.json" 2 0 >"$TMP/r_two.check" 2>&1
ok $? "2 ranks, bind_cores_to_rank on 2 nodes: rank 0 bound to node 0, its state and Adam there"
sed 's/^/# /' "$TMP/r_two.check" 2>/dev/null
# the two nodes split the cores: rank 1 on other CPUs than rank 0 is rank 1 on node 1
[ -n "$c0" ] && [ -n "$c1" ] && "$PY" -c 'import sys
def cpus(s):
    out = set()
    for part in s.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out
sys.exit(0 if cpus(sys.argv[1]).isdisjoint(cpus(sys.argv[2])) else 1)' "$c0" "$c1"
ok $? "bind_cores_to_rank: rank 1's worker is bound to other CPUs than rank 0's (node 1's)"
[ "$(cat "$TMP/r_one.rc")" = 0 ] && same r_one r_two
ok $? "2 ranks bound to 2 NUMA nodes: the losses of 2 unbound ranks, bit for bit"
