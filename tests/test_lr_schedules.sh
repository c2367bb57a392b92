#!/bin/sh
# test_lr_schedules.sh - DeepSpeed's five learning-rate schedulers in
# `stepgraph run`, against references that share no code with
# runtime/train/lr_schedule.c:
# - the lr and Adam betas of every update in --metrics, within 1e-6 relative
#   (the kernels take them in float32) of DeepSpeed's own, recorded from
#   DeepSpeed 0.19.8 in tests/data/lr-schedules/NAME.deepspeed.txt, and of
#   tests/lr_schedule_ref.py's own reading of DeepSpeed's formulas, for
#   the configs tests/data/lr-schedules/NAME.json: WarmupLR, WarmupDecayLR,
#   WarmupCosineLR (log and linear warm-up, stepped past its end), OneCycle
#   (momentum cycled and decayed; without momentum) and LRRangeTest
#   (continuous, staircase); each sequence must move, so a constant lr fails;
#   and the step log line names the lr (and OneCycle's beta1);
# - the recordings against DeepSpeed's classes run again, to 1e-12, where a
#   python with `deepspeed` is found ($SG_DEEPSPEED_PYTHON, else the
#   benchmarks' virtual environment ~/.cache/stepgraph/venv-bench); skipped
#   otherwise;
# - training under OneCycle (lr and beta1 moving every update, beta2 0.99)
#   against PyTorch's AdamW given the same lr and betas per update
#   (tests/torch_train_ref.py): every loss within 1e-5 relative;
# - a OneCycle run saved at step 6 and resumed: the schedule goes on where it
#   stopped (lr, betas and losses of the uninterrupted run, bit for bit);
# - a OneCycle whose momentum decay passes 1 ends with an error naming it.
# Prints TAP.
set -u
SG_TEST_NAME=lr
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"
STEPS=16

# config NAME SCHEDULER_JSON: $TMP/NAME.json, AdamW lr 2e-3, betas (0.9, 0.95)
config() {
	cat >"$TMP/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "betas": [0.9, 0.95]}},
 "scheduler": $2}
JSON
}
SCHEDULES="warmup warmupdecay cosine cosine_linear onecycle onecycle_nomom rangetest rangetest_stairs"
LRS=$SRC/tests/data/lr-schedules
for s in $SCHEDULES; do cp "$LRS/$s.json" "$TMP/$s.json"; done

# run NAME CONFIG [ARGS...]: stepgraph on tiny-llama, metrics in $TMP/NAME.jsonl
run() {
	_name=$1 _cfg=$2
	shift 2
	"$BIN" run "$TMP/$_cfg.json" --model tiny-llama --max_length 32 --metrics "$TMP/$_name.jsonl" \
		"$@" >"$TMP/$_name.out" 2>&1
	_rc=$?
	[ $_rc -eq 0 ] || sed 's/^/# /' "$TMP/$_name.out" | tail -3
	return $_rc
}

# same_schedule METRICS REF: every update's lr, beta1, beta2 within 1e-6
# relative of REF's; the lr takes at least 3 values; the losses are finite
same_schedule() {
	"$PY" - "$1" "$2" <<'PYEOF'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = [tuple(map(float, l.split())) for l in open(sys.argv[2])]
assert len(rows) >= 8 and len(ref) >= len(rows), (len(rows), len(ref))
worst = 0.0
for r, want in zip(rows, ref):
    assert math.isfinite(r["loss"]), r
    for key, w in zip(("lr", "beta1", "beta2"), want):
        worst = max(worst, abs(r[key] - w) / max(abs(w), 1e-12))
assert len({r["lr"] for r in rows}) >= 3, "the lr barely moves: %s" % [r["lr"] for r in rows]
print("# worst relative difference %.2e" % worst)
sys.exit(0 if worst <= 1e-6 else 1)
PYEOF
}

