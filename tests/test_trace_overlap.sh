#!/bin/sh
# test_trace_overlap.sh - tests/trace_overlap.py (the GPU benchmark's reading
# of copies against compute in a run's trace) on a constructed trace whose
# answer is worked out by hand: CUDA busy [0,100) and [200,300) ms, a CPU
# worker [50,250), host-to-device copies [80,120) and [250,350): 140 ms of
# copies, 20 + 50 = 70 under CUDA compute (50.0%), 40 + 0 under CPU work
# (28.6%); the step spans 350 ms, CUDA busy 200 (57.1%); with --kinds, the
# CUDA lane's 200 ms of forward, the CPU lane's 150 of adam_cpu and 50 of
# forward. Prints TAP.
set -u
SRC=${SG_SRCDIR:-.}
. "$SRC/tests/tap_lib.sh"
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip_all "needs python3"
tap_tmpdir trace_overlap
cat >"$TMP/t.json" <<'JSON'
{"traceEvents": [
 {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "CUDA 0"}},
 {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "CPU 0"}},
 {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "link h2d"}},
 {"name": "thread_name", "ph": "M", "pid": 1, "tid": 3, "args": {"name": "critical path"}},
 {"name": "a", "cat": "forward", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 100000},
 {"name": "b", "cat": "forward", "ph": "X", "pid": 1, "tid": 0, "ts": 200000, "dur": 100000},
 {"name": "c", "cat": "adam_cpu", "ph": "X", "pid": 1, "tid": 1, "ts": 50000, "dur": 150000},
 {"name": "c2", "cat": "forward", "ph": "X", "pid": 1, "tid": 1, "ts": 200000, "dur": 50000},
 {"name": "d", "ph": "X", "pid": 1, "tid": 2, "ts": 80000, "dur": 40000},
 {"name": "e", "ph": "X", "pid": 1, "tid": 2, "ts": 250000, "dur": 100000},
 {"name": "f", "ph": "X", "pid": 1, "tid": 3, "ts": 0, "dur": 900000}
]}
JSON
"$PY" "$SRC/tests/trace_overlap.py" "$TMP/t.json" >"$TMP/out" 2>&1
ok $? "reads a constructed trace"
grep -qx "step span 350.0 ms; CUDA workers busy 200.0 ms (57.1%)" "$TMP/out"
ok $? "the step's span (the critical-path lane left out) and the CUDA busy share"
grep -qx "h2d: 2 copies, 140.0 ms; under CUDA compute 70.0 ms (50.0%), under CPU work 40.0 ms (28.6%)" "$TMP/out"
ok $? "the copies' time under CUDA compute and under CPU work"
[ "$(wc -l <"$TMP/out")" -eq 2 ] 
ok $? "no line for a link lane without copies"
# --kinds: the worker lanes' time per node kind and worker type, the most first
"$PY" "$SRC/tests/trace_overlap.py" --kinds "$TMP/t.json" >"$TMP/kinds" 2>&1 &&
	[ "$(tail -n 3 "$TMP/kinds")" = "forward on CUDA workers: 2 tasks, 200.0 ms
adam_cpu on CPU workers: 1 task, 150.0 ms
forward on CPU workers: 1 task, 50.0 ms" ]
ok $? "--kinds: task time per node kind and worker type, the link and critical-path lanes left out"
echo '{"traceEvents": []}' >"$TMP/empty.json"
! "$PY" "$SRC/tests/trace_overlap.py" "$TMP/empty.json" >/dev/null 2>&1
ok $? "a trace without slices: exit 1"
sed 's/^/# /' "$TMP/out"
done_testing
