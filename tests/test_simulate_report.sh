#!/bin/sh
# test_simulate_report.sh - what `stepgraph simulate` says it did (issue 41
# items 1 and 6, issue 45 item 4): the resolved settings, the model, the
# reported step and a cold one flagged, the bound, and the three rates in
# the text and in --json, checked against the formulas evaluated here from
# the model file's sizes (docs/flops.md); one rank of a two-rank machine is
# said to be one rank; a step that does not fit exits 3 with the ways out;
# on a calibrated machine whose history lacks the step's task sizes the
# fitted costs run by themselves, saying so, and --cost history named
# refuses with the command that works. Prints TAP.
set -u
SG_TEST_NAME=simulate_report
. "${SG_SRCDIR:-.}/tests/test_env.sh"
sg_needs_sim
plan 18
SO="$SRC/configs/deepspeed/superoffload.json"
TINY="--model tiny-llama --max_length 128"

# --- settings, model, step, bound and rates, on gh200 -------------------------
"$BIN" simulate "$SO" $TINY --machine gh200 --sched dmda \
	--set zero_optimization.offload_optimizer.ratio=0.5 --json "$TMP/a.json" >"$TMP/a.out" 2>&1
ok $? "simulate a SuperOffload step of tiny-llama on gh200 with --json"
"$PY" - "$TMP/a.json" <<'PYEOF'
import json, sys
a = json.load(open(sys.argv[1]))
s = a["settings"]
assert a["model"] == "tiny-llama", a
assert s["ratio"] == 0.5 and s["sub_group_size"] == 400000000, s
assert s["cast_placement"] == "scheduler" and s["speculation"] == "adaptive", s
assert s["zero_stage"] == 3 and s["micro_batch"] == 4 and s["seq_len"] == 128, s
assert s["optimizer_tile"] >= 0 and s["optimizer_tile_auto"] is True, s
assert a["steps"] == 3 and a["reported_step"] == 3 and a["cold"] is False, a
assert a["ranks_simulated"] == 1 and a["machine_ranks"] == 1, a
assert a["bound_s"] > 0 and a["bound_by"], a
PYEOF
ok $? "--json: the model, the resolved settings, the reported step (warm) and the bound"
# the rates from the model file's sizes (tests/flops_ref.py): tiny-llama, 4
# sequences of 128 tokens, no checkpointing (c = 3); gh200's bf16 peak from
# its file
"$PY" - "$TMP/a.json" "$SRC/models/tiny-llama.json" "$SRC/configs/machines/gh200.json" \
	"$SRC/tests" <<'PYEOF'
import json, sys
sys.path.insert(0, sys.argv[4])
from flops_ref import rates
a = json.load(open(sys.argv[1]))
m = json.load(open(sys.argv[2]))
peak = json.load(open(sys.argv[3]))["gpu"]["tflops"]["bf16"]
seed, model, meg = rates(m, 4, 128, False, a["step_s"])
close = lambda x, y: abs(x - y) <= 1e-6 * abs(y)
assert close(a["tflops"], seed), (a["tflops"], seed)
assert close(a["model_tflops"], model), (a["model_tflops"], model)
assert close(a["megatron_tflops"], meg), (a["megatron_tflops"], meg)
assert close(a["mfu"], model / peak), (a["mfu"], model / peak)
PYEOF
ok $? "--json: TFLOPS (seed), model TFLOPS, Megatron TFLOPS and MFU are the formulas' values"
grep -q "^  Settings  *offload ratio 0.5, sub_group_size 400000000, cast_placement scheduler, optimizer_tile [0-9]* (auto, per full sub-group), speculation adaptive (simulated speculating, as always)$" "$TMP/a.out" &&
	grep -q "^  tiny-llama, ZeRO-3, bf16, micro-batch 4 x accumulation 1, seq 128" "$TMP/a.out" &&
	grep -q "^  Step time  *[0-9.]* ms, step 3 of 3 " "$TMP/a.out" && ! grep -q "Cold step" "$TMP/a.out"
ok $? "the report prints the model, the settings and which step it reports"
grep -q "^  TFLOPS  *[0-9.]* per GPU (DeepSpeedExamples' formula" "$TMP/a.out" &&
	grep -q "^  Model TFLOPS  *[0-9.]* per GPU (.*): MFU [0-9.]*% of 989 TFLOP/s$" "$TMP/a.out" &&
	grep -q "^  Megatron TFLOPS  *[0-9.]* per GPU (Megatron-LM's formula" "$TMP/a.out" &&
	grep -q "^  Lower bound  *[0-9.]* ms, set by" "$TMP/a.out"
ok $? "the report labels the three rates and MFU, and prints the bound"

# --- a cold step, one rank of two ------------------------------------------------
"$BIN" simulate "$SO" $TINY --machine mi300ax2 --steps 1 --json "$TMP/c.json" >"$TMP/c.out" 2>&1
ok $? "simulate --steps 1 on mi300ax2 without --dp_size"
grep -q "^  Cold step " "$TMP/c.out" && "$PY" -c 'import json, sys
a = json.load(open(sys.argv[1])); assert a["cold"] is True and a["steps"] == 1, a' "$TMP/c.json"
ok $? "--steps 1 is flagged as a cold step, in the text and the JSON"
grep -q "^  Ranks  *one rank of dp_size 1 simulated, on one of the 2 of mi300ax2" "$TMP/c.out" &&
	"$PY" -c 'import json, sys
a = json.load(open(sys.argv[1])); assert a["machine_ranks"] == 2 and a["ranks_simulated"] == 1, a' "$TMP/c.json"
ok $? "a two-rank machine without --dp_size: it says one rank is simulated"