for s in $SCHEDULES; do
	grep -v '^#' "$LRS/$s.deepspeed.txt" >"$TMP/$s.ds" &&
		"$PY" "$SRC/tests/lr_schedule_ref.py" formula "$TMP/$s.json" $STEPS >"$TMP/$s.ref" &&
		run "$s" "$s" --steps $STEPS && same_schedule "$TMP/$s.jsonl" "$TMP/$s.ds" &&
		same_schedule "$TMP/$s.jsonl" "$TMP/$s.ref"
	ok $? "$s: $STEPS updates' lr and betas as DeepSpeed 0.19.8 gives them (recorded, and by the formulas)"
done
# the step log names the update's lr (and OneCycle's beta1)
grep -q "^Step 1 | Loss: .* | LR: 0.0001 | Beta1: 0.8$" "$TMP/onecycle.out" &&
	grep -q "^Step 1 | Loss: .* | LR: 0$" "$TMP/cosine.out" &&
	grep -q "^Step 1 | Loss: .* | LR: 0.0002$" "$TMP/onecycle_nomom.out"
ok $? "the step log gives the update's lr, and beta1 under OneCycle's momentum ($(grep '^Step 1 ' "$TMP/onecycle.out"))"
# OneCycle's momentum replaces the optimizer's betas: said once, before training
grep -q "warning: .*optimizer.params.betas (0.9, 0.95) are not used: OneCycle with cycle_momentum" \
	"$TMP/onecycle.out" && ! grep -q "are not used" "$TMP/onecycle_nomom.out"
ok $? "OneCycle with cycle_momentum warns that the optimizer's betas are not used (and without it does not)"
# negative control: OneCycle's metrics against LRRangeTest's schedule
! same_schedule "$TMP/onecycle.jsonl" "$TMP/rangetest.ref" >/dev/null 2>&1
ok $? "control: one schedule's metrics do not pass for another's"

# the formulas against DeepSpeed's own classes, where DeepSpeed is installed
DSPY=${SG_DEEPSPEED_PYTHON:-$HOME/.cache/stepgraph/venv-bench/bin/python}
if [ -x "$DSPY" ] && "$DSPY" -c 'import deepspeed.runtime.lr_schedules' >/dev/null 2>&1; then
	bad=""
	for s in $SCHEDULES; do
		"$DSPY" "$SRC/tests/lr_schedule_ref.py" deepspeed "$TMP/$s.json" 40 >"$TMP/$s.live" 2>/dev/null &&
			"$PY" "$SRC/tests/lr_schedule_ref.py" formula "$TMP/$s.json" 40 >"$TMP/$s.f40" &&
			"$PY" - "$TMP/$s.live" "$TMP/$s.f40" "$TMP/$s.ds" <<'PYEOF' || bad="$bad $s"
import sys
live, formula, recorded = ([list(map(float, l.split())) for l in open(f)] for f in sys.argv[1:4])
assert len(live) == len(formula) == len(recorded) == 40
close = lambda a, b: all(abs(x - y) <= 1e-12 * max(abs(x), 1e-12) for r, q in zip(a, b)
                         for x, y in zip(r, q))
sys.exit(0 if close(live, formula) and close(live, recorded) else 1)
PYEOF
	done
	[ -z "$bad" ]
	ok $? "DeepSpeed $("$DSPY" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null | tail -n1)'s schedulers, run here, equal the recordings and tests/lr_schedule_ref.py over 40 updates${bad:+; differs:$bad}"
else
	skip "no python with deepspeed (SG_DEEPSPEED_PYTHON, or the venv the benchmarks make: scripts/bench_venv.sh)"
fi

# OneCycle training against PyTorch, lr and betas set per update
if "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	R=$TMP/ref
	mkdir -p "$R"
	"$PY" "$SRC/tests/torch_train_ref.py" prepare "$R" >/dev/null
	ok $? "python writes the odd-sized model, its weights and its batch"
	cat >"$R/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                          "weight_decay": 0.1}},
 "gradient_clipping": 0.5, "zero_optimization": {"stage": 0},
 "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 5e-4, "cycle_max_lr": 4e-3,
  "cycle_first_step_size": 2, "cycle_second_step_size": 2, "cycle_min_mom": 0.7,
  "cycle_max_mom": 0.95, "decay_step_size": 1, "decay_lr_rate": 0.3, "decay_mom_rate": 0.01}}}
