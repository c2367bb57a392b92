#!/bin/sh
# test_nvme_model.sh - ZeRO-Infinity's disk tier ("nvme") in `graph
# --summary`, `fit` and `simulate` (graph/disk_tier.h, runtime/sim/sim_disk.h).
#
# Every expected figure comes from python here, not from stepgraph: the
# parameters P of tiny-llama from its JSON (Llama's tensors, tied
# embedding), and from them, with fp32 Adam and every sub-group on the CPU
# (ratio 1), the state on disk (master, m and v: 12 P bytes), the disk
# bytes per step (each tile read once and written once: 12 P each way),
# the sub-groups of sub_group_size S (ceil(P / S) tiles, the largest 12 S
# bytes) and the RAM working set (buffer_count of them). The host peak with
# the state on disk is the one with it in RAM ("cpu") less 12 P plus the
# working set. `fit` on a machine whose GPU and host are huge and whose disk
# holds 12 P(3072, 10 layers) plus half a layer finds hidden 3072 with 10
# layers, as test_fit.sh's rule in python says. `simulate` on a machine
# with a slow disk reports 12 P read and written, a step no shorter than
# 12 P / read + 12 P / write, the disk as the bound, and the disk's lanes in
# the trace. On a machine of 10 MB of host memory the state in RAM does not
# fit and the ways out name nvme, with which it fits and simulates. A
# machine file without a disk cannot hold nvme state (error
# naming the key and the machine). (`run` with nvme: tests/test_nvme.sh.)
# Prints TAP.
set -u
SG_TEST_NAME=nvme_model
. "${SG_SRCDIR:-.}/tests/test_env.sh"
S=100000
cat >"$TMP/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 3, "sub_group_size": $S,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$TMP"}}}
JSON
ARGS="--model tiny-llama --max_length 64 --machine gh200"
# machine NAME STATEMENTS: $TMP/NAME.json, gh200's file named NAME and changed by the
# python statements (on its dict m)
machine() {
	"$PY" - "$SRC/configs/machines/gh200.json" "$TMP/$1.json" "$1" "$2" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = sys.argv[3]
exec(sys.argv[4])
json.dump(m, open(sys.argv[2], "w"))
PYEOF
}
# P from the model's JSON, written again here
P=$("$PY" - "$SRC/models/tiny-llama.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
h, i, L, v = m["hidden_size"], m["intermediate_size"], m["num_hidden_layers"], m["vocab_size"]
hd = m["head_dim"]
q, kv = m["num_attention_heads"] * hd, m["num_key_value_heads"] * hd
layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h  # q, k, v, o, MLP, two norms
print(L * layer + v * h * (1 if m["tie_word_embeddings"] else 2) + h)
PYEOF
)
echo "# tiny-llama: P = $P parameters"
summary() { # summary OUT [--set ...]: the summary JSON of the graph
	out=$1
	shift
	"$BIN" graph "$TMP/ds.json" $ARGS --format json "$@" >"$TMP/$out.json" 2>"$TMP/$out.err"
}
summary nvme && summary nvme2 --set zero_optimization.offload_optimizer.buffer_count=2 &&
	summary cpu --set zero_optimization.offload_optimizer.device=cpu
ok $? "graph --format json with the optimizer state on nvme, buffer_count 2, and on cpu"
"$PY" - "$TMP" "$P" "$S" <<'PYEOF'
import json, math, sys
d, P, S = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
js = {k: json.load(open("%s/%s.json" % (d, k)))["summary"] for k in ("nvme", "nvme2", "cpu")}
tiles, tile = math.ceil(P / S), 12 * min(S, P)
want = {"bytes": 12 * P, "read_bytes": 12 * P, "write_bytes": 12 * P, "tile_bytes": tile,
        "buffer_count": 4, "ram_bytes": min(4, tiles) * tile, "capacity_bytes": 7680e9}
got = js["nvme"]["disk"]
bad = [k for k in want if got[k] != want[k]]
if js["nvme2"]["disk"]["ram_bytes"] != min(2, tiles) * tile:
    bad.append("ram_bytes at buffer_count 2")
