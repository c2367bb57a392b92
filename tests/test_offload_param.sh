#!/bin/sh
# test_offload_param.sh - ZeRO-3 parameter offload (zero_optimization.
# offload_param.device "cpu", the Hugging Face "offload all" configs):
# - training: 5 steps of the odd-sized Llama of tests/torch_train_ref.py
#   against torch's AdamW (float64) with clipping, every loss within 1e-5
#   relative: every sub-group on the CPU with every unit gathered
#   (persistence threshold 0) in optimizer tiles that cut the parameter
#   pieces, and with every unit held whole (the default threshold: small
#   units are fetched, not gathered); every sub-group on the GPU side (no
#   offload_optimizer), and half of them (ratio 0.5);
# - a harder step (bf16, 2 micro-steps, activation checkpointing, no
#   gathered unit kept for the backward, SuperOffload at ratio 0.5
#   speculating and rolling back under clipping, lws and dmdas): the same
#   bits as without parameter offload, where the parameters live is not
#   numerics; the same under adaptive speculation with 3 steps in flight;
# - a checkpoint written with offload resumes without it, bit for bit;
# - the graph, read from `stepgraph graph --format json` by the Python
#   below: parameter pieces in host memory, no sub-group copy to the
#   device, a CPU sub-group's update cast straight into the pieces on a CPU
#   worker, a GPU sub-group's cast on the GPU and copied device-to-host into
#   them, every use of a unit fetched over the link (one fetch per unit per
#   micro-step and per backward of a unit not kept), the host-to-device
#   bytes and the GPU's persistent memory of the summary against the
#   pieces' sizes;
# - simulate on h100-pcie: the GPU's peak memory falls, the fetches use the
#   link;
# - refusals: NVMe without its nvme_path.
# Prints TAP.
set -u
SG_TEST_NAME=offparam
. "${SG_SRCDIR:-.}/tests/odd_llama_lib.sh"

# config NAME ZERO_JSON [PRECISION_JSON] [ACCUMULATION]: TMP/NAME.json
config() {
	cat >"$TMP/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": ${4:-1},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "betas": [0.9, 0.99], "eps": 1e-8,
                                           "weight_decay": 0.1}},
 "gradient_clipping": $CLIP, ${3:-}
 "zero_optimization": $2}
JSON
}
OFF='"offload_optimizer": {"device": "cpu"}'
PARAM='"offload_param": {"device": "cpu", "pin_memory": true}'
# every unit gathered; sub-groups of 9000 parameters
config gathered "{\"stage\": 3, \"sub_group_size\": 9000, \"stage3_param_persistence_threshold\": 0, $OFF, $PARAM}"
# the default threshold (1e5): every unit of this model is held whole
config whole "{\"stage\": 3, \"sub_group_size\": 9000, $OFF, $PARAM}"

# bits A B [N]: the two runs' losses are equal, finite and N (STEPS) long
bits() {
	"$PY" "$SRC/tests/sglog.py" same "$TMP/$1.jsonl" "$TMP/$2.jsonl" --steps "${3:-$STEPS}" --show
}

torch adamw adamw 0.002 0.9 0.99 1e-8 0.1
ok $? "torch's AdamW trains $STEPS steps"
run gathered gathered --ncpus 2 --optimizer_tile 2560 &&
	grep -q "optimizer offloaded to the CPU, parameters offloaded to the CPU" "$TMP/gathered.out"
ok $? "stepgraph trains $STEPS steps with the parameters offloaded, every unit gathered, and says so"
same gathered adamw
ok $? "parameters offloaded, every unit gathered, optimizer tiles cutting the pieces, 2 workers: within 1e-5 of torch's"
run whole whole --ncpus 2
same whole adamw
ok $? "parameters offloaded, every unit held whole (fetched, not gathered): within 1e-5 of torch's"
# the optimizer on the GPU side: every sub-group (no offload_optimizer), and
# half of them (ratio 0.5); their updates go back to the host's pieces
config gpu_opt "{\"stage\": 3, \"sub_group_size\": 9000, \"stage3_param_persistence_threshold\": 0, $PARAM}"
config half "{\"stage\": 3, \"sub_group_size\": 9000, \"stage3_param_persistence_threshold\": 0, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.5}, $PARAM}"
run gpu_opt gpu_opt --ncpus 2
same gpu_opt adamw
ok $? "parameters offloaded, every sub-group stepped on the GPU side (fp32 master beside its state): within 1e-5 of torch's"
run half half --ncpus 2
same half adamw
ok $? "parameters offloaded, half the sub-groups on the GPU side (ratio 0.5): within 1e-5 of torch's"

