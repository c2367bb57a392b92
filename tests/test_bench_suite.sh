#!/bin/sh
# test_bench_suite.sh - the GPU benchmark's one-call script, without a GPU:
# scripts/bench_results.py (the seed's TFLOPS formula against a value worked
# out by hand, the schema check of the result files), scripts/bench_gpu_suite.py
# (--dry-run lists every stage with its cap and command; options refused with
# the stage named; a run with a stand-in stepgraph and a stand-in peer Python
# writes result files that pass the schema check, with the figures computed
# from the stand-ins' step times; a failing run and a run past the budget are
# recorded, not fatal), the example's DeepSpeed configs as the suite writes
# them, the peers' Python compiled, and the DeepSpeed peer's phase means
# (ds_phases_ms, by hand; its timer names against deepspeed.utils.timer where
# a Python with DeepSpeed is found). With BENCH_PEER_PYTHON set to a Python
# that has torch (2.4 or later) and transformers (e.g. a venv's), the peer
# itself runs on the CPU: transformers' Llama-3.1-8B built from
# models/llama-3.1-8b.json has the P of the hand value (on the meta device),
# and the gpu and fsdp2 modes train tiny-llama 3 steps (its parameter count
# is `stepgraph model list`'s); without it those three checks are SKIPs.
# Prints TAP.
#
# The hand value: Llama-3.1-8B, P = 8,030,261,248 parameters, L = 32,
# h = 4096, s = 4096, c = 4 (activation checkpointing). Per sequence
#   2 c P s     = 8 x 8,030,261,248 x 4096       = 263,135,600,574,464
#   4 c L h s^2 = 16 x 32 x 4096 x 16,777,216    =  35,184,372,088,832
#   sum                                          = 298,319,972,663,296 FLOPs
# = 298.319972663296 TFLOPs a sequence, 1193.279890653184 a step of 4; at a
# 2650 ms step, 450.294 TFLOPS; MFU (c = 3: 223.7399... TFLOPs a sequence,
# 894.959917989888 a step) 894.959917989888 / 2.65 / 989 = 34.148%.
set -u
SG_TEST_NAME=bench_suite
. "${SG_SRCDIR:-.}/tests/test_env.sh"

. "$SRC/tests/train_lib.sh"
plan 25
R="$SRC/scripts/bench_results.py"
S="$SRC/scripts/bench_gpu_suite.py"

"$PY" -m py_compile "$SRC/bench/hf_gpu_peer.py" "$R" "$S" "$SRC/bench/torch_gpu_bench.py" 2>"$TMP/pyc.err"
ok $? "the peers' and the suite's Python compile ($(head -c 200 "$TMP/pyc.err"))"

"$PY" "$R" flops --model "$SRC/models/llama-3.1-8b.json" --seq 4096 --batch 4 --step-ms 2650 \
	>"$TMP/flops.out" 2>&1
grep -q "^params 8030261248; TFLOPs per step 1193.279891 (micro batch 4 x 298.319973 per sequence, c = 4)$" "$TMP/flops.out" &&
	grep -q "TFLOPS 450.294 (seed formula), MFU 34.15% of 989" "$TMP/flops.out"
ok $? "Llama-3.1-8B: P 8,030,261,248 and the seed formula's 1193.28 TFLOPs a step, 450.29 TFLOPS at 2650 ms: $(tr '\n' ' ' <"$TMP/flops.out")"

"$PY" - "$SRC/scripts" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import bench_results as br
assert abs(br.seed_tflop_per_sequence(8030261248, 32, 4096, 4096, True) - 298.319972663296) < 1e-9
assert abs(br.seed_tflop_per_sequence(8030261248, 32, 4096, 4096, False) - 223.739979497472) < 1e-9
assert br.seed_tflops(0, 4, 1, 1, 1, 1, True) is None
PYEOF
ok $? "the formula exactly, with c = 4 and c = 3"