JSON
	"$PY" "$SRC/tests/lr_schedule_ref.py" formula "$R/ds.json" 6 >"$R/schedule.txt"
	"$BIN" run "$R/ds.json" --model "$R/model.json" --data "$R/data.bin" --max_length 16 \
		--load "$R/init.safetensors" --steps 6 --ncpus 1 --metrics "$R/sg.jsonl" >"$R/sg.out" 2>&1 &&
		"$PY" "$SRC/tests/torch_train_ref.py" train "$R" 6 2e-3 0.9 0.95 1e-8 0.1 0.5 \
			"$R/schedule.txt" >"$R/torch.txt" 2>"$R/torch.err" &&
		"$PY" "$SRC/tests/compare_losses.py" "$R/sg.jsonl" "$R/torch.txt" --steps 6 --rel 1e-5 \
			--learns 0.05 --per-step
	ok $? "OneCycle (lr and beta1 moving, beta2 0.99): 6 losses within 1e-5 relative of PyTorch's AdamW given the same lr and betas"
	# control: PyTorch at the optimizer's own betas must differ
	awk '{ print $1, 0.9, 0.95 }' "$R/schedule.txt" >"$R/fixed.txt"
	"$PY" "$SRC/tests/torch_train_ref.py" train "$R" 6 2e-3 0.9 0.95 1e-8 0.1 0.5 "$R/fixed.txt" \
		>"$R/torch_fixed.txt" 2>/dev/null
	! "$PY" "$SRC/tests/compare_losses.py" "$R/sg.jsonl" "$R/torch_fixed.txt" --steps 6 --rel 1e-5 \
		--per-step >/dev/null 2>&1
	ok $? "control: PyTorch with the betas held fixed does not match"
else
	skip "OneCycle against PyTorch: python3 has no torch and numpy"
	skip "control: python3 has no torch and numpy"
fi

# saved at step 6 and resumed: the schedule continues
run full onecycle --steps 12 &&
	run part_a onecycle --steps 6 --save "$TMP/ck" &&
	run part_b onecycle --steps 6 --load "$TMP/ck" &&
	"$PY" - "$TMP/full.jsonl" "$TMP/part_b.jsonl" <<'PYEOF'
import json, sys
full = [json.loads(l) for l in open(sys.argv[1])][6:]
b = [json.loads(l) for l in open(sys.argv[2])]
key = lambda r: (r["step"], r["lr"], r["beta1"], r["beta2"], r["loss"])
assert len(b) == 6 and [key(r) for r in b] == [key(r) for r in full], (b, full)
PYEOF
ok $? "OneCycle saved at step 6, resumed to 12: the lr, betas and losses of the uninterrupted run"

# momentum decay past 1: an error naming it, no crash
config onecycle_bad '{"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
	"cycle_first_step_size": 1, "decay_step_size": 1, "decay_mom_rate": 0.2}}'
run bad onecycle_bad --steps 8 --save "$TMP/bad_ck"
rc=$?
[ $rc -eq 1 ] && grep -q "OneCycle's beta1 reaches 1.08 at update 4 .*Adam needs beta1 < 1: lower decay_mom_rate, or run at most 3 steps" \
	"$TMP/bad.out" && ! grep -q "^Step 1 " "$TMP/bad.out" && ! [ -e "$TMP/bad_ck" ] && ! [ -e "$TMP/bad.jsonl" ]
ok $? "OneCycle's momentum decaying past 1 within the run: refused before the first step, no checkpoint directory or metrics left (exit $rc: $(grep "beta1 reaches" "$TMP/bad.out" | head -c 200))"
run bad_short onecycle_bad --steps 3
ok $? "the same schedule for 3 steps (beta1 below 1 throughout) trains"
done_testing