# ---- a harder step: with and without parameter offload, the same bits
SO='"offload_optimizer": {"device": "cpu", "super_offload": true}'
SO='"offload_optimizer": {"device": "cpu", "super_offload": true, "ratio": 0.5}'
HARD_Z="\"stage\": 3, \"sub_group_size\": 9000, \"stage3_param_persistence_threshold\": 0, \"stage3_max_reuse_distance\": 0, $SO"
config hard_off "{$HARD_Z}" '"bf16": {"enabled": true},' 2
config hard_on "{$HARD_Z, $PARAM}" '"bf16": {"enabled": true},' 2
for s in lws dmdas; do
	run hard_off hard_off_$s --ncpus 2 --sched $s --activation_checkpointing --speculation always &&
		run hard_on hard_on_$s --ncpus 2 --sched $s --activation_checkpointing --speculation always &&
		bits hard_off_$s hard_on_$s &&
		grep -q 'speculative sub-group steps rolled back' "$TMP/hard_on_$s.out" &&
		! grep -q ' 0 of [0-9]* speculative sub-group steps rolled back' "$TMP/hard_on_$s.out"
	ok $? "bf16, 2 micro-steps, checkpointing, every gather redone for the backward, SuperOffload at ratio 0.5 rolling back, $s: offload on = off, bit for bit"
done

# SuperOffload's adaptive speculation lowers a second graph, waiting for the
# norm, on the same handles, and runs 3 steps in flight: 16 steps of the
# default model, where it starts waiting (clipping on) and speculates once
# the norm has stayed under the threshold (100: from the first step)
for op in none cpu; do
	"$BIN" run "$SRC/configs/default.json" --steps 16 --ncpus 2 --speculation adaptive \
		--set gradient_clipping=100 \
		--lookahead 3 --set zero_optimization.stage=3 --set zero_optimization.sub_group_size=200000 \
		--set 'zero_optimization.offload_optimizer={"device": "cpu", "super_offload": true, "ratio": 0.5}' \
		--set zero_optimization.offload_param.device=$op --set 'bf16={"enabled": true}' \
		--metrics "$TMP/adaptive_$op.jsonl" >"$TMP/adaptive_$op.out" 2>&1 ||
		sed 's/^/# /' "$TMP/adaptive_$op.out" | tail -3
done
bits adaptive_none adaptive_cpu 16 &&
	grep -q ' [1-9][0-9]* of 16 steps waited for the gradient norm' "$TMP/adaptive_cpu.out" &&
	grep -q '| speculative' "$TMP/adaptive_cpu.out"
ok $? "SuperOffload adaptive (both graphs used), 3 steps in flight: offload on = off over 16 steps, bit for bit"

# ---- checkpoints: saved with the parameters offloaded, resumed without
"$BIN" run "$TMP/hard_on.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--load "$TMP/init.safetensors" --steps 3 --ncpus 2 --save "$TMP/ck" \
	--metrics "$TMP/first.jsonl" >"$TMP/first.out" 2>&1 &&
	"$BIN" run "$TMP/hard_off.json" --model "$TMP/model.json" --data "$TMP/data.bin" \
		--max_length 16 --load "$TMP/ck" --steps 2 --ncpus 2 --metrics "$TMP/second.jsonl" \
		>"$TMP/second.out" 2>&1 &&
	cat "$TMP/first.jsonl" "$TMP/second.jsonl" >"$TMP/resumed.jsonl" &&
	run hard_off whole_run --ncpus 2 && bits whole_run resumed
ok $? "saved at step 3 with the parameters offloaded, resumed without: the uninterrupted run's losses"

# ---- the graph, read by Python from the JSON export
HALF='"offload_optimizer": {"device": "cpu", "ratio": 0.5}'
config g_on "{\"stage\": 3, \"sub_group_size\": 9000, \"stage3_param_persistence_threshold\": 0, \"stage3_max_reuse_distance\": 0, $HALF, $PARAM}" '"bf16": {"enabled": true},' 2
config g_off "{\"stage\": 3, \"sub_group_size\": 9000, \"stage3_param_persistence_threshold\": 0, \"stage3_max_reuse_distance\": 0, $HALF}" '"bf16": {"enabled": true},' 2
for c in g_on g_off; do
	"$BIN" graph "$TMP/$c.json" --model "$TMP/model.json" --max_length 16 --ncpus 2 \
		--optimizer_tile 2560 --format json -o "$TMP/$c.graph.json" >/dev/null 2>"$TMP/$c.err" ||
		sed 's/^/# /' "$TMP/$c.err"