# the schema: a valid document, then one fault at a time
"$PY" - "$SRC/scripts" "$TMP" <<'PYEOF'
import json, os, sys
sys.path.insert(0, sys.argv[1])
import bench_results as br
d = br.make_doc("2026-11-28T05:00:00Z", "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04",
                "llama-3.1-8b", 4096, 4,
                [br.make_row("stepgraph", "SuperOffload", 2650.0, 450.29, 0.9, status="ok"),
                 br.make_row("deepspeed", "super_offload", None, None, None, status="timeout")])
br.write_doc(os.path.join(sys.argv[2], "good.json"), d)
faults = {
    "date": ("date", "28/11/2026"),
    "busy": ("rows.0.gpu_busy", 90.0),
    "nostep": ("rows.0.step_ms", None),
    "missing": ("rows.0.-tflops_seed", None),
    "seq": ("seq", 0),
}
for name, (key, val) in faults.items():
    e = json.loads(json.dumps(d))
    parts = key.split(".")
    tgt = e
    for p in parts[:-1]:
        tgt = tgt[int(p)] if p.isdigit() else tgt[p]
    if parts[-1].startswith("-"):
        del tgt[parts[-1][1:]]
    else:
        tgt[parts[-1]] = val
    json.dump(e, open(os.path.join(sys.argv[2], name + ".json"), "w"))
try:
    br.write_doc(os.path.join(sys.argv[2], "refused.json"), e)
except ValueError:
    pass
PYEOF
"$PY" "$R" check "$TMP/good.json" >"$TMP/good.out" 2>&1
ok $? "a document with a measured and a timed-out row passes the schema check"
bad=0
for f in date:date busy:gpu_busy nostep:"null in a row whose status is ok" missing:"tflops_seed: missing" seq:"seq: expected an integer"; do
	"$PY" "$R" check "$TMP/${f%%:*}.json" >"$TMP/bad.out" 2>&1 && bad=1
	grep -q "${f#*:}" "$TMP/bad.out" || bad=1
done
ok $bad "five faulty documents each refused naming the field (bad date, busy as a percentage, ok row without a step, missing key, seq 0)"
[ ! -e "$TMP/refused.json" ]
ok $? "write_doc writes no file for a faulty document"

# the plan
"$PY" "$S" --dry-run >"$TMP/plan.out" 2>&1
ok $? "--dry-run exits 0"
stages="env tune_8b sg_8b ds_so_noclip ds_so tune_1b sg_1b pt_1b_eager calibrate pt_1b_compile ds_zo fsdp2_8b"
got=$(awk '/^  [a-z_0-9]+ +[0-9]+ +[0-9]+ / { printf "%s ", $1 }' "$TMP/plan.out")
[ "$got" = "$stages " ]
ok $? "the plan lists the 12 stages in order of value with cap and running total (got: $got)"
# one device call: the caps of the 8B and the 1B comparisons (15 + 40 + 150 +
# 110 + 100 + 20 + 45 + 35 = 515 s) and the wrapper's 30 s within 570
grep -q "^call 1: env,tune_8b,sg_8b,ds_so_noclip,ds_so,tune_1b,sg_1b,pt_1b_eager (515 s of caps)$" "$TMP/plan.out" &&
	grep -q "^call 2: calibrate,pt_1b_compile,ds_zo,fsdp2_8b (390 s of caps)$" "$TMP/plan.out" &&
	awk '/^  [a-z_0-9]+ +[0-9]+ +[0-9]+ / && $5 == 1 { t += $2 } END { exit !(t + 30 <= 570) }' "$TMP/plan.out"
ok $? "call 1 holds the 8B comparison (stepgraph, DeepSpeed with and without clipping) and the 1B one, 515 s of caps and the wrapper's 30 within 570; call 2 the rest"
miss=0
for s in $stages; do grep -q "^  $s: " "$TMP/plan.out" || miss=1; done
grep -q "tune_8b: .* tune .*--machines h200 " "$TMP/plan.out" &&
	grep -q "sg_8b: .* run .*--steps 4 --warmup_steps 2 " "$TMP/plan.out" &&
	grep -q "ds_so_noclip: .*hf_gpu_peer.py --mode deepspeed .*--gradient-clipping 0" "$TMP/plan.out" &&
	grep -q "fsdp2_8b: .*--mode fsdp2 --model models/llama-3.1-8b.json --seq 4096 --batch 4" "$TMP/plan.out" &&
	grep -q "^caps add up to 905 s against a budget of 570 s (30 s before this script)$" "$TMP/plan.out" || miss=1
