#!/bin/sh
# test_optimizers.sh - DeepSpeed's other two offloadable optimizers, Lion and
# Adagrad, trained end to end against PyTorch: 5 steps of the odd-sized Llama
# of tests/torch_train_ref.py (hidden 72, 3 heads of 24, 1 KV head, vocab 97)
# from the same initial weights on the same batch, gradient clipping on.
# References (tests/torch_train_ref.py, float64): torch.optim.Adagrad itself,
# and Lion written there from the paper (Chen et al. 2023). Every loss within
# 1e-5 relative, finite, the reference learning; in ZeRO-0, in ZeRO-3 with the
# optimizer offloaded in several sub-groups on 2 workers, and under
# SuperOffload (Adagrad without weight decay speculating, so clipping rolls
# its steps back; Lion, and Adagrad with L2 decay, waiting for the norm). Controls show each hyper-parameter reaching the
# kernels. Checkpoints of both resume bit for bit; a Lion one is refused under
# another optimizer, as is an unknown rule in its metadata; a speculative Lion
# run, or Adagrad with decay, is refused. simulate models the step run
# executes (no speculation for Lion).
# Prints TAP.
set -u
SG_TEST_NAME=optim
. "${SG_SRCDIR:-.}/tests/odd_llama_lib.sh"

# config NAME OPTIMIZER_JSON [ZERO_JSON]: TMP/NAME.json
config() {
	cat >"$TMP/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": $2, "gradient_clipping": $CLIP,
 "zero_optimization": ${3:-$Z0}}
JSON
}
Z0='{"stage": 0}'
# ZeRO-3 with the optimizer on the host in sub-groups of 9000 parameters
Z3='{"stage": 3, "sub_group_size": 9000, "offload_optimizer": {"device": "cpu"}}'
Z3SO='{"stage": 3, "sub_group_size": 9000, "offload_optimizer": {"device": "cpu", "super_offload": true}}'

# ---- Adagrad: lr 0.05, lr_decay 0.3, accumulator from 0.1, L2 0.01, eps 1e-10
ADAGRAD='{"type": "Adagrad", "params": {"lr": 0.05, "lr_decay": 0.3, "initial_accumulator_value": 0.1, "weight_decay": 0.01, "eps": 1e-10}}'
config adagrad "$ADAGRAD"
config adagrad_z3 "$ADAGRAD" "$Z3"
config adagrad_so "$ADAGRAD" "$Z3SO"
# without weight decay Adagrad's step is undone exactly, and SuperOffload speculates
ADAGRAD0='{"type": "Adagrad", "params": {"lr": 0.05, "lr_decay": 0.3, "initial_accumulator_value": 0.1, "eps": 1e-10}}'
config adagrad0_so "$ADAGRAD0" "$Z3SO"
torch adagrad adagrad:0.3:0.1 0.05 0.9 0.999 1e-10 0.01
ok $? "torch.optim.Adagrad trains $STEPS steps"
run adagrad adagrad --ncpus 1
ok $? "stepgraph trains $STEPS steps with Adagrad (ZeRO 0)"
same adagrad adagrad
ok $? "Adagrad, ZeRO 0: every loss within 1e-5 relative of torch.optim.Adagrad's"
run adagrad_z3 adagrad_z3 --ncpus 2
same adagrad_z3 adagrad
ok $? "Adagrad, ZeRO 3 offloaded in sub-groups on 2 workers: within 1e-5 of torch's"
run adagrad_so adagrad_so --ncpus 2
same adagrad_so adagrad && grep -q 'waited for the norm' "$TMP/adagrad_so.out"
ok $? "Adagrad with L2 decay under SuperOffload waits for the norm (speculation unset): within 1e-5 of torch's"
torch adagrad0 adagrad:0.3:0.1 0.05 0.9 0.999 1e-10 0
run adagrad0_so adagrad0_so --ncpus 2 --speculation always
same adagrad0_so adagrad0 &&
	grep -q 'speculative sub-group steps rolled back' "$TMP/adagrad0_so.out" &&
	! grep -q ' 0 of [0-9]* speculative sub-group steps rolled back' "$TMP/adagrad0_so.out"