done
"$PY" - "$TMP/g_on.graph.json" "$TMP/g_off.graph.json" <<'PYEOF'
import json, sys
on, off = (json.load(open(p)) for p in sys.argv[1:3])
fails = []
def check(cond, what):
    print("# %s: %s" % ("ok" if cond else "FAILED", what))
    if not cond:
        fails.append(what)
def pieces(g):
    return {b["name"]: b for n in g["nodes"] for b in n["buffers"]
            if b["name"].startswith("param.")}
pon, poff = pieces(on), pieces(off)
check(pon and all(b["space"] == "host" for b in pon.values()),
      "offloaded: all %d parameter pieces in host memory" % len(pon))
check(poff and all(b["space"] == "gpu" for b in poff.values()), "not offloaded: on the GPU")
piece_bytes = sum(b["bytes"] for b in pon.values())
check(piece_bytes == sum(b["bytes"] for b in poff.values()), "the same pieces either way")
kinds = lambda g, k: [n for n in g["nodes"] if n["kind"] == k]
writes = lambda n, prefix: any(b["name"].startswith(prefix) and "w" in b["mode"].lower()
                               for b in n["buffers"])
# no sub-group copy to the device: every h2d node is a unit's fetch
copies = [n for n in kinds(on, "h2d") if n["name"].startswith("h2d.param.sg")]
check(not copies and kinds(off, "h2d") and
      all(n["name"].startswith("h2d.param.sg") for n in kinds(off, "h2d")),
      "offloaded: no sub-group h2d copy (%d without)" % len(kinds(off, "h2d")))
# a CPU sub-group's update cast writes the pieces, pinned to a CPU worker; a
# GPU sub-group's is cast on the GPU into its device buffer, then copied
# device-to-host into the pieces
casts = [n for n in kinds(on, "cast") if n["name"].startswith("cast.param")]
cpu_casts = [n for n in casts if n["device"] == "cpu"]
gpu_casts = [n for n in casts if n["device"] == "gpu"]
check(cpu_casts and all(n["pinned"] and writes(n, "param.") for n in cpu_casts),
      "offloaded: %d CPU sub-group casts write the pieces on a CPU worker" % len(cpu_casts))
check(gpu_casts and all(writes(n, "param_dev.") and not writes(n, "param.") for n in gpu_casts),
      "offloaded: %d GPU sub-group casts write their device buffer, not the pieces" % len(gpu_casts))
back = [n for n in kinds(on, "d2h") if n["name"].startswith("d2h.param.")]
check(len(back) == len(gpu_casts) and
      all(n["link"] == "d2h" and writes(n, "param.") and
          any(b["name"].startswith("param_dev.") and b["space"] == "gpu" for b in n["buffers"])
          for n in back) and not [n for n in kinds(off, "d2h") if n["name"].startswith("d2h.param.")],
      "offloaded: each GPU sub-group's cast update goes back over the d2h link into the pieces "
      "(%d copies; none without)" % len(back))
# a chunk's cast writes its range of the pieces, however many it cuts: bf16
# bytes = half its fp32 master chunk's
def master_bytes(n):
    return sum(b["bytes"] for b in n["buffers"] if b["name"].startswith("master."))
cut = [n for n in casts if sum(b["name"].startswith("param.") for b in n["buffers"]) > 1]
check(cut and all(n["bytes_written"] * 2 == master_bytes(n) for n in casts),
      "every parameter cast writes bf16 bytes = half its master chunk's (%d casts cut "
      "several pieces)" % len(cut))
check(not any(b["name"].startswith("param_host") for n in on["nodes"] for b in n["buffers"]),
      "offloaded: no host copy of the cast parameters")
# fetches: 2 micro-steps x (forward + backward) per unit (reuse distance 0:
# nothing is kept; the head's backward follows its forward, kept)
units = sorted({n["layer"] for n in kinds(on, "forward")})
fetch = kinds(on, "h2d")
gathers = kinds(on, "allgather")
check(len(fetch) == len(gathers) > 0,
      "every all-gather has its fetch (%d and %d)" % (len(fetch), len(gathers)))
