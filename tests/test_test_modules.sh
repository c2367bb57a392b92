#!/bin/sh
# test_test_modules.sh - the Python modules the shell tests share, on files
# written here: tests/sglog.py (metrics files: same, learns, losses),
# tests/stfile.py (safetensors: meta, same-tensors) and tests/tasklog.py
# (STEPGRAPH_TASK_LOG's task list: kinds, accesses), each check with a
# control that must fail, so a module that accepts everything is caught.
# Prints TAP.
set -u
SG_TEST_NAME=test_modules
. "${SG_SRCDIR:-.}/tests/test_env.sh"
L="$SRC/tests/sglog.py"
ST="$SRC/tests/stfile.py"
m() { printf '%s\n' "$@" >"$TMP/$name.jsonl"; }
name=a; m '{"step": 1, "loss": 2.5, "grad_norm": 1.0}' '{"step": 2, "loss": 2.25, "grad_norm": 0.5}'
name=b; m '{"step": 1, "loss": 2.5, "grad_norm": 1.0}' '{"step": 2, "loss": 2.2500000000000004, "grad_norm": 0.5}'
name=g; m '{"step": 1, "loss": 2.5, "grad_norm": 1.0}' '{"step": 2, "loss": 2.25, "grad_norm": 0.75}'
name=nul; m '{"step": 1, "loss": 2.5}' '{"step": 2, "loss": null}'
name=nan; m '{"step": 1, "loss": NaN}' '{"step": 2, "loss": NaN}'
name=tail; m '{"step": 2, "loss": 2.25, "grad_norm": 0.5}'

"$PY" "$L" same "$TMP/a.jsonl" "$TMP/a.jsonl" --steps 2 && ! "$PY" "$L" same "$TMP/a.jsonl" "$TMP/b.jsonl" 2>/dev/null
ok $? "sglog same: a file equals itself; one ulp apart is not bit for bit"
"$PY" "$L" same "$TMP/a.jsonl" "$TMP/b.jsonl" --rtol 1e-12 &&
	! "$PY" "$L" same "$TMP/a.jsonl" "$TMP/b.jsonl" --rtol 1e-17 2>/dev/null
ok $? "sglog same --rtol: within 1e-12 relative, not within 1e-17"
! "$PY" "$L" same "$TMP/nul.jsonl" "$TMP/nul.jsonl" 2>/dev/null && ! "$PY" "$L" same "$TMP/nan.jsonl" "$TMP/nan.jsonl" 2>/dev/null
ok $? "sglog same: identical files with a null or NaN loss do not compare equal"
"$PY" "$L" same "$TMP/a.jsonl" "$TMP/tail.jsonl" --skip 1 && ! "$PY" "$L" same "$TMP/a.jsonl" "$TMP/tail.jsonl" 2>/dev/null &&
	! "$PY" "$L" same "$TMP/a.jsonl" "$TMP/a.jsonl" --steps 3 2>/dev/null
ok $? "sglog same --skip and --steps: a resumed run's rows against the later rows; a count that differs fails"
"$PY" "$L" same "$TMP/a.jsonl" "$TMP/g.jsonl" && ! "$PY" "$L" same "$TMP/a.jsonl" "$TMP/g.jsonl" --keys loss,grad_norm 2>"$TMP/g.err" &&
	grep -q "row 2: grad_norm 0.75" "$TMP/g.err"
ok $? "sglog same --keys: gradient norms compared too, the difference named ($(cat "$TMP/g.err"))"
"$PY" "$L" learns "$TMP/a.jsonl" --steps 2 --window 1 --drop 0.2 &&
	! "$PY" "$L" learns "$TMP/a.jsonl" --steps 2 --window 1 --drop 0.3 2>/dev/null &&
	! "$PY" "$L" learns "$TMP/a.jsonl" --steps 3 --window 1 2>/dev/null
ok $? "sglog learns: a fall of 0.25 is more than 0.2, not more than 0.3; a step count that differs fails"
[ "$("$PY" "$L" losses "$TMP/b.jsonl")" = "2.5 2.2500000000000004" ]
ok $? "sglog losses: every loss with its 17 digits"

# a safetensors file of two F32 tensors, written with struct here
"$PY" - "$TMP/x.safetensors" "$TMP/y.safetensors" <<'PYEOF'
import json, struct, sys
def put(path, b_values):
    h = {"__metadata__": {"step": "3", "loss_scaler_scale": "1024", "loss_scaler_good": "2"},
         "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + struct.pack("<2f", 1, 2) + struct.pack("<2f", *b_values))
put(sys.argv[1], (3, 4))
put(sys.argv[2], (3, 5))
PYEOF
meta() { "$PY" -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
print(n % 8, json.dumps(json.loads(b[8:8 + n])["__metadata__"], sort_keys=True), len(b) - 8 - n)' "$1"; }
cp "$TMP/x.safetensors" "$TMP/x0.safetensors"
"$PY" "$ST" meta "$TMP/x.safetensors" optimizer=lion step=- --drop-prefix loss_scaler_ &&
	[ "$(meta "$TMP/x.safetensors")" = '0 {"optimizer": "lion"} 16' ]
ok $? "stfile meta: a key set, one removed, a prefix dropped; header padded to 8 bytes, the 16 data bytes kept"
! "$PY" "$ST" meta "$TMP/x.safetensors" step=- 2>/dev/null && [ "$(meta "$TMP/x.safetensors")" = '0 {"optimizer": "lion"} 16' ]
ok $? "stfile meta: removing a key that is not there fails and leaves the file"
"$PY" "$ST" same-tensors "$TMP/x.safetensors" "$TMP/x0.safetensors" &&
	! "$PY" "$ST" same-tensors "$TMP/x0.safetensors" "$TMP/y.safetensors" 2>/dev/null
ok $? "stfile same-tensors: the metadata aside the same bytes; one element changed differs"

# a task list as STEPGRAPH_TASK_LOG writes it (tab-separated)
printf 'fwd.layer0.mb0\tsg_forward\t0\tany\t0\tw.0:R,act.1.mb0:W\nfwd.layer1.mb0\tsg_forward\t0\tany\t0\tw.1:R,act.1.mb0:R,act.2.mb0:W\nadam.sg0\tsg_adam\t1\tcpu\t0\tp.0:RW\n' \
	>"$TMP/tasks.txt"
"$PY" "$SRC/tests/tasklog.py" kinds "$TMP/tasks.txt" sg_forward=2 sg_adam=1 sg_recompute=0 >/dev/null &&
	! "$PY" "$SRC/tests/tasklog.py" kinds "$TMP/tasks.txt" sg_forward=3 >/dev/null 2>&1
ok $? "tasklog kinds: 2 forwards, 1 Adam, no recompute; 3 forwards fails"
PYTHONPATH="$SRC/tests" "$PY" -c 'import sys
from tasklog import accesses, rows
a = accesses(rows(sys.argv[1]))
assert a["fwd.layer1.mb0"] == {"w.1": "R", "act.1.mb0": "R", "act.2.mb0": "W"}, a
assert a["adam.sg0"] == {"p.0": "RW"} and len(a) == 3, a' "$TMP/tasks.txt"
ok $? "tasklog accesses: each task's buffers and their modes"
done_testing
