#!/bin/sh
# test_lookahead.sh - steps in flight (run option lookahead): with no
# barrier between steps, step k+1's tasks run beside step k's, each reading
# its own step's hyper-parameters, tokens and results. Nothing a run
# computes may change: lookahead 1 (a barrier after every step), 2 and 3
# give bit-identical losses and byte-identical checkpoints on a graph with
# real parallelism (accumulation 2, ZeRO-3 offload over several sub-groups)
# under eager, lws, dmda and dmdas with 1 and 2 CPU workers; SuperOffload
# rollbacks and fp16 overflow skips give the same weights; save_interval and
# resume are exact; adaptive speculation picks the same modes whatever the
# timing; a diverging run still stops with its message. Every loss compared
# must be a finite number (train_lib.sh's losscmp). Prints TAP.
set -u
SG_TEST_NAME=lookahead
. "${SG_SRCDIR:-.}/tests/test_env.sh"

. "$SRC/tests/train_lib.sh"

# ckcmp A B STEP: the checkpoints of runs A and B at STEP are byte-identical
ckcmp() {
	d=$(printf 'step-%08d' "$3")
	[ -f "$TMP/ck_$1/$d/model.safetensors" ] &&
		cmp -s "$TMP/ck_$1/$d/model.safetensors" "$TMP/ck_$2/$d/model.safetensors" &&
		cmp -s "$TMP/ck_$1/$d/state.safetensors" "$TMP/ck_$2/$d/state.safetensors"
}
# field A KEY: one metrics field of every step, comma-separated
field() { "$PY" -c 'import json,sys; print(",".join(repr(json.loads(l)[sys.argv[2]]) for l in open(sys.argv[1])))' "$TMP/$1.jsonl" "$2"; }

# Every run in batch tiles of one sequence (the same graph on 1 and 2
# workers, where batch_tile auto would differ): tiles and steps in flight
# together
export SG_BATCH_TILE=1

# ---- accumulation 2, ZeRO-3 offload, several sub-groups -------------------
ds par '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 3, "sub_group_size": 200000, "offload_optimizer": {"device": "cpu"}}}'
train p1 par --steps 5 --lookahead 1 --sched eager --ncpus 1 --save "$TMP/ck_p1"
ok "$(cat "$TMP/p1.rc")" "lookahead 1 (a barrier after every step)"
! grep -q "steps in flight" "$TMP/p1.out"; ok $? "lookahead 1: the header has no steps-in-flight line"
"$PY" "$SRC/tests/sglog.py" learns "$TMP/p1.jsonl" --steps 5 --window 1
ok $? "the reference run trains: 5 finite losses, falling"
for sched in eager lws dmda dmdas; do
	for ncpus in 1 2; do
		name="p2_$sched$ncpus"
		train "$name" par --steps 5 --lookahead 2 --sched "$sched" --ncpus "$ncpus" --save "$TMP/ck_$name"
		same "$name" p1 && ckcmp "$name" p1 5
		ok $? "lookahead 2, $sched with $ncpus CPU workers: same losses bit for bit, same checkpoint bytes"
	done
done
grep -q "lookahead 2: up to 2 steps in flight; Time = from the later of a step's submission and the previous step's end to its end" \
	"$TMP/p2_dmdas2.out"
ok $? "lookahead 2: the header says what Time means"
for sched in lws dmdas; do
	train "p3_$sched" par --steps 5 --lookahead 3 --sched "$sched" --ncpus 2 --save "$TMP/ck_p3_$sched"
	same "p3_$sched" p1 && ckcmp "p3_$sched" p1 5
	ok $? "lookahead 3, $sched with 2 CPU workers: same losses bit for bit, same checkpoint bytes"
done
train p8 par --steps 2 --lookahead 8 --ncpus 2
"$PY" -c 'import json,sys; a=[json.loads(l)["loss"] for l in open(sys.argv[1])]; b=[json.loads(l)["loss"] for l in open(sys.argv[2])][:2]; sys.exit(not (a == b and len(a) == 2))' \
	"$TMP/p8.jsonl" "$TMP/p1.jsonl"
ok $? "lookahead 8 over 2 steps (fewer steps than the lookahead): the first two losses"

# ---- save_interval and resume with steps in flight ------------------------
train si1 par --steps 6 --lookahead 1 --ncpus 2 --save "$TMP/ck_si1" --save_interval 2 --save_keep 0
train si2 par --steps 6 --lookahead 2 --ncpus 2 --save "$TMP/ck_si2" --save_interval 2 --save_keep 0
same si2 si1 && ckcmp si2 si1 2 && ckcmp si2 si1 4 && ckcmp si2 si1 6
ok $? "save_interval 2, lookahead 2: the checkpoints at steps 2, 4 and 6 are those of lookahead 1"
train rs par --steps 4 --lookahead 2 --ncpus 2 --load "$TMP/ck_si2/step-00000002"
same_from si1 rs 2 && grep -q "^Step 3 |" "$TMP/rs.out"
ok $? "resume from step 2 with lookahead 2: steps 3-6 have the uninterrupted run's losses"

