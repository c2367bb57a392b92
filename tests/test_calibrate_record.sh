#!/bin/sh
# test_calibrate_record.sh - `stepgraph calibrate` records the job it
# calibrated on (issue 45 item 1): it prints a simulate command that works
# for that job (the model, the length and a --set with a space, quoted),
# the machine file says which job it was, and calibrating another job under
# the same name is refused by name (the earlier files untouched) unless
# --replace; the same job again is allowed. Prints TAP.
set -u
SG_TEST_NAME=calibrate_record
. "${SG_SRCDIR:-.}/tests/test_env.sh"
sg_needs_sim
plan 10
DEF="$SRC/configs/default.json"
M="$TMP/cal/mybox.json"
"$BIN" calibrate "$DEF" --model tiny-qwen3 --max_length 128 --set 'bf16={"enabled": false}' \
	--name mybox --out "$TMP/cal" --steps 12 >"$TMP/c1.out" 2>&1
ok $? "calibrate tiny-qwen3 at 128 tokens with a --set holding a space"
cmd=$(sed -n 's/^  \(stepgraph simulate .*\)$/\1/p' "$TMP/c1.out")
case "$cmd" in
*" --model tiny-qwen3 --max_length 128 --set 'bf16={\"enabled\": false}' --machine $M") r=0 ;;
*) r=1 ;;
esac
ok $r "it prints the simulate command with the job's run options, quoted: $cmd"
"$PY" - "$M" "$cmd" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
assert c["args"] == ["--model", "tiny-qwen3", "--max_length", "128", "--set", 'bf16={"enabled": false}'], c
assert c["model"] == "tiny-qwen3" and c["seq_len"] == 128 and c["micro_batch"] == 1, c
assert c["grad_accum"] == 4 and c["dp_size"] == 1 and c["dtype"] == "f32", c
assert c["simulate"] == sys.argv[2], (c["simulate"], sys.argv[2])
PYEOF
ok $? "the machine file records the job: args, model, shape, dtype and the command"
# the printed command works, on the history (the sizes it calibrated)
eval "\"\$BIN\" ${cmd#stepgraph }" >"$TMP/s.out" 2>"$TMP/s.err"
r=$?
[ $r -eq 0 ] && grep -q "calibrated history models" "$TMP/s.out" &&
	grep -q "^  tiny-qwen3, ZeRO-0, f32, micro-batch 1 x accumulation 4, seq 128" "$TMP/s.out" &&
	! grep -q "lacks task sizes" "$TMP/s.err"
ok $? "that command simulates the calibrated job from its history (exit $r)"

# another job under the same name: refused, by name, nothing touched
sums() { (cd "$TMP/cal" && find . -type f | LC_ALL=C sort | xargs md5sum); }
sums >"$TMP/before.sums"
"$BIN" calibrate "$DEF" --max_length 64 --name mybox --out "$TMP/cal" --steps 12 \
	>"$TMP/c2.out" 2>&1
r=$?
[ $r -ne 0 ] && grep -q "name mybox: .*mybox.json was calibrated on tiny-qwen3, seq 128" "$TMP/c2.out" &&
	grep -q "calibrating tiny-llama, seq 64, .* pick another --name, or --replace" "$TMP/c2.out"
ok $? "another job under the same name is refused, naming both jobs and the ways (exit $r)"
sums | cmp -s - "$TMP/before.sums" && ! grep -q "^calibrating" "$TMP/c2.out"
ok $? "before training: the earlier machine file and models are untouched"
# the same job again: a fresh calibration of it
"$BIN" calibrate "$DEF" --model tiny-qwen3 --max_length 128 --name mybox --out "$TMP/cal" \
	--steps 12 >"$TMP/c3.out" 2>&1
ok $? "the same job again under the same name is calibrated"
# --replace: the other job replaces it
"$BIN" calibrate "$DEF" --max_length 64 --name mybox --out "$TMP/cal" --steps 12 --replace \
	>"$TMP/c4.out" 2>&1
ok $? "--replace calibrates the other job under the name"
"$PY" -c 'import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
assert c["model"] == "tiny-llama" and c["seq_len"] == 64 and c["args"] == ["--max_length", "64"], c' "$M"
ok $? "and the machine file now records that job (--replace is not a run option: not in args)"
# a machine file from before the record (no "model"): the same config is
# the same job, another config is refused
"$PY" - "$M" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
for k in ("args", "model", "seq_len", "micro_batch", "grad_accum", "dp_size", "dtype", "simulate"):
    del m["calibration"][k]
json.dump(m, open(sys.argv[1], "w"))
PYEOF
"$BIN" calibrate "$SRC/configs/deepspeed/zero0-cpu-tiny.json" --name mybox --out "$TMP/cal" \
	--steps 12 >"$TMP/c5.out" 2>&1
r=$?
[ $r -ne 0 ] && grep -q "calibrated on .*default.json (run options not recorded" "$TMP/c5.out"
ok $? "an older machine file: another config under its name is refused too (exit $r)"
