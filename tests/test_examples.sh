#!/bin/sh
# test_examples.sh - every examples/*/run.sh at its reduced size
# (EXAMPLE_SIZE=ci), into a temporary directory, and what each must produce:
# finite losses, SVG that parses as XML, graph JSON whose node counts grow
# from stage 0 to SuperOffload, a Chrome trace, a tune table with every
# point simulated, parameter offload's table across three machines, DeepSpeed's CIFAR config giving the same fp32 losses at
# every ZeRO stage, and (when the tokenizers package is there) the
# fine-tuned export's validation loss agreeing between stepgraph and
# transformers (the example itself fails otherwise); DeepSpeedExamples'
# SuperOffload fine-tune with its config unchanged: the validation loss
# (run option eval_data) falling, and (with transformers) the export
# reloaded and answering a prompt. Prints TAP.
set -u
SG_TEST_NAME=ex
. "${SG_SRCDIR:-.}/tests/test_env.sh"
export EXAMPLE_SIZE=ci STEPGRAPH=$(cd "$(dirname "$BIN")" && pwd)/stepgraph
plan 15
example() { # NAME: runs it, output in $TMP/NAME, log in $TMP/NAME.log, status in $TMP/NAME.rc
	OUT=$TMP/$1 STARPU_HOME=$TMP/$1-starpu bash "$SRC/examples/$1/run.sh" >"$TMP/$1.log" 2>&1
	echo $? >"$TMP/$1.rc"
	[ "$(cat "$TMP/$1.rc")" -eq 0 ] || [ "$(cat "$TMP/$1.rc")" -eq 77 ] || tail -5 "$TMP/$1.log" | sed 's/^/# /'
}
xml_ok() { "$PY" -c 'import sys, xml.dom.minidom as m; [m.parse(f) for f in sys.argv[1:]]' "$@" 2>/dev/null; }
finite() { "$PY" -c 'import json, math, sys
for f in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f)]
    assert rows and all(isinstance(r["loss"], float) and math.isfinite(r["loss"]) for r in rows), f' "$@"; }

example train-from-config
[ "$(cat "$TMP/train-from-config.rc")" -eq 0 ] &&
	finite "$TMP/train-from-config/default.jsonl" "$TMP/train-from-config/superoffload.jsonl"
ok $? "train-from-config: the default job and ZeRO-3 SuperOffload train to finite losses"
xml_ok "$TMP/train-from-config/metrics.svg"
ok $? "train-from-config: the metrics plot is well-formed SVG"

example visualize
d=$TMP/visualize
[ "$(cat "$TMP/visualize.rc")" -eq 0 ] && xml_ok "$d/zero0.svg" "$d/zero3.svg" "$d/superoffload.svg"
ok $? "visualize: three graphs drawn as well-formed SVG"
"$PY" - "$d" <<'PYEOF'
import json, sys
d = sys.argv[1]
count = {c: len(json.load(open("%s/%s.json" % (d, c)))["nodes"]) for c in ("zero0", "zero3", "superoffload")}
kinds = {n["kind"] for n in json.load(open(d + "/superoffload.json"))["nodes"]}
assert count["zero0"] < count["zero3"] < count["superoffload"], count
assert {"allgather", "d2h", "h2d", "adam_cpu"} <= kinds, kinds
PYEOF
ok $? "visualize: stage 3 adds all-gathers, SuperOffload host copies and CPU Adam (graph JSON)"
"$PY" -c 'import json,sys; t=json.load(open(sys.argv[1])); assert len(t["traceEvents"]) > 10' "$d/trace.json" 2>/dev/null
ok $? "visualize: the Chrome trace of a real step has its events"

example gh200-vs-mi300a
d=$TMP/gh200-vs-mi300a
[ "$(cat "$TMP/gh200-vs-mi300a.rc")" -eq 0 ] && xml_ok "$d/tune.svg" &&
	"$PY" - "$d/tune.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 8 and {r["machine"] for r in rows} == {"gh200", "mi300a"}, rows
assert all(r["status"] == "ok" and float(r["step_ms"]) > 0 for r in rows), rows
PYEOF
ok $? "gh200-vs-mi300a: 8 simulated points on both machines, a plot and a table"

example param-offload
d=$TMP/param-offload
[ "$(cat "$TMP/param-offload.rc")" -eq 0 ] && "$PY" - "$d" <<'PYEOF'
import csv, re, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/tune.csv")))
assert len(rows) == 6 and all(r["status"] == "ok" and float(r["step_ms"]) > 0 for r in rows), rows
def largest(m, op):
    t = open("%s/fit-%s-%s.txt" % (d, m, op)).read()
    return float(re.search(r"^largest that fits: .*, ([0-9.]+) B parameters", t, re.M).group(1))
# the weights leave the GPU of a machine with its own GPU memory; on one
# memory shared by CPU and GPU nothing is freed
assert largest("gh200", "cpu") > largest("gh200", "none"), "gh200"
assert largest("h100-pcie", "cpu") > largest("h100-pcie", "none"), "h100-pcie"
assert largest("mi300a", "cpu") == largest("mi300a", "none"), "mi300a"
PYEOF
ok $? "param-offload: 6 simulated points; larger models fit gh200 and h100-pcie with the parameters offloaded, the same on mi300a"