# --- does not fit: status 3 and the ways out ----------------------------------
"$BIN" simulate "$SRC/configs/llama-3.1-8b-superoffload.json" --machine mi300a \
	--json "$TMP/nf.json" >"$TMP/nf.out" 2>&1
[ $? -eq 3 ]
ok $? "a step that does not fit exits with status 3"
grep -q "^Does not fit on mi300a: " "$TMP/nf.out" && grep -q "^  Ways out:" "$TMP/nf.out" &&
	grep -q "^    --machine mi300ax2 --dp_size 2: " "$TMP/nf.out" &&
	grep -q "^    stepgraph fit .*/llama-3.1-8b-superoffload.json --machine mi300a: " "$TMP/nf.out" &&
	grep -q "^    --set zero_optimization.offload_param.device=cpu" "$TMP/nf.out" &&
	! grep -q "Step time" "$TMP/nf.out"
ok $? "it names the ways out: two ranks of mi300ax2, fit, parameter offload"
"$PY" -c 'import json, sys
a = json.load(open(sys.argv[1]))
assert a["fits"] is False and a["model"] == "llama-3.1-8b" and "settings" in a, a
assert any(w.startswith("--machine mi300ax2 --dp_size 2") for w in a["ways_out"]), a' "$TMP/nf.json"
ok $? "--json of a step that does not fit: the settings and the ways out"
# the first way out works
"$BIN" simulate "$SRC/configs/llama-3.1-8b-superoffload.json" --machine mi300ax2 --dp_size 2 \
	--steps 1 --json "$TMP/nf2.json" >"$TMP/nf2.out" 2>&1
ok $? "the way out (--machine mi300ax2 --dp_size 2) fits and simulates"

# --- a calibrated machine whose history lacks the step's sizes ---------------------
DEF="$SRC/configs/default.json"
"$BIN" calibrate "$DEF" --name rephost --out "$TMP/cal" --steps 12 --max_length 64 \
	>"$TMP/cal.out" 2>&1
ok $? "calibrate the default job at 64 tokens"
"$BIN" simulate "$DEF" --max_length 128 --machine "$TMP/cal/rephost.json" --json "$TMP/h.json" \
	>"$TMP/h.out" 2>"$TMP/h.err"
r=$?
[ $r -eq 0 ] && grep -q "lacks task sizes of this step; simulating with the costs fitted" "$TMP/h.err" &&
	grep -q "^  Cost  *fitted on the node times by itself" "$TMP/h.out" &&
	grep -q "task times fitted on its node times" "$TMP/h.out" && grep -q "Step time" "$TMP/h.out"
ok $? "128 tokens, history lacking the sizes: the fitted costs run by themselves, saying so (exit $r)"
# a calibrated machine's lower bound is one: the busier worker class's busy
# time in the step over its workers, at most the step; the roofline of the
# machine's figures is printed apart, not called a bound
"$PY" - "$TMP/h.json" "$TMP/h.out" <<'PYEOF'
import json, re, sys
a = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
assert 0 < a["bound_s"] <= a["step_s"] and a["bound_by"] == "CPU workers' busy time", a
assert a["roofline_s"] > 0 and a["cost_note"], a
lb = float(re.search(r"^  Lower bound +([0-9.]+) ms, set by the CPU workers' busy time", text, re.M).group(1))
assert abs(lb - a["bound_s"] * 1e3) < 0.01, (lb, a["bound_s"])
assert re.search(r"^  Roofline +[0-9.]+ ms, .*not a bound of measured task times$", text, re.M), text
PYEOF
ok $? "on a calibrated machine the lower bound is the measured work, at most the step; the roofline apart"
# tune on the calibrated machine: the point whose sizes the history lacks
# (128 tokens) runs on the fitted costs, saying so in its note, and the
# bound column is the same measured work
"$BIN" tune "$DEF" --machines "$TMP/cal/rephost.json" --sched lws --priorities on \
	--vary max_length=64,128 --out "$TMP/tune" >"$TMP/tune.out" 2>&1 &&
	"$PY" - "$TMP/tune.csv" <<'PYEOF'
import csv, sys
rows = {r["max_length"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert set(rows) == {"64", "128"}, rows
for r in rows.values():
    assert r["status"] == "ok" and r["bound_by"] == "CPU workers' busy time", r
    assert 0 < float(r["bound_ms"]) <= float(r["step_ms"]), r
assert rows["64"]["note"] == "", rows["64"]
assert "fitted" in rows["128"]["note"] and "lacks these task sizes" in rows["128"]["note"], rows
PYEOF
ok $? "tune on the calibrated machine: history-less sizes on the fitted costs (noted); the bound is the measured work"
"$BIN" simulate "$DEF" --max_length 128 --machine "$TMP/cal/rephost.json" --cost history \
	>"$TMP/hn.out" 2>"$TMP/hn.err"
r=$?
cmd=$(sed -n 's/.*predict other sizes: \(stepgraph simulate .*--cost fitted\)$/\1/p' "$TMP/hn.err")
[ $r -ne 0 ] && [ -n "$cmd" ] && ! grep -q "Step time" "$TMP/hn.out"
ok $? "--cost history named: refused with the command that works ($cmd)"
# the command it names runs (stepgraph is the build's)
eval "\"\$BIN\" ${cmd#stepgraph }" >"$TMP/hc.out" 2>&1 && grep -q "Step time" "$TMP/hc.out"
ok $? "and that command simulates the step"
