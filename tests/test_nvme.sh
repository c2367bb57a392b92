#!/bin/sh
# test_nvme.sh - ZeRO-Infinity's NVMe offload on a StarPU disk node
# (runtime/exec/disk_node.h, docs/memory.md, "NVMe offload").
#
# The reference is the same run with device "cpu" (the state in RAM), a
# different code path for the state's home: tiny-llama's fp32 losses and
# checkpoint files must be bit-identical with the optimizer state on disk,
# and with ZeRO-3, bf16, the parameters on disk too. A run killed with
# SIGKILL resumes from its last checkpoint to the uninterrupted loss, and the
# next run removes what the killed one left under nvme_path. Bad nvme_path
# values and unsupported combinations are refused naming the key; the aio
# keys warn when they differ from DeepSpeed's defaults. The RAM: with a 57M-
# parameter model's state on disk, what StarPU holds in RAM stays under the
# limit the run sets, which is below what the same run holds in RAM, and the
# process's peak RSS is not above that run's (scripts/demo_nvme.sh shows it
# at 1.6x the RAM).
# A full disk (a tmpfs mounted here, skipped where mount is not permitted):
# too small for the state, the run fails before its first step naming
# nvme_path and the checkpoint it loaded stays valid; filled up during the
# run, the run ends with the same losses (the state's files were reserved).
# Prints TAP.
set -u
SG_TEST_NAME=nvme
. "${SG_SRCDIR:-.}/tests/test_env.sh"
ND="$TMP/nvme"
mkdir -p "$ND"
# cfg NAME DEVICE [STAGE DTYPE PARAM_DEVICE]: a run config for tiny-llama
cfg() {
	bf=false
	[ "${4:-fp32}" = bf16 ] && bf=true
	cat >"$TMP/$1.json" <<JSON
{"deepspeed_config": {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "bf16": {"enabled": $bf},
  "zero_optimization": {"stage": ${3:-1}, "sub_group_size": 100000,
    "offload_optimizer": {"device": "$2", "nvme_path": "$ND"},
    "offload_param": {"device": "${5:-none}", "nvme_path": "$ND"}}},
 "model": "tiny-llama", "max_length": 32, "seed": 42, "log_interval": 1000}
JSON
}
cfg cpu cpu
cfg nvme nvme
cfg cpu3 cpu 3 bf16 cpu
cfg nvme3 nvme 3 bf16 nvme
# losses LABEL: the losses of a --metrics file, one a line, as printed (%r);
# a loss that is not a finite number (null: diverged) prints the file's own
# name instead, so that two diverged runs never compare equal
losses() {
	"$PY" -c 'import json,math,sys
v = [json.loads(l)["loss"] for l in open(sys.argv[1])]
ok = v and all(isinstance(x, float) and math.isfinite(x) for x in v)
print("\n".join(map(repr, v)) if ok else "not finite: " + sys.argv[1])' "$1"
}

# 1-4: the state on disk gives the bits of the state in RAM
"$BIN" run "$TMP/cpu.json" --steps 5 --metrics "$TMP/cpu.jsonl" --save "$TMP/ck_cpu" >"$TMP/cpu.out" 2>&1
"$BIN" run "$TMP/nvme.json" --steps 5 --metrics "$TMP/nvme.jsonl" --save "$TMP/ck_nvme" >"$TMP/nvme.out" 2>&1
ok $? "fp32, ZeRO-1, offload_optimizer nvme: 5 steps"
grep -q "optimizer state on disk: .* in $ND/stepgraph-nvme-" "$TMP/nvme.out"
ok $? "the run says where the state lives, the back-end and the RAM bound"
[ "$(losses "$TMP/nvme.jsonl")" = "$(losses "$TMP/cpu.jsonl")" ] && [ -s "$TMP/cpu.jsonl" ]
ok $? "fp32 losses bit-identical to device cpu: $(losses "$TMP/nvme.jsonl" | tr '\n' ' ')"
cmp "$TMP/ck_cpu/step-00000005/model.safetensors" "$TMP/ck_nvme/step-00000005/model.safetensors" &&
	cmp "$TMP/ck_cpu/step-00000005/state.safetensors" "$TMP/ck_nvme/step-00000005/state.safetensors"
ok $? "checkpoint files (weights, masters, moments) byte-identical to device cpu"
[ -z "$(ls -A "$ND")" ]
ok $? "the run's directory under nvme_path is removed at exit"

"$BIN" run "$TMP/cpu3.json" --steps 4 --metrics "$TMP/cpu3.jsonl" >"$TMP/cpu3.out" 2>&1
"$BIN" run "$TMP/nvme3.json" --steps 4 --metrics "$TMP/nvme3.jsonl" >"$TMP/nvme3.out" 2>&1 &&
	grep -q "optimizer state and parameters on disk" "$TMP/nvme3.out" &&
	[ "$(losses "$TMP/nvme3.jsonl")" = "$(losses "$TMP/cpu3.jsonl")" ] && [ -s "$TMP/cpu3.jsonl" ]
ok $? "ZeRO-3 bf16 with offload_param and offload_optimizer nvme: losses bit-identical to cpu"