for f in fetch:
    reads = [b for b in f["buffers"] if b["mode"].lower() == "r"]
    writes = [b for b in f["buffers"] if "w" in b["mode"].lower()]
    if not (reads and all(b["name"].startswith("param.") and b["space"] == "host" for b in reads)
            and len(writes) == 1 and writes[0]["name"].startswith("param_shard.")
            and writes[0]["space"] == "gpu" and f["link"] == "h2d"):
        check(False, "fetch %s reads host pieces, writes one device shard" % f["name"])
        break
else:
    check(True, "every fetch reads host pieces and writes one device shard over the h2d link")
for g in gathers:
    if not any(b["name"].startswith("param_shard.") for b in g["buffers"]):
        check(False, "%s reads the fetched shard" % g["name"])
        break
else:
    check(True, "every all-gather reads the fetched shard, not the host pieces")
per_unit = {}
for f in fetch:
    per_unit[f["layer"]] = per_unit.get(f["layer"], 0) + 1
check(set(per_unit) == set(units) and
      all(c in (2, 4) for c in per_unit.values()) and sum(per_unit.values()) >= 2 * len(units) + 2,
      "fetches per unit over 2 micro-steps: %r" % per_unit)
fetched_bytes = sum(b["bytes"] for f in fetch for b in f["buffers"] if b["mode"].lower() == "r")
h2d = on["summary"]["link_bytes"]["h2d"]
check(h2d == fetched_bytes and fetched_bytes == sum(
          per_unit[u] * sum(b["bytes"] for b in pon.values() if b["name"].startswith("param.%d." % u))
          for u in per_unit),
      "summary h2d bytes %d = the pieces' bytes times each unit's fetches" % h2d)
gp_on = on["summary"]["persistent_bytes"]["gpu"]
gp_off = off["summary"]["persistent_bytes"]["gpu"]
hp_on = on["summary"]["persistent_bytes"]["host"]
hp_off = off["summary"]["persistent_bytes"]["host"]
check(gp_off - gp_on == piece_bytes and hp_on - hp_off == piece_bytes,
      "persistent memory: the pieces' %d bytes move from the GPU (%d -> %d) to the host "
      "(%d -> %d)" % (piece_bytes, gp_off, gp_on, hp_off, hp_on))
sys.exit(1 if fails else 0)
PYEOF
ok $? "graph: pieces on the host, casts into them on the CPU, one fetch per use, link bytes and persistent memory"

# ---- simulate on a PCIe GPU: memory and link
for op in none cpu; do
	"$BIN" simulate "$SRC/configs/llama-3.2-1b-superoffload-gpu.json" --machine h100-pcie \
		--sched dmdas --set zero_optimization.offload_optimizer.ratio=1 \
		--set zero_optimization.offload_param.device=$op >"$TMP/sim_$op.out" 2>&1 ||
		sed 's/^/# /' "$TMP/sim_$op.out" | tail -3
done
"$PY" - "$TMP/sim_none.out" "$TMP/sim_cpu.out" <<'PYEOF'
import re, sys
def fig(path):
    t = open(path).read()
    gpu = float(re.search(r"Peak memory\s+GPU ([0-9.]+) GiB", t).group(1))
    h2d = float(re.search(r"Link h2d\s+([0-9.]+) GB", t).group(1))
    step = float(re.search(r"Step time\s+([0-9.]+) ms", t).group(1))
    return gpu, h2d, step
off, on = fig(sys.argv[1]), fig(sys.argv[2])
print("# without: GPU peak %.2f GiB, h2d %.3f GB, step %.2f ms" % off)
print("# with:    GPU peak %.2f GiB, h2d %.3f GB, step %.2f ms" % on)
sys.exit(0 if on[0] < off[0] and on[1] > 0 and on[2] > 0 else 1)
PYEOF
[ $? -eq 0 ] && grep -q "seq [0-9]*, optimizer offloaded (SuperOffload), parameters offloaded" "$TMP/sim_cpu.out" &&
	! grep -q "parameters offloaded" "$TMP/sim_none.out"
ok $? "simulate llama-3.2-1b on h100-pcie: parameter offload lowers the GPU's peak, the fetches cross the link"

# ---- refusals
"$BIN" run "$TMP/gathered.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--steps 1 --set zero_optimization.offload_param.device=nvme >"$TMP/nvme.out" 2>&1
[ $? -ne 0 ] && grep -q 'offload_param.device: "nvme" needs zero_optimization.offload_param.nvme_path' "$TMP/nvme.out"
ok $? "offload_param to NVMe without nvme_path is refused naming the key (tests/test_nvme.sh runs it)"
done_testing