ok $miss "every stage's command printed (tune on h200's model before a calibrate, 8B runs of 4 steps with 2 left out, DeepSpeed with clipping 0, FSDP2 at 4096 x 4), the caps' sum against the budget"
"$PY" "$S" --dry-run --only nosuch >"$TMP/only.out" 2>&1
[ $? -eq 2 ] && grep -q "no stage 'nosuch'" "$TMP/only.out"
ok $? "--only with an unknown stage: exit 2 naming it"

# a run with stand-ins: stepgraph prints a summary like the real one, the
# peer's Python a result line; the GPU stages run (BENCH_ASSUME_GPU)
cat >"$TMP/sg" <<'EOF'
#!/bin/sh
case "$1" in
version) echo "stepgraph (stand-in)" ;;
run) case " $* " in *" configs/llama-3.2-1b"*) echo "cannot start"; exit 1 ;; esac
	echo "  start-up: 30.50 s (config 0.10 s, compile 0.20 s, state and data 0.20 s, StarPU 1.00 s, state allocation 9.00 s, initial state 20.00 s); state 104.7 GiB, 24.0 GiB of it pinned"
	echo "  Step time: mean 2650.00 ms | min 2600.00 ms | max 2700.00 ms"
	echo "  GPU: busy 90.0% of the last step; CPU Adam 1000.0 ms, 95.0% of it under GPU work" ;;
*) exit 3 ;;
esac
EOF
cat >"$TMP/py" <<'EOF'
#!/bin/sh
case "$1" in -c) echo "torch (stand-in)"; exit 0 ;; esac
case " $* " in *" --mode fsdp2 "*) sleep 40 ;; esac
echo 'peer_result {"mode": "deepspeed", "status": "ok", "step_ms": [5000.0, 5000.0], "losses": [12.0, 11.9], "params": 8030261248, "gpu_busy": 0.75, "note": "stand-in"}'
EOF
chmod +x "$TMP/sg" "$TMP/py"
BENCH_ASSUME_GPU=1 "$PY" "$S" --bin "$TMP/sg" --python "$TMP/py" --only sg_8b,ds_so,sg_1b,fsdp2_8b \
	--no-memory-check --budget 22 --out "$TMP/out" --work "$TMP/work" >"$TMP/run.out" 2>&1