# 7-8: killed with SIGKILL, resumed
"$BIN" run "$TMP/nvme.json" --steps 40 --save "$TMP/ck_kill" --save_interval 1 >"$TMP/kill.out" 2>&1 &
pid=$!
t=0
while ! [ -f "$TMP/ck_kill/latest" ] && [ $t -lt 300 ] && kill -0 $pid 2>/dev/null; do
	sleep 0.1
	t=$((t + 1))
done
sleep 0.3
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
left=$(ls -d "$ND"/stepgraph-nvme-$pid 2>/dev/null | wc -l)
"$BIN" run "$TMP/cpu.json" --steps 41 --metrics "$TMP/ref41.jsonl" >/dev/null 2>&1
"$BIN" run "$TMP/nvme.json" --load "$TMP/ck_kill" --steps 1 --metrics "$TMP/res.jsonl" >"$TMP/res.out" 2>&1 &&
	step=$("$PY" "$SRC/tests/resumed_step.py" "$TMP/ref41.jsonl" "$TMP/res.jsonl")
ok $? "killed with SIGKILL mid-run, resumed from its last checkpoint: step ${step:-?} as uninterrupted"
[ "$left" -eq 1 ] && ! [ -d "$ND/stepgraph-nvme-$pid" ] && grep -q "no longer exists" "$TMP/res.out"
ok $? "the killed run's directory under nvme_path is removed by the next run"

# 9-13: refusals and warnings
bad() { # bad NAME EXPECTED-PATTERN SET...
	name=$1 pat=$2
	shift 2
	"$BIN" run "$TMP/nvme.json" --steps 1 "$@" >"$TMP/$name.out" 2>&1
	[ $? -ne 0 ] && grep -q "$pat" "$TMP/$name.out"
}
bad missing "offload_optimizer.nvme_path: \"$TMP/nope\": No such file" \
	--set zero_optimization.offload_optimizer.nvme_path="$TMP/nope"
ok $? "a missing nvme_path directory is refused naming the key"
: >"$TMP/afile"
bad notdir "offload_optimizer.nvme_path: \"$TMP/afile\" is not a directory" \
	--set zero_optimization.offload_optimizer.nvme_path="$TMP/afile"
ok $? "an nvme_path that is a file is refused naming the key"
"$BIN" config "$TMP/cpu.json" --set zero_optimization.offload_optimizer.device=nvme \
	--set zero_optimization.offload_optimizer.nvme_path=null >"$TMP/nopath.out" 2>&1
[ $? -ne 0 ] && grep -q 'device: "nvme" needs zero_optimization.offload_optimizer.nvme_path' "$TMP/nopath.out"
ok $? "device nvme without nvme_path is refused"
"$BIN" config "$TMP/nvme3.json" --set zero_optimization.offload_optimizer.super_offload=true \
	>"$TMP/so.out" 2>&1
[ $? -ne 0 ] && grep -q 'super_offload: true with zero_optimization.offload_optimizer.device "nvme" is not supported' "$TMP/so.out"
ok $? "SuperOffload with the state on NVMe is refused naming both keys"
cat >"$TMP/aio.json" <<JSON
{"deepspeed_config": {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1,
  "offload_optimizer": {"device": "nvme", "nvme_path": "$ND", "fast_init": true}},
  "aio": {"block_size": 1048576, "queue_depth": 16, "thread_count": 1, "single_submit": false,
          "overlap_events": true, "use_gds": false}}, "model": "tiny-llama"}
JSON
"$BIN" config "$TMP/aio.json" >"$TMP/aio.out" 2>&1 &&
	grep -q 'aio.queue_depth: 16 has no effect in stepgraph' "$TMP/aio.out" &&
	grep -q 'offload_optimizer.fast_init: true has no effect' "$TMP/aio.out" &&
	[ "$(grep -c 'deepspeed_config.aio\.' "$TMP/aio.out")" -eq 1 ]
ok $? "aio keys: accepted, warned only where they differ from DeepSpeed's defaults"

# 14-15: the RAM holds a bounded working set of the state on disk
cat >"$TMP/m57.json" <<JSON
{"name": "llama-57m", "architecture": "llama", "hidden_size": 512, "intermediate_size": 1376,
 "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64,
 "vocab_size": 32000, "max_position_embeddings": 256, "tie_word_embeddings": false,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "attention_bias": false}
JSON
BIG="--model $TMP/m57.json --max_length 16 --steps 2 --set train_micro_batch_size_per_gpu=1
 --set zero_optimization.sub_group_size=2000000 --set zero_optimization.offload_optimizer.buffer_count=2"
"$PY" "$SRC/tests/peak_rss.py" "$TMP/big_cpu" "$BIN" run "$TMP/cpu.json" $BIG --metrics "$TMP/big_cpu.jsonl"
"$PY" "$SRC/tests/peak_rss.py" "$TMP/big_nvme" "$BIN" run "$TMP/nvme.json" $BIG --metrics "$TMP/big_nvme.jsonl"
[ "$(cat "$TMP/big_cpu.rc" "$TMP/big_nvme.rc")" = "$(printf '0\n0')" ] &&
	[ "$(losses "$TMP/big_nvme.jsonl")" = "$(losses "$TMP/big_cpu.jsonl")" ]