host = js["cpu"]["peak_bytes"]["host"] - 12 * P + want["ram_bytes"]
if js["nvme"]["peak_bytes"]["host"] != host:
    bad.append("host peak %d, not %d" % (js["nvme"]["peak_bytes"]["host"], host))
if "disk" in js["cpu"]:
    bad.append("a disk with device cpu")
print("# got", got, "want", want)
sys.exit(1 if bad else 0)
PYEOF
ok $? "disk 12 P, read and written 12 P, working set buffer_count x 12 S, host peak = cpu's - 12 P + it"
"$BIN" graph "$TMP/ds.json" $ARGS --summary >"$TMP/sum.txt" 2>&1 &&
	grep -q "^disk tier (nvme): .* on disk; RAM working set" "$TMP/sum.txt" &&
	grep -q "^disk: .* GiB needed of 7152.6 GiB: fits" "$TMP/sum.txt"
ok $? "graph --summary prints the disk tier and its fit on gh200's disk"
"$BIN" graph "$TMP/ds.json" --model tiny-llama --max_length 64 --machine h100-sxm --summary \
	>"$TMP/nodisk.txt" 2>&1
[ $? -ne 0 ] && grep -q 'zero_optimization.offload_optimizer.device: "nvme" needs a disk, and machine h100-sxm gives none' "$TMP/nodisk.txt"
ok $? "a machine file without a disk cannot hold nvme state: the error names the key and the machine"