ok $? "a run with stand-ins exits 0 (a failed run and a stage past its budget are rows, not errors)"
"$PY" "$R" check "$TMP/out/bench-llama-3.1-8b.json" "$TMP/out/bench-llama-3.2-1b.json" >"$TMP/chk.out" 2>&1
ok $? "both result files pass the schema check $(head -c 300 "$TMP/chk.out")"
"$PY" - "$TMP/out" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1] + "/bench-llama-3.1-8b.json"))
r = {x["system"] + "/" + x["mode"]: x for x in d["rows"]}
sg = next(x for x in d["rows"] if x["system"] == "stepgraph")
ds = next(x for x in d["rows"] if x["system"] == "deepspeed")
# 1193.279890653184 TFLOPs a step: 450.294 at 2650 ms, 238.656 at 5000 ms
assert abs(sg["tflops_seed"] - 1193.279890653184 / 2.65) < 1e-6, sg
assert sg["gpu_busy"] == 0.9 and sg["hidden_adam"] == 0.95 and sg["startup_s"] == 30.5, sg
assert abs(sg["mfu"] - 894.959917989888 / 2.65 / 989) < 1e-9, sg
assert abs(ds["tflops_seed"] - 1193.279890653184 / 5.0) < 1e-6, ds
assert (ds["gpu_busy"], ds["gpu_busy_source"], sg["gpu_busy_source"]) == (0.75, "nvml", "trace"), ds
assert (d["seq"], d["micro_batch"], d["model"]) == (4096, 4, "llama-3.1-8b"), d
PYEOF
ok $? "the 8B rows: stepgraph 450.294 TFLOPS at 2650 ms, GPU busy 0.9 from its trace, hidden Adam 0.95, start-up 30.5 s; DeepSpeed 238.656 at 5000 ms, busy 0.75 from NVML"
"$PY" - "$TMP/out" <<'PYEOF'
import json, sys
one = json.load(open(sys.argv[1] + "/bench-llama-3.2-1b.json"))
row = next(x for x in one["rows"] if x["system"] == "stepgraph")
assert row["status"] == "failed" and row["step_ms"] is None, row
st = {s["stage"]: s for s in one["stages"]}
assert st["sg_1b"]["result"] == "fail" and st["sg_1b"]["note"] == "exit 1: cannot start", st
assert st["fsdp2_8b"]["result"] in ("timeout", "skip"), st
# the 8B run's stage note carries its start-up's parts for the summary
assert "start-up 30.50 s (config 0.10 s, compile 0.20 s, state and data 0.20 s, StarPU 1.00 s, " \
    "state allocation 9.00 s, initial state 20.00 s); state 104.7 GiB, 24.0 GiB of it pinned" \
    in st["sg_8b"]["note"], st["sg_8b"]
PYEOF
ok $? "the failed 1B run is a failed row; FSDP2, past the budget, timed out or skipped; the 8B stage's note has the start-up's parts"
"$PY" - "$TMP/work" <<'PYEOF'
import json, sys
so = json.load(open(sys.argv[1] + "/ds-superoffload.json"))
zo = json.load(open(sys.argv[1] + "/ds-zerooffload.json"))
o = so["zero_optimization"]["offload_optimizer"]
assert so["train_batch_size"] == 4 and so["zero_optimization"]["stage"] == 3
assert o == {"device": "cpu", "pin_memory": True, "ratio": 0.8, "super_offload": True,
             "cpuadam_cores_perc": 0.9}, o
