#!/bin/sh
# test_gh200_vs_mi300a.sh - GH200 against MI300A (issue 16): the unified-memory
# fit check of `graph --summary` counts GPU and host bytes once against
# MI300A's one pool (read back from the printed peaks, not from the code's
# sum), the 8B step that does not fit one MI300A fits two ranks of mi300ax2,
# simulate refuses more ranks than a machine has, and
# scripts/gh200_vs_mi300a.sh --quick gives feasible points on every machine
# whose "bound by" is one of the lower bound's words, and its summary says
# where each figure of the two machines comes from. Prints TAP.
set -u
SG_TEST_NAME=gh200_vs_mi300a
. "${SG_SRCDIR:-.}/tests/test_env.sh"
sg_needs_sim
export STEPGRAPH_MODELS_DIR=${STEPGRAPH_MODELS_DIR:-$SRC/models}
export STEPGRAPH_MACHINES_DIR=${STEPGRAPH_MACHINES_DIR:-$SRC/configs/machines}
CONFIG=$SRC/configs/llama-3.1-8b-superoffload.json

# unified: needed = GPU peak + host peak (GiB, one decimal each as printed)
unified_sum() {
	"$PY" - "$1" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
g = float(re.search(r"peak memory, gpu: +([0-9.]+) GiB", t).group(1))
h = float(re.search(r"peak memory, host: ([0-9.]+) GiB", t).group(1))
m = re.search(r"unified memory: ([0-9.]+) GiB needed of ([0-9.]+) GiB: (fits|DOES NOT FIT)", t)
need, cap, verdict = float(m.group(1)), float(m.group(2)), m.group(3)
assert "host memory:" not in t, "a separate host line on unified memory"
assert abs(need - (g + h)) <= 0.15, (need, g, h)
assert abs(cap - 128e9 / 2**30) < 0.05, cap
assert verdict == ("fits" if need <= cap else "DOES NOT FIT"), (need, cap, verdict)
print(verdict)
EOF
}
"$BIN" graph "$CONFIG" --model llama-3.2-3b --machine mi300a --summary >"$TMP/3b.txt" 2>&1
v=$(unified_sum "$TMP/3b.txt")
[ "$v" = fits ]
ok $? "3B on mi300a: GPU + host peaks counted once against 128 GB, and it fits"
"$BIN" graph "$CONFIG" --machine mi300a --summary >"$TMP/8b.txt" 2>&1
v=$(unified_sum "$TMP/8b.txt")
[ "$v" = "DOES NOT FIT" ]
ok $? "8B on one mi300a: GPU + host over 128 GB, does not fit"
"$BIN" graph "$CONFIG" --machine mi300ax2 --dp_size 2 --summary >"$TMP/8b2.txt" 2>&1
v=$(unified_sum "$TMP/8b2.txt")
[ "$v" = fits ]
ok $? "8B over two mi300ax2 ranks (ZeRO-3 shards): fits"
"$BIN" graph "$CONFIG" --machine gh200 --summary >"$TMP/gh.txt" 2>&1
grep -q "^gpu memory: .* fits" "$TMP/gh.txt" && grep -q "^host memory: .* of 447.0 GiB: fits" "$TMP/gh.txt"
ok $? "8B on gh200: GPU and host memory checked separately (480 GB of LPDDR5X)"

"$BIN" simulate "$CONFIG" --machine mi300a --dp_size 2 --steps 1 >"$TMP/dp.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "dp_size 2 on mi300a: the machine has 1 rank" "$TMP/dp.txt"
ok $? "simulate refuses two ranks on one MI300A, naming dp_size"

BIN=$BIN bash "$SRC/scripts/gh200_vs_mi300a.sh" --quick --out "$TMP/out" --jobs 2 >"$TMP/script.txt" 2>&1
ok $? "scripts/gh200_vs_mi300a.sh --quick runs"
"$PY" - "$TMP/out" <<'EOF' >"$TMP/check.txt" 2>&1
import csv, os, sys
out = sys.argv[1]
words = {"GPU compute", "CPU work", "h2d link", "d2h link", "critical path"}
for case, machines in (("3b", ("gh200", "gh200-120gb", "mi300a")), ("8b-2ranks", ("gh200x2", "mi300ax2"))):
    rows = list(csv.DictReader(open(os.path.join(out, case + ".csv"))))
    for m in machines:
        ok = [r for r in rows if r["machine"] == m and r["status"] == "ok"]
        assert ok, f"{case}: no feasible point on {m}"
        for r in ok:
            assert r["bound_by"] in words, r["bound_by"]
            assert float(r["bound_ms"]) > 0 and float(r["step_ms"]) > 0, r
    for ext in ("md", "svg"):
        assert os.path.getsize(os.path.join(out, f"{case}.{ext}")) > 0
summary = open(os.path.join(out, "summary.md")).read()
for m in ("gh200", "gh200-120gb", "mi300a", "gh200x2", "mi300ax2"):
    assert f"| {m} | " in summary, m
print("checked")
EOF
rc=$?
ok $rc "every machine has feasible points, bound_by is a known word, summary.md names each machine"
[ $rc -eq 0 ] || cat "$TMP/check.txt" "$TMP/script.txt" | sed 's/^/# /'
"$PY" - "$TMP/out/summary.md" "$STEPGRAPH_MACHINES_DIR" <<'EOF' >"$TMP/figs.txt" 2>&1
import json, os, sys
t = open(sys.argv[1]).read().split("## Where the figures come from")[1]
gh = json.load(open(os.path.join(sys.argv[2], "gh200.json")))
mi = json.load(open(os.path.join(sys.argv[2], "mi300a.json")))
row = [l for l in t.splitlines() if l.startswith("| best GEMM")][0].split("|")
assert float(row[2]) == gh["gpu"]["kernels"]["gemm_tflops"] and "measured" in row[3], row
assert float(row[4]) == mi["gpu"]["kernels"]["gemm_tflops"] and "derived" in row[5], row
for word in ("measured", "cited", "derived", "assumed"):
    assert word in t, word
EOF
rc=$?
ok $rc "summary.md says which figures of gh200 and mi300a are measured, cited, derived or assumed"
[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/figs.txt"
done_testing