# ---- SuperOffload with rollbacks --------------------------------------------
clipcfg='"gradient_clipping": 0.05, "zero_optimization": {"stage": 3, "sub_group_size": 200000, "offload_optimizer": {"device": "cpu", "super_offload": true}}'
ds so "{$clipcfg}"
# speculation "always": the default (adaptive) would start waiting with clipping on
train so1 so --steps 5 --lookahead 1 --ncpus 2 --save "$TMP/ck_so1" --speculation always
grep -q "SuperOffload: [1-9][0-9]* of [0-9]* speculative sub-group steps rolled back" "$TMP/so1.out"
ok $? "SuperOffload with clipping 0.05 rolls speculative steps back"
for la in 2 3; do
	train "so$la" so --steps 5 --lookahead "$la" --ncpus 2 --save "$TMP/ck_so$la" --speculation always
	same "so$la" so1 && ckcmp "so$la" so1 5 &&
		[ "$(grep -o 'SuperOffload: [0-9]* of [0-9]*' "$TMP/so$la.out")" = "$(grep -o 'SuperOffload: [0-9]* of [0-9]*' "$TMP/so1.out")" ]
	ok $? "SuperOffload rollbacks, lookahead $la: same losses, rollback count and weights as lookahead 1"
done

# ---- fp16 overflow skips ----------------------------------------------------
ds f16 '{"fp16": {"enabled": true, "initial_scale_power": 20, "hysteresis": 1}}'
train f1 f16 --steps 10 --lookahead 1 --ncpus 2 --save "$TMP/ck_f1"
"$PY" - "$TMP/f1.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert any(r["skipped"] for r in rows) and not all(r["skipped"] for r in rows), rows
PYEOF
ok $? "fp16 from scale 2^20: some steps overflow and are skipped, others are not"
for la in 2 3; do
	train "f$la" f16 --steps 10 --lookahead "$la" --ncpus 2 --save "$TMP/ck_f$la"
	same "f$la" f1 && ckcmp "f$la" f1 10 && [ "$(field "f$la" skipped)" = "$(field f1 skipped)" ] &&
		[ "$(field "f$la" loss_scale)" = "$(field f1 loss_scale)" ] && [ "$(field "f$la" lr)" = "$(field f1 lr)" ]
	ok $? "fp16 skips, lookahead $la: same losses, skips, loss scales, lr and weights as lookahead 1"
done
ds f16w '{"fp16": {"enabled": true, "initial_scale_power": 20, "hysteresis": 1}, "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.003, "warmup_num_steps": 20, "warmup_type": "linear"}}}'
train fw1 f16w --steps 10 --lookahead 1 --ncpus 2
train fw2 f16w --steps 10 --lookahead 2 --ncpus 2
# the lr of a linear WarmupLR (20 steps to 3e-3) from the Adam steps made
# before each step, counted from the skips (DeepSpeed: update k runs at
# last_batch_iteration k - 1, lr = 3e-3 * max(k - 1, 0) / 20): a skip must
# not advance it
lrwaits() {
	"$PY" - "$TMP/$1.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 10 and any(r["skipped"] for r in rows[:-1]), rows
made = 0
for r in rows:
    want = 3e-3 * max(made - 1, 0) / 20
    assert abs(r["lr"] - want) <= 1e-6 * want, (r, made, want)
    made += not r["skipped"]
assert made >= 4, rows
PYEOF
}
lrwaits fw1 && lrwaits fw2 && same fw2 fw1 && [ "$(field fw2 lr)" = "$(field fw1 lr)" ]
ok $? "fp16 skips under a warm-up schedule, lookahead 2: each lr follows the Adam steps made (not the skips); same lr and losses as lookahead 1"

# ---- adaptive speculation ---------------------------------------------------
SO="$SRC/configs/deepspeed/superoffload.json"
for run in "a1 eager 1" "a2 dmdas 2" "a3 lws 2"; do
	set -- $run
	# clipping 7: the norm stays under it, so adaptive (which starts waiting
	# with clipping on) resumes speculating after 6 steps under the threshold
	"$BIN" run "$SO" --model tiny-llama --max_length 32 --steps 8 --log_interval 1 --speculation adaptive --batch_tile 1 \
		--set gradient_clipping=7 --sched "$2" --ncpus "$3" --metrics "$TMP/$1.jsonl" >"$TMP/$1.out" 2>&1
done
modes() { grep '^Step' "$TMP/$1.out" | sed 's/.*| \(speculative\|waited for the norm\).*/\1/' | tr '\n' ','; }
[ "$(modes a1)" = "$(printf 'waited for the norm,%.0s' 1 2 3 4 5 6 7)speculative," ] &&
	[ "$(modes a2)" = "$(modes a1)" ] && [ "$(modes a3)" = "$(modes a1)" ]
ok $? "adaptive speculation, lookahead 2: the same modes under eager/1, dmdas/2 and lws/2 (the seventh step still waits)"
same a2 a1 && same a3 a1
ok $? "adaptive speculation, lookahead 2: same losses bit for bit across policies and workers"

# ---- a diverging run still stops, with its message ------------------------
ds boom '{"optimizer": {"params": {"lr": 1e6}}, "gradient_clipping": 0}'
train boom boom --steps 8 --lookahead 3 --ncpus 2
[ "$(cat "$TMP/boom.rc")" -ne 0 ] && grep -q "diverged" "$TMP/boom.err"
ok $? "lookahead 3: a loss that is not finite stops the run with its message"
! same boom boom 2>/dev/null; ok $? "... and its losses do not compare equal to themselves"

# ---- the option -------------------------------------------------------------
for bad in 0 9; do
	train "bad$bad" par --lookahead "$bad"
	[ "$(cat "$TMP/bad$bad.rc")" -ne 0 ] && grep -q "lookahead" "$TMP/bad$bad.err"
	ok $? "lookahead $bad is refused, naming the option"
done
done_testing