assert zo["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
assert "optimizer" not in so and "gradient_clipping" not in so and "gradient_clipping" not in zo
PYEOF
ok $? "the example's DeepSpeed configs as written: ZeRO-3, ratio 0.8, cpuadam_cores_perc 0.9, no optimizer and no clipping key"

# a second call on the same machine (the same --work) adds to the first's
BENCH_ASSUME_GPU=1 "$PY" "$S" --bin "$TMP/sg" --python "$TMP/py" --only sg_8b \
	--no-memory-check --budget 30 --out "$TMP/out2" --work "$TMP/work" >"$TMP/run2.out" 2>&1 &&
	"$PY" - "$TMP/out2/bench-llama-3.1-8b.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert [r["system"] for r in d["rows"]].count("stepgraph") == 2, d["rows"]
assert [s["stage"] for s in d["stages"]] == ["env", "sg_8b", "ds_so", "sg_1b", "fsdp2_8b",
                                             "env", "sg_8b"], d["stages"]
PYEOF
ok $? "a second call with the same --work keeps the first call's rows and stages and adds its own"

# the device call's script without a GPU and without a carry: the build here,
# every GPU stage a skip, the files written
OUT="$TMP/out3" BIN="$BIN" bash "$SRC/scripts/bench_gpu_suite.sh" --only sg_8b,pt_1b_eager \
	--budget 30 --work "$TMP/work3" >"$TMP/wrap.out" 2>&1 &&
	grep -q "^| env | pass |" "$TMP/out3/summary.md" &&
	[ "$(grep -c "| skip | 0 | no GPU (nvidia-smi listed none) |" "$TMP/out3/summary.md")" -eq 2 ] &&
	"$PY" "$R" check "$TMP/out3/bench-llama-3.1-8b.json" >/dev/null
ok $? "bench_gpu_suite.sh without a GPU: env passes, the GPU stages skip saying why, valid files"

# stepgraph's side of the seed's case, as stepgraph reads its config
"$BIN" config "$SRC/configs/llama-3.1-8b-superoffload.json" >"$TMP/cfg8b.out" 2>&1 &&
	grep -q "^batch: *train_batch_size 4 = micro 4 x accumulation 1 x dp 1$" "$TMP/cfg8b.out" &&
	grep -q "^precision: *bf16" "$TMP/cfg8b.out" &&
	grep -q "^zero: *stage 3, .*offload_optimizer cpu (ratio 0.8, super_offload on, cpuadam_cores_perc 0.9)$" "$TMP/cfg8b.out" &&
	grep -q "^model: *llama-3.1-8b (8030261248 parameters)$" "$TMP/cfg8b.out" &&
	grep -q "^run: *max_length 4096," "$TMP/cfg8b.out" &&
	grep -q "activation_checkpointing on" "$TMP/cfg8b.out"
ok $? "configs/llama-3.1-8b-superoffload.json is the seed's case: bf16 ZeRO-3, micro batch 4, sequence 4096, ratio 0.8, cpuadam_cores_perc 0.9, checkpointing, 8,030,261,248 parameters"

# the stepgraph chain for real, on the CPU and a tiny model: calibrate (a
# first call), then tune on the calibrated machine with fitted costs and the
# run at tune's best point (a second call on the same --work: the stages' own
# commands, with --sg-args and --ncuda 0)
CHAIN="--bin $BIN --config-8b $SRC/configs/deepspeed/superoffload.json
	--config-1b $SRC/configs/deepspeed/superoffload.json --ncuda 0 --cal-steps 6 --jobs 2
	--no-memory-check --work $TMP/work4"
BENCH_ASSUME_GPU=1 "$PY" "$S" $CHAIN --sg-args "--model tiny-llama --max_length 64 --ncpus 2" \
	--only calibrate --budget 200 --out "$TMP/out4a" >"$TMP/chain1.out" 2>&1 &&
	BENCH_ASSUME_GPU=1 "$PY" "$S" $CHAIN --sg-args "--model tiny-llama --max_length 64 --ncpus 2" \
	--only tune_8b,sg_8b --budget 200 --out "$TMP/out4" >"$TMP/chain.out" 2>&1 &&
	grep -q -- "--machines $TMP/work4/machines/gb-gpu.json .*--cost fitted" "$TMP/out4/logs.txt" &&
	"$PY" - "$TMP/out4/bench-llama-3.1-8b.json" "$TMP/work4/tune-8b.csv" <<'PYEOF'
import csv, json, sys
d = json.load(open(sys.argv[1]))
assert [s["stage"] for s in d["stages"]] == ["env", "calibrate", "env", "tune_8b", "sg_8b"], d["stages"]
assert [s["result"] for s in d["stages"]] == ["pass"] * 5, d["stages"]
row = [r for r in d["rows"] if r["system"] == "stepgraph"]
assert len(row) == 1 and row[0]["status"] == "ok" and row[0]["step_ms"] > 0, row
row = row[0]
pts = [r for r in csv.DictReader(open(sys.argv[2])) if r["status"] == "ok"]
best = max(pts, key=lambda r: float(r["tokens_per_s"]))
want = "--sched %s --set offload_optimizer.ratio=%s --cast_placement %s" % (
    best["sched"], best["offload_optimizer.ratio"], best["cast_placement"])
assert len(pts) == 18 and row["args"] == want, (len(pts), row["args"], want)
assert row["predicted_step_ms"] == float(best["step_ms"]), row
assert abs(row["prediction_error"] - (row["predicted_step_ms"] / row["step_ms"] - 1)) < 1e-12
PYEOF
ok $? "calibrate in one call; in the next, tune on the calibrated machine with --cost fitted (18 points) and the run at the point with the most tokens/s, its prediction beside its step"

# DeepSpeed's phase timers in the peer's result: the mean over the timed
# steps of the phases every step reported, by hand
"$PY" - "$SRC/bench" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import hf_gpu_peer as p
snaps = [{"fwd_microstep": 10.0, "bwd_microstep": 20.0, "step_microstep": 30.0},
         {"fwd_microstep": 12.0, "bwd_microstep": 23.0, "step_microstep": 34.5,
          "bwd_inner_microstep": 5.0}]
got = p.mean_phases(snaps)
assert got == {"fwd_microstep": 11.0, "bwd_microstep": 21.5, "step_microstep": 32.25}, got
assert p.mean_phases([]) is None and p.mean_phases([{"other": 1.0}]) is None
PYEOF
ok $? "the DeepSpeed peer's ds_phases_ms: the mean of each phase over the timed steps, phases a step lacks left out"
# ... named as DeepSpeed names its timers, where DeepSpeed is installed
DSPY=${BENCH_DS_PYTHON:-$HOME/.cache/stepgraph/venv-bench/bin/python}
if [ -x "$DSPY" ] && "$DSPY" -c 'import deepspeed.utils.timer' >/dev/null 2>&1; then
	"$DSPY" - "$SRC/bench" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import hf_gpu_peer as p
from deepspeed.utils import timer as t
theirs = (t.FORWARD_MICRO_TIMER, t.BACKWARD_MICRO_TIMER, t.BACKWARD_INNER_MICRO_TIMER,
          t.BACKWARD_REDUCE_MICRO_TIMER, t.STEP_MICRO_TIMER)
assert p.DS_PHASES == theirs, (p.DS_PHASES, theirs)
PYEOF
	ok $? "the phase names are deepspeed.utils.timer's micro-step timers"
else
	skip "DeepSpeed's timer names: no Python with deepspeed (BENCH_DS_PYTHON, or scripts/bench_venv.sh's venv)"
fi

# the peer itself, where a Python with torch and transformers is given
PP=${BENCH_PEER_PYTHON:-}
if [ -n "$PP" ] && "$PP" -c 'import torch, transformers' >/dev/null 2>&1; then
	got=$("$PP" "$SRC/bench/hf_gpu_peer.py" --mode gpu --model "$SRC/models/llama-3.1-8b.json" \
		--count-params 2>"$TMP/count.err")
	[ "$got" = 8030261248 ]
	ok $? "transformers' Llama-3.1-8B from models/llama-3.1-8b.json: $got parameters, the hand value's P"
	tiny=$("$BIN" model list 2>/dev/null | awk '$1 == "tiny-llama" { print $3 }')
	for m in gpu fsdp2; do
		"$PP" "$SRC/bench/hf_gpu_peer.py" --mode $m --device cpu --model "$SRC/models/tiny-llama.json" \
			--seq 32 --batch 2 --steps 3 --warmup 1 >"$TMP/peer-$m.out" 2>"$TMP/peer-$m.err"
		r=$?
		"$PY" - "$TMP/peer-$m.out" "$tiny" $r <<'PYEOF'
import json, math, sys
line = [l for l in open(sys.argv[1]) if l.startswith("peer_result ")][-1]
res = json.loads(line[len("peer_result "):])
assert sys.argv[3] == "0" and res["status"] == "ok", res
assert res["params"] == int(sys.argv[2]), (res["params"], sys.argv[2])
assert len(res["step_ms"]) == 2 and len(res["losses"]) == 3, res
assert all(math.isfinite(x) and x > 0 for x in res["losses"] + res["step_ms"]), res
PYEOF
		ok $? "peer --mode $m on the CPU: 3 steps of tiny-llama, $tiny parameters as stepgraph counts them, 2 timed"
	done
else
	for c in "the 8B parameter count" "peer --mode gpu on the CPU" "peer --mode fsdp2 on the CPU"; do
		skip "$c: set BENCH_PEER_PYTHON to a Python with torch >= 2.4 and transformers"
	done
fi
