#!/bin/sh
# test_resume.sh - a run saved at step K and resumed to step N gives the
# losses of the uninterrupted N-step run, bit for bit and finite, for bf16,
# fp16 with dynamic loss scaling while steps overflow (the scaler's scale,
# iteration and hysteresis counters must come back: the skipped steps and
# the scale of every resumed step are compared too), the optimizer offloaded
# to the CPU (configs/deepspeed/zero-offload.json), SuperOffload
# (configs/deepspeed/superoffload.json) and gradient accumulation 3.
# The reference is the uninterrupted run of the same program: what is
# checked is that a checkpoint holds the whole state. Tiny model,
# sequences of 32. Prints TAP.
set -u
SG_TEST_NAME=resume
. "${SG_SRCDIR:-.}/tests/test_env.sh"

. "$SRC/tests/train_lib.sh"

# resume LABEL DSNAME N K [ARGS...]: full run of N steps; K steps saved; the
# remaining N - K resumed from the checkpoint. Checks the resumed losses.
resume() {
	label=$1 cfg=$2 N=$3 K=$4
	shift 4
	train "${label}_full" "$cfg" --steps "$N" "$@"
	train "${label}_a" "$cfg" --steps "$K" --save "$TMP/ck_$label" "$@"
	train "${label}_b" "$cfg" --steps $((N - K)) --load "$TMP/ck_$label" "$@"
	[ "$(cat "$TMP/${label}_b.rc")" -eq 0 ] && grep -q "^Step $((K + 1)) |" "$TMP/${label}_b.out" &&
		same_from "${label}_full" "${label}_b" "$K"
	ok $? "$label: saved at step $K, resumed to $N: steps $((K + 1))-$N as uninterrupted, bit for bit"
	[ "$(cat "$TMP/${label}_b.rc")" -eq 0 ] || sed 's/^/# /' "$TMP/${label}_b.err" | tail -3
}
# scales FULL RESUMED K: the resumed run's (skipped, loss_scale) per step are the full run's
scales() {
	"$PY" - "$TMP/$1.jsonl" "$TMP/$2.jsonl" "$3" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[3]):]
b = [json.loads(l) for l in open(sys.argv[2])]
key = lambda r: (r["step"], r["skipped"], r["loss_scale"])
assert len(a) == len(b) and [key(r) for r in a] == [key(r) for r in b], \
    ([key(r) for r in a], [key(r) for r in b])
PYEOF
}

ds bf16 '{"bf16": {"enabled": true}}'
resume bf16 bf16 6 3
# the save's log: a line as it starts, then the step directory it wrote with
# the size of its files, as os.stat gives them
"$PY" - "$TMP/bf16_a.out" "$TMP/ck_bf16" <<'PYEOF'
import os, re, sys
out, ck = open(sys.argv[1]).read(), sys.argv[2]
d = os.path.join(ck, "step-00000003")
start = out.index("saving checkpoint %s..." % d)
m = re.search(r"^saved checkpoint %s \(([\d.]+) (MB|GB) in [\d.]+ s, \d+ MB/s\)$"
              % re.escape(d), out, re.M)
assert m and m.start() > start, out[-400:]
size = float(m.group(1)) * (1e9 if m.group(2) == "GB" else 1e6)
files = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
assert files > 0 and abs(size - files) <= 0.05e6, (size, files)
PYEOF
ok $? "bf16: the save logs its start, then the step directory and the size of its files"

# fp16, dynamic: 2^22 overflows for several steps; hysteresis 2 and window 2
# make the counters, not only the scale, decide what the next steps do
# (with the tiny model: steps 1-7 overflow, the scale grows at step 11,
# steps 13-14 overflow again).
ds fp16 '{"fp16": {"enabled": true, "initial_scale_power": 22, "hysteresis": 2, "loss_scale_window": 2}}'
resume fp16 fp16 14 3
"$PY" - "$TMP/fp16_full.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sk = [r["skipped"] for r in rows]
assert sum(sk[:3]) >= 1 and not all(sk), sk      # overflows before the save, training after
assert sum(sk[9:]) >= 1, sk                       # and after the second save
scale = [r["loss_scale"] for r in rows]
assert any(b < a for a, b in zip(scale, scale[1:])) and scale[-1] > min(scale), scale
PYEOF
ok $? "fp16: steps overflow before and after the saves, the scale falls and grows"
scales fp16_full fp16_b 3
ok $? "fp16: the run resumed at step 3 skips the same steps with the same loss scales"
# saved after clean steps: the growth window counts from the last overflow
train fp16late_a fp16 --steps 9 --save "$TMP/ck_fp16late"
train fp16late_b fp16 --steps 5 --load "$TMP/ck_fp16late"
same_from fp16_full fp16late_b 9 && scales fp16_full fp16late_b 9
ok $? "fp16: saved at step 9 (after clean steps), steps 10-14 as uninterrupted: losses, skips, scales"
# a checkpoint without the counters (as written before they were saved)
# still loads, with the config's first counters: here that changes the
# trajectory, which shows that the comparison above depends on them
cp -r "$TMP/ck_fp16" "$TMP/ck_fp16old"
"$PY" "$SRC/tests/stfile.py" meta "$TMP/ck_fp16old/$(cat "$TMP/ck_fp16old/latest")/state.safetensors" \
	--drop-prefix loss_scaler_
train fp16old fp16 --steps 11 --load "$TMP/ck_fp16old"
[ "$(cat "$TMP/fp16old.rc")" -eq 0 ] && ! scales fp16_full fp16old 3 2>/dev/null
ok $? "fp16: an older checkpoint (scale only) loads, and its counters' defaults change the run"
# a hysteresis counter the config cannot produce is refused, naming it
cp -r "$TMP/ck_fp16" "$TMP/ck_fp16hyst"
"$PY" "$SRC/tests/stfile.py" meta "$TMP/ck_fp16hyst/$(cat "$TMP/ck_fp16hyst/latest")/state.safetensors" \
	loss_scaler_cur_hysteresis=5
train fp16hyst fp16 --steps 1 --load "$TMP/ck_fp16hyst"
[ "$(cat "$TMP/fp16hyst.rc")" -ne 0 ] && grep -q "loss_scaler_cur_hysteresis 5 is above fp16.hysteresis 2" "$TMP/fp16hyst.err"
ok $? "fp16: a checkpoint whose hysteresis counter exceeds fp16.hysteresis is refused, naming both"

cp "$SRC/configs/deepspeed/zero-offload.json" "$TMP/zoff.json"
resume zero_offload zoff 5 2
cp "$SRC/configs/deepspeed/superoffload.json" "$TMP/so.json"
resume superoffload so 5 2 --ncpus 2
ds ga3 '{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 3}'
resume accumulation ga3 5 2
done_testing