ok $? "Adagrad without decay under SuperOffload speculates (clipping rolls steps back): within 1e-5 of torch's"
# controls: lr_decay and the accumulator's start reach the kernel
torch adagrad_nodecay adagrad:0:0.1 0.05 0.9 0.999 1e-10 0.01
differs adagrad adagrad_nodecay
ok $? "control: the run does not match torch's Adagrad without lr_decay"
torch adagrad_noinit adagrad:0.3:0 0.05 0.9 0.999 1e-10 0.01
differs adagrad adagrad_noinit
ok $? "control: the run does not match torch's Adagrad with the accumulator starting at 0"

# ---- Lion: lr 2e-3, betas (0.9, 0.99), decoupled decay 0.1
LION='{"type": "Lion", "params": {"lr": 0.002, "betas": [0.9, 0.99], "weight_decay": 0.1}}'
config lion "$LION"
config lion_z3 "$LION" "$Z3"
config lion_so "$LION" "$Z3SO"
torch lion lion 0.002 0.9 0.99 0 0.1
ok $? "the paper's Lion (in torch) trains $STEPS steps"
run lion lion --ncpus 1
ok $? "stepgraph trains $STEPS steps with Lion (ZeRO 0)"
same lion lion
ok $? "Lion, ZeRO 0: every loss within 1e-5 relative of the paper's Lion"
run lion_z3 lion_z3 --ncpus 2
same lion_z3 lion
ok $? "Lion, ZeRO 3 offloaded in sub-groups on 2 workers: within 1e-5 of the reference"
run lion_so lion_so --ncpus 2
same lion_so lion && grep -q 'waited for the norm' "$TMP/lion_so.out"
ok $? "Lion under SuperOffload waits for the norm (speculation unset): within 1e-5 of the reference"
torch lion_b lion 0.002 0.9 0.999 0 0.1
differs lion lion_b
ok $? "control: the run does not match Lion with beta2 0.999 (the betas reach the kernel)"
torch lion_adamw adamw 0.002 0.9 0.99 1e-8 0.1
differs lion lion_adamw
ok $? "control: the run does not match AdamW with the same lr, betas and decay"

# ---- checkpoints: saved at step 3 and resumed = the uninterrupted run (Lion's
# momentum; Adagrad's sums, which a resumed run must not restart from
# initial_accumulator_value)
for o in lion adagrad; do
	"$BIN" run "$TMP/$o.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
		--load "$TMP/init.safetensors" --steps 3 --ncpus 1 --save "$TMP/ck_$o" \
		--metrics "$TMP/first_$o.jsonl" >"$TMP/first_$o.out" 2>&1 &&
		"$BIN" run "$TMP/$o.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
			--load "$TMP/ck_$o" --steps 2 --ncpus 1 --metrics "$TMP/second_$o.jsonl" \
			>"$TMP/second_$o.out" 2>&1 &&
		"$PY" - "$TMP/$o.jsonl" "$TMP/first_$o.jsonl" "$TMP/second_$o.jsonl" <<'PYEOF'
import json, sys
whole = [json.loads(l)["loss"] for l in open(sys.argv[1])]
parts = [json.loads(l)["loss"] for f in sys.argv[2:] for l in open(f)]
print("# uninterrupted %r\n# resumed       %r" % (whole, parts))
sys.exit(0 if whole == parts and len(whole) == 5 else 1)
PYEOF
	ok $? "$o saved at step 3 and resumed: the uninterrupted run's 5 losses, bit for bit"
done
"$BIN" run "$TMP/adagrad.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--load "$TMP/ck_lion" --steps $STEPS --ncpus 1 >"$TMP/mixed.out" 2>&1
[ $? -ne 0 ] && grep -q 'state of the lion optimizer, and the config asks for adagrad' "$TMP/mixed.out"
ok $? "a Lion checkpoint resumed with Adagrad is refused, naming both"
# the metadata key: a file without it (as written before Lion and Adagrad)
# holds Adam's moments; a value that is not a rule is refused, naming it
# meta CKPT KEY VALUE: sets (or, VALUE "-", deletes) __metadata__.KEY of CKPT's state
meta() {
	"$PY" "$SRC/tests/stfile.py" meta "$1/$(cat "$1/latest")/state.safetensors" "$2=$3"
}
cp -r "$TMP/ck_lion" "$TMP/ck_old" && meta "$TMP/ck_old" optimizer - &&
	"$BIN" run "$TMP/lion.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
		--load "$TMP/ck_old" --steps 1 --ncpus 1 >"$TMP/old.out" 2>&1