example deepspeed-configs
d=$TMP/deepspeed-configs
[ "$(cat "$TMP/deepspeed-configs.rc")" -eq 0 ] && finite "$d"/*.jsonl && [ "$(ls "$d"/*.jsonl | wc -l)" -eq 19 ]
ok $? "deepspeed-configs: DeepSpeed's CIFAR config x 4 stages x 3 precisions, x 3 other schedulers, x Lion and Adagrad, ZeRO-3 offloading everything, and SuperOffload's: 19 runs, finite losses"
"$PY" - "$d" <<'PYEOF'
import json, sys
lr = lambda n: [json.loads(l)["lr"] for l in open("%s/cifar-%s.jsonl" % (sys.argv[1], n))]
assert lr("cosine")[0] == 0.0, lr("cosine")
assert abs(lr("onecycle")[0] - 1e-4) < 1e-9 and abs(lr("rangetest")[0] - 1e-4) < 1e-9
assert max(lr("onecycle")) > 5e-4 and lr("rangetest")[-1] > lr("rangetest")[0]
PYEOF
ok $? "deepspeed-configs: the --set schedulers reach the run (WarmupCosineLR's first lr 0, OneCycle and LRRangeTest from 1e-4 and rising)"
"$PY" - "$d" <<'PYEOF'
import json, sys
d = sys.argv[1]
loss = lambda s, p: [json.loads(l)["loss"] for l in open("%s/cifar-stage%d-%s.jsonl" % (d, s, p))]
for p in ("fp32", "bf16"):
    assert all(loss(s, p) == loss(0, p) for s in (1, 2, 3)), p
PYEOF
ok $? "deepspeed-configs: stages 0-3 give the same fp32 and bf16 losses bit for bit on one rank"
grep -q "unknown key bf16.loss_scale_window ignored" "$TMP/deepspeed-configs.log"
ok $? "deepspeed-configs: keys stepgraph does not read are named in warnings, not errors"

example finetune-hf
case "$(cat "$TMP/finetune-hf.rc")" in
0) grep -q "validation loss over" "$TMP/finetune-hf.log" || grep -q "validation loss by stepgraph only" "$TMP/finetune-hf.log"
	ok $? "finetune-hf: tokenize, pre-train, fine-tune, export sharded, reload (and agree with transformers when installed)" ;;
77) skip "finetune-hf: $(tail -1 "$TMP/finetune-hf.log")" ;;
*) ok 1 "finetune-hf: tokenize, pre-train, fine-tune, export sharded, reload" ;;
esac

example two-ranks
case "$(cat "$TMP/two-ranks.rc")" in
0) d=$TMP/two-ranks
	finite "$d/one-rank.jsonl" "$d/two-ranks.jsonl" "$d/resumed.jsonl" &&
		[ -f "$d/ckpt/$(cat "$d/ckpt/latest")/optim.rank1-of-2.safetensors" ] &&
		grep -q "largest relative difference" "$TMP/two-ranks.log"
	ok $? "two-ranks: 2 ranks then 1 rank resumed from their checkpoint give 1 rank's losses" ;;
77) skip "two-ranks: $(tail -1 "$TMP/two-ranks.log")" ;;
*) ok 1 "two-ranks: 2 ranks then 1 rank resumed from their checkpoint give 1 rank's losses" ;;
esac

example finetune-superoffload
d=$TMP/finetune-superoffload
case "$(cat "$TMP/finetune-superoffload.rc")" in
0) "$PY" - "$d/finetune.jsonl" <<'PYEOF'
import json, sys
ev = [r for r in map(json.loads, open(sys.argv[1])) if "eval_loss" in r]
assert [r["step"] for r in ev] == [8, 16, 24], ev
assert ev[0]["eval_loss"] > ev[1]["eval_loss"] > ev[2]["eval_loss"] and ev[0]["eval_tokens"] > 0, ev
PYEOF
	ok $? "finetune-superoffload: the SuperOffload config unchanged on instruction shards; the validation loss falls at steps 8, 16, 24"
	if grep -q "^transformers reload: skipped" "$TMP/finetune-superoffload.log"; then
		n=$((n + 1)); echo "ok $n # SKIP finetune-superoffload: $(grep "^transformers reload: skipped" "$TMP/finetune-superoffload.log")"
	else
		grep -q "^validation loss of the export: transformers" "$TMP/finetune-superoffload.log" &&
			grep -q "^greedy answer: " "$TMP/finetune-superoffload.log"
		ok $? "finetune-superoffload: the export reloads in transformers (its validation loss within 2% of stepgraph's) and answers a held-out prompt"
	fi ;;
77) for i in 1 2; do n=$((n + 1)); echo "ok $n # SKIP finetune-superoffload: $(tail -1 "$TMP/finetune-superoffload.log")"; done ;;
*) ok 1 "finetune-superoffload: fine-tune, validation loss falling"
	ok 1 "finetune-superoffload: the export reloaded in transformers" ;;
esac