ok $? "a 57M-parameter model, state on disk: losses bit-identical to device cpu"
state=$(sed -n 's/.*optimizer state on disk: \([0-9.]*\) GiB.*/\1/p' "$TMP/big_nvme.out")
limit=$(sed -n 's/.*STARPU_LIMIT_CPU_MEM \([0-9]*\) MiB.*/\1/p' "$TMP/big_nvme.out")
# StarPU's count of what it holds in RAM (the summary's "measured"), MiB
held() { sed -n 's/.*peak memory, host.*: measured \([0-9.]*\) MiB.*/\1/p' "$1"; }
echo "# peak RSS: state in RAM $(($(cat "$TMP/big_cpu.rss") >> 20)) MiB, on disk $(($(cat "$TMP/big_nvme.rss") >> 20)) MiB; StarPU held $(held "$TMP/big_cpu.out") and $(held "$TMP/big_nvme.out") MiB; state on disk ${state:-?} GiB, StarPU's limit ${limit:-?} MiB"
"$PY" -c 'import sys; hc, hn, s, l, rc, rn = map(float, sys.argv[1:])
sys.exit(not (hn <= l and l < hc and s > 0 and rn <= 1.05 * rc))' \
	"$(held "$TMP/big_cpu.out")" "$(held "$TMP/big_nvme.out")" "${state:-0}" "${limit:-0}" \
	"$(cat "$TMP/big_cpu.rss")" "$(cat "$TMP/big_nvme.rss")"
ok $? "what StarPU holds in RAM stays under the limit the run set, itself below what the run in RAM holds; the peak RSS not above that run's (5%)"

# 16-18: a full disk (tmpfs mounts of our own)
mkdir -p "$TMP/small" "$TMP/mid"
if mount -t tmpfs -o size=4m tmpfs "$TMP/small" 2>/dev/null; then
	trap 'umount "$TMP/small" "$TMP/mid" 2>/dev/null; rm -rf "$TMP"' EXIT
	before=$(cat "$TMP/ck_cpu/step-00000005/"*.safetensors | cksum)
	"$BIN" run "$TMP/nvme.json" --load "$TMP/ck_cpu" --save "$TMP/ck_cpu" --steps 2 \
		--set zero_optimization.offload_optimizer.nvme_path="$TMP/small" >"$TMP/small.out" 2>&1
	[ $? -ne 0 ] && grep -q "offload_optimizer.nvme_path: $TMP/small/stepgraph-nvme-[0-9]*: cannot hold the state" "$TMP/small.out"
	ok $? "a disk too small for the state: the run fails before its first step naming nvme_path"
	"$BIN" run "$TMP/cpu.json" --load "$TMP/ck_cpu" --steps 1 --metrics "$TMP/after.jsonl" >/dev/null 2>&1 &&
		[ "$(cat "$TMP/ck_cpu/latest")" = "step-00000005" ] &&
		[ "$(cat "$TMP/ck_cpu/step-00000005/"*.safetensors | cksum)" = "$before" ] &&
		[ "$(losses "$TMP/after.jsonl")" = "$(losses "$TMP/ref41.jsonl" | sed -n 6p)" ] &&
		[ -z "$(ls -A "$TMP/small")" ]
	ok $? "the checkpoint it loaded is unchanged and resumes to the uninterrupted loss; nothing left on the small disk"
	mount -t tmpfs -o size=64m tmpfs "$TMP/mid"
	stdbuf -oL "$BIN" run "$TMP/nvme.json" --steps 30 --metrics "$TMP/mid.jsonl" \
		--set zero_optimization.offload_optimizer.nvme_path="$TMP/mid" >"$TMP/mid.out" 2>&1 &
	pid=$!
	t=0
	while ! grep -q "start-up" "$TMP/mid.out" && [ $t -lt 600 ] && kill -0 $pid 2>/dev/null; do
		sleep 0.1
		t=$((t + 1))
	done
	dd if=/dev/zero of="$TMP/mid/fill" bs=1M >/dev/null 2>&1
	free=$(df -k "$TMP/mid" | awk 'NR == 2 {print $4}')
	wait $pid
	rc=$?
	"$BIN" run "$TMP/cpu.json" --steps 30 --metrics "$TMP/cpu30.jsonl" >/dev/null 2>&1
	[ $rc -eq 0 ] && [ "$free" -eq 0 ] && [ "$(losses "$TMP/mid.jsonl")" = "$(losses "$TMP/cpu30.jsonl")" ]
	ok $? "the disk filled up during the run: it goes on to the same 30 losses (its files were reserved)"
else
	echo "# SKIP tmpfs mounts are not permitted here: no full-disk checks"
	ok 0 "# SKIP a disk too small (no mount permission)"
	ok 0 "# SKIP the checkpoint stays valid (no mount permission)"
	ok 0 "# SKIP the disk filled during the run (no mount permission)"
fi
echo "1..$n"