[ $? -ne 0 ] && grep -q 'state of the adam optimizer, and the config asks for lion' "$TMP/old.out"
ok $? "a checkpoint without the optimizer key is Adam's: resumed under Lion, refused"
cp -r "$TMP/ck_lion" "$TMP/ck_bad" && meta "$TMP/ck_bad" optimizer sgd &&
	"$BIN" run "$TMP/lion.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
		--load "$TMP/ck_bad" --steps 1 --ncpus 1 >"$TMP/bad.out" 2>&1
[ $? -ne 0 ] && grep -q '__metadata__.optimizer: "sgd" is not "adam", "lion" or "adagrad"' "$TMP/bad.out"
ok $? "a checkpoint whose optimizer key is not a rule is refused, naming the key and value"
"$BIN" run "$TMP/lion_so.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--steps 1 --speculation always >"$TMP/spec.out" 2>&1
[ $? -ne 0 ] && grep -q 'cannot run with the Lion optimizer' "$TMP/spec.out"
ok $? "Lion with --speculation always under SuperOffload is refused"
"$BIN" run "$TMP/adagrad_so.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--steps 1 --speculation adaptive >"$TMP/spec2.out" 2>&1
[ $? -ne 0 ] && grep -q 'cannot run with Adagrad with weight_decay' "$TMP/spec2.out"
ok $? "Adagrad with weight decay and --speculation adaptive under SuperOffload is refused"
# simulate models the step run executes: Lion under SuperOffload without
# SuperOffload's validation tasks, Adagrad without decay with them
# validates NAME: the number of validation tasks in TMP/NAME.trace
validates() {
	"$PY" -c 'import json, sys
t = json.load(open(sys.argv[1]))
print(sum(1 for e in t["traceEvents"] if str(e.get("name", "")).startswith("validate")))' "$TMP/$1.trace"
}
for c in lion_so adagrad0_so; do
	"$BIN" simulate "$TMP/$c.json" --model "$TMP/model.json" --max_length 16 --machine gh200 \
		--trace "$TMP/$c.trace" >"$TMP/sim_$c.out" 2>&1 || sed 's/^/# /' "$TMP/sim_$c.out" | tail -3
done
[ "$(validates lion_so)" -eq 0 ] && [ "$(validates adagrad0_so)" -gt 0 ] &&
	grep -q 'SuperOffload, waiting for the gradient norm' "$TMP/sim_lion_so.out"
ok $? "simulate: Lion under SuperOffload has no validation tasks (it waits for the norm), Adagrad without decay has them"
# one state array instead of Adam's two: 4 bytes less host memory per
# offloaded parameter (tiny-llama, ZeRO 3, every sub-group on the host)
for o in AdamW Lion Adagrad; do
	"$BIN" graph "$TMP/adagrad_z3.json" --model tiny-llama --summary --set "optimizer={\"type\": \"$o\"}" \
		2>/dev/null | sed -n 's/^peak memory, host: .*(persistent \([0-9.]*\) MiB)/\1/p' >"$TMP/host_$o.txt"
done
P=$("$BIN" config "$TMP/adagrad_z3.json" --model tiny-llama 2>/dev/null | sed -n 's/^model: .*(\([0-9]*\) parameters)/\1/p')
"$PY" - "$P" "$(cat "$TMP/host_AdamW.txt")" "$(cat "$TMP/host_Lion.txt")" "$(cat "$TMP/host_Adagrad.txt")" <<'PYEOF'
import sys
p, adam, lion, adagrad = int(sys.argv[1]), *map(float, sys.argv[2:5])
want = 4 * p / 2**20
print("# persistent host MiB: AdamW %.1f, Lion %.1f, Adagrad %.1f; 4 B x %d parameters = %.2f MiB"
      % (adam, lion, adagrad, p, want))
sys.exit(0 if abs(adam - lion - want) <= 0.1 and lion == adagrad and want > 1 else 1)
PYEOF
ok $? "Lion and Adagrad keep one state array: 4 bytes per offloaded parameter less host memory than Adam"
"$BIN" config "$TMP/lion_so.json" --model "$TMP/model.json" --max_length 16 >"$TMP/cfg_lion.out" 2>&1 &&
	grep -q '^optimizer: *Lion lr 0.002 betas (0.9, 0.99) weight_decay 0.1' "$TMP/cfg_lion.out" &&
	grep -q '^speculation: *never' "$TMP/cfg_lion.out"
ok $? "stepgraph config prints Lion's settings and the speculation mode it resolved to"
done_testing