# ---- fit: the disk binds (GPU and host 10 TB each), stage 1, fp32, seq 16
cat >"$TMP/ds1.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "$TMP"}}}
JSON
DISK=$("$PY" - <<'PYEOF'
V = 128256
def ffn(h):  # as tests/test_fit.sh: Meta's FFN rule
    f = int((1.2 if h >= 16384 else 1.3) * (2 * 4 * h // 3))
    return -(-f // 1024) * 1024
def params(h, layers):
    kv = 8 * 128
    return layers * (h * h * 2 + h * kv * 2 + 3 * h * ffn(h) + 2 * h) + 2 * V * h + h
disk = lambda h, l: 12 * params(h, l)
assert disk(2048, 16) < disk(3072, 10) < disk(3072, 28)
print(disk(3072, 10) + (disk(3072, 11) - disk(3072, 10)) // 2)
PYEOF
)
machine bigmem "m['gpu']['memory_gb'] = m['cpu']['memory_gb'] = 10000; m['disk']['capacity_gb'] = $DISK / 1e9"
"$BIN" fit "$TMP/ds1.json" --machine "$TMP/bigmem.json" --max_length 16 --max-hidden 4096 \
	>"$TMP/fit.txt" 2>"$TMP/fit.err"
st=$?
grep -q "^largest that fits: llama-scaled-h3072-l10," "$TMP/fit.txt" &&
	grep -q "disk GiB" "$TMP/fit.txt"
ok $((st + $?)) "fit: the disk's capacity binds at 12 P: hidden 3072 with 10 layers, with a disk column"
sed 's/^/# /' "$TMP/fit.txt" | tail -4
"$BIN" fit "$TMP/ds1.json" --machine h200 --max_length 16 >"$TMP/fitno.txt" 2>&1
[ $? -ne 0 ] && grep -q "machine h200 gives none" "$TMP/fitno.txt"
ok $? "fit on a machine without a disk: refused, naming it"

# ---- simulate: a slow disk (1 GB/s read, 0.5 GB/s write) binds the step
if ! [ -x "$BUILD/stepgraph-sim" ]; then
	for d in "simulate: disk bytes" "simulate: step >= disk bound" "simulate: trace lanes" \
		"simulate: ways out" "simulate: no disk"; do
		n=$((n + 1))
		echo "ok $n # SKIP stepgraph-sim not built ($d)"
	done
	echo "1..$n"
	exit 0
fi
machine slowdisk "m['disk']['read_gbs'], m['disk']['write_gbs'] = 1.0, 0.5"
"$BIN" simulate "$TMP/ds.json" --model tiny-llama --max_length 64 --machine "$TMP/slowdisk.json" \
	--steps 3 --json "$TMP/sim.json" --trace "$TMP/trace.json" >"$TMP/sim.txt" 2>&1
ok $? "simulate the nvme config on a machine with a slow disk"
"$PY" - "$TMP/sim.json" "$P" <<'PYEOF'
import json, sys
r, P = json.load(open(sys.argv[1])), int(sys.argv[2])
print("# disk read %d, written %d, busy %.3f ms, step %.3f ms, bound %.3f ms by %s" % (
    r["disk_read_bytes"], r["disk_write_bytes"], r["disk_s"] * 1e3, r["step_s"] * 1e3,
    r["bound_s"] * 1e3, r["bound_by"]))
sys.exit(0 if r["disk_read_bytes"] == 12 * P and r["disk_write_bytes"] == 12 * P else 1)
PYEOF
ok $? "simulate: the reported step reads and writes 12 P bytes of disk"
"$PY" - "$TMP/sim.json" "$P" <<'PYEOF'
import json, sys
r, P = json.load(open(sys.argv[1])), int(sys.argv[2])
disk_s = 12 * P / 1e9 + 12 * P / 0.5e9
ok = r["step_s"] >= disk_s * (1 - 1e-9) and abs(r["bound_s"] - disk_s) <= 1e-9 * disk_s
sys.exit(0 if ok and r["bound_by"].startswith("the disk") else 1)
PYEOF
ok $? "simulate: the step is no shorter than 12 P / 1 GB/s + 12 P / 0.5 GB/s, the disk's bound"
"$PY" - "$TMP/trace.json" "$P" "$S" <<'PYEOF'
import json, math, sys
t, P, S = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
ev = t["traceEvents"] if isinstance(t, dict) else t
lanes = {e["args"]["name"] for e in ev if e.get("ph") == "M" and "name" in e.get("args", {})}
disk = [e for e in ev if e.get("cat") == "disk"]
tiles = math.ceil(P / S)
reads = sum(1 for e in disk if e["args"]["direction"] == "read")
writes = sum(1 for e in disk if e["args"]["direction"] == "write")
print("# %d disk reads, %d writes in the trace, %d tiles" % (reads, writes, tiles))
sys.exit(0 if {"disk read", "disk write"} <= lanes and reads == tiles and writes == tiles else 1)
PYEOF
ok $? "simulate --trace: a disk read and a write-back per tile on the disk lanes"
# 10 MB of host memory: the state in RAM (12.5 MiB) does not fit, on disk (7.7 MiB) it does
machine smallram "m['cpu']['memory_gb'] = 0.01"
"$BIN" simulate "$TMP/ds.json" --model tiny-llama --max_length 64 --machine "$TMP/smallram.json" \
	--set zero_optimization.offload_optimizer.device=cpu >"$TMP/small_cpu.txt" 2>&1
grep -q "^Does not fit on smallram: host peak" "$TMP/small_cpu.txt" &&
	grep -q "offload_optimizer.device=nvme .*the optimizer state on smallram's disk" "$TMP/small_cpu.txt" &&
	"$BIN" simulate "$TMP/ds.json" --model tiny-llama --max_length 64 \
		--machine "$TMP/smallram.json" >"$TMP/small_nvme.txt" 2>&1 &&
	grep -q "Step time" "$TMP/small_nvme.txt"
ok $? "10 MB of host memory: cpu does not fit and the ways out name nvme; nvme fits and simulates"
"$BIN" simulate "$TMP/ds.json" --model tiny-llama --max_length 64 --machine h100-sxm \
	>"$TMP/simno.txt" 2>&1
[ $? -ne 0 ] && grep -q "machine h100-sxm gives none" "$TMP/simno.txt"
ok $? "simulate on a machine without a disk: refused, naming it"
echo "1..$n"
