#!/bin/sh
# test_cli.sh - the stepgraph command as a user runs it: help, graph export in
# every format, summaries, model info, config checks, and bad input that must
# fail with a message and leave existing files untouched. Prints TAP.
set -u
SRC=${SG_SRCDIR:-.}
. "$SRC/tests/tap_lib.sh"
BIN=${SG_BUILDDIR:-.}/stepgraph
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
tap_tmpdir cli
contains() { grep -q -- "$2" "$1"; }
run() { # run NAME ARGS... : stdout to $TMP/NAME.out, stderr to $TMP/NAME.err, status in $TMP/NAME.rc
	name=$1
	shift
	"$BIN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
	echo $? >"$TMP/$name.rc"
}
rc() { cat "$TMP/$1.rc"; }

run help --help
ok "$(rc help)" "--help exits 0"
contains "$TMP/help.out" "graph CONFIG"; ok $? "--help lists the graph command"
run graphhelp graph --help
contains "$TMP/graphhelp.out" "--max_length"; ok $? "graph --help lists the run options"
run version version
contains "$TMP/version.out" "StarPU 1.4"; ok $? "version names StarPU 1.4"

run summary graph "$SRC/configs/default.json" --summary
ok "$(rc summary)" "graph --summary on the default config"
contains "$TMP/summary.out" "forward"; ok $? "summary counts forward nodes"
contains "$TMP/summary.out" "critical path"; ok $? "summary gives the critical path"
contains "$TMP/summary.out" "peak memory, gpu"; ok $? "summary gives peak memory per device class"

run json graph "$SRC/configs/llama-3.1-8b-superoffload.json" --format json -o "$TMP/g.json"
ok "$(rc json)" "graph --format json -o FILE"
if [ -x "$PY" ]; then
	"$PY" - "$TMP/g.json" >"$TMP/py.out" 2>&1 <<'PYEOF'
import json, sys
g = json.load(open(sys.argv[1]))
kinds = {n["kind"] for n in g["nodes"]}
need = {"allgather", "forward", "recompute", "backward", "reduce_scatter", "d2h", "cast",
        "adam_cpu", "adam_gpu", "validate", "h2d", "grad_norm"}
assert need <= kinds, need - kinds
ids = {n["id"] for n in g["nodes"]}
assert all(a in ids and b in ids and a < b for a, b in g["edges"])
# 17 CPU sub-groups (each in optimizer tiles for the config's gh200: one adam_cpu per chunk)
cpu = {n["subgroup"] for n in g["nodes"] if n["kind"] == "adam_cpu"}
assert len(cpu) == 17, sorted(cpu)
print("ok")
PYEOF
	ok $? "SuperOffload JSON: valid, every node kind present, edges forward, 17 CPU sub-groups"
else
	skip "no python3"
fi

if [ -n "${DOT:-}" ]; then
	run svg graph "$SRC/configs/default.json" --format svg -o "$TMP/g.svg"
	ok "$(rc svg)" "graph --format svg"
	head -c 2000 "$TMP/g.svg" | grep -q "<svg"; ok $? "the SVG file is an SVG"
else
	skip "no Graphviz" 2
fi
run dot graph "$SRC/configs/default.json"
contains "$TMP/dot.out" "digraph step"; ok $? "DOT on standard output by default"
contains "$TMP/dot.out" "rank=same" && contains "$TMP/dot.out" 'label="layer0", shape=plaintext'
ok $? "DOT is laid out with a column (rank) per layer, headed by its name"

# run options override the config
run seq128 graph "$SRC/configs/default.json" --format json --max_length 128 -o "$TMP/s128.json"
run seq256 graph "$SRC/configs/default.json" --format json --max-length 256 -o "$TMP/s256.json"
if [ "$(rc seq128)" -eq 0 ] && [ "$(rc seq256)" -eq 0 ] && ! cmp -s "$TMP/s128.json" "$TMP/s256.json"; then r=0; else r=1; fi
ok $r "--max_length overrides the run config"
run ckpt graph "$SRC/configs/default.json" --summary --activation_checkpointing
contains "$TMP/ckpt.out" "recompute"; ok $? "--activation_checkpointing adds recompute nodes"

# bad input: a clear message, non-zero status, existing output untouched
echo "keep me" >"$TMP/existing.json"
run bad graph "$SRC/tests/data/bad-configs/stage-4.json" --format json -o "$TMP/existing.json"
[ "$(rc bad)" -ne 0 ]; ok $? "a bad config fails"
contains "$TMP/bad.err" "zero_optimization.stage"; ok $? "the message names the JSON path"
[ "$(cat "$TMP/existing.json")" = "keep me" ]; ok $? "the existing output file is untouched"
[ -z "$(ls "$TMP" | grep 'existing.json.tmp')" ]; ok $? "no temporary file is left behind"
run missing graph "$TMP/does-not-exist.json"
[ "$(rc missing)" -ne 0 ] && contains "$TMP/missing.err" "does-not-exist.json"; ok $? "a missing config is named"
run badflag graph "$SRC/configs/default.json" --no-such-option 3
[ "$(rc badflag)" -ne 0 ] && contains "$TMP/badflag.err" "no-such-option"; ok $? "an unknown flag is named"
run badfmt graph "$SRC/configs/default.json" --format png
[ "$(rc badfmt)" -ne 0 ] && contains "$TMP/badfmt.err" "png"; ok $? "an unknown format is refused"
run badseq graph "$SRC/configs/default.json" --max_length -5
[ "$(rc badseq)" -ne 0 ] && contains "$TMP/badseq.err" "max_length"; ok $? "a bad run option value is refused"
run noarg graph
[ "$(rc noarg)" -ne 0 ] && contains "$TMP/noarg.err" "CONFIG"; ok $? "graph without CONFIG says what is missing"

# models
run info model info llama-3.1-8b
ok "$(rc info)" "model info llama-3.1-8b"
contains "$TMP/info.out" "8030261248\|8,030,261,248"; ok $? "model info prints the published total"
run moe model info gpt-oss-20b
contains "$TMP/moe.out" "active"; ok $? "model info of a MoE prints active parameters"
run list model list
[ "$(grep -c -E 'llama|qwen|phi|gpt-oss|seed|tiny' "$TMP/list.out")" -ge 10 ]; ok $? "model list shows the 10 shipped models"
run nomodel model info no-such-model
[ "$(rc nomodel)" -ne 0 ] && contains "$TMP/nomodel.err" "no-such-model"; ok $? "an unknown model is named"

# config check
run cfg config "$SRC/configs/llama-3.1-8b-superoffload.json"
ok "$(rc cfg)" "config on the SuperOffload run config"
contains "$TMP/cfg.out" "sub-groups"; ok $? "config prints the sub-group layout"

# strict inputs: `config` refuses what `run` and `graph` refuse, with the same message
for f in run-max-length-huge run-machine-auto; do
	for cmd in config graph run; do
		run "$f.$cmd" $cmd "$SRC/tests/data/bad-configs/$f.json" --steps 1
	done
	[ "$(rc $f.config)" -ne 0 ] && [ "$(rc $f.graph)" -ne 0 ] && [ "$(rc $f.run)" -ne 0 ] &&
		cmp -s "$TMP/$f.config.err" "$TMP/$f.graph.err" && cmp -s "$TMP/$f.config.err" "$TMP/$f.run.err"
	ok $? "$f: config, graph and run all refuse it with one message"
done
contains "$TMP/run-max-length-huge.config.err" "max_length: 2147483648 is out of range (expected 0 < max_length <= 16777216)"
ok $? "config names max_length 2147483648 and the limit"
contains "$TMP/run-machine-auto.config.err" 'machine: "auto" is not supported'
ok $? "config refuses machine \"auto\""
# a Hugging Face Trainer config: its "auto" values are filled as the Trainer
# fills them (tests/test_auto_config.sh has the rules); the number of updates
# is the one it cannot know alone
HF="$SRC/tests/data/bad-configs/hf-trainer-zero3.json"
run hfauto config "$HF"
[ "$(rc hfauto)" -ne 0 ] && contains "$TMP/hfauto.err" 'scheduler.params.total_num_steps: "auto"' &&
	contains "$TMP/hfauto.err" "set run option steps (--steps N)"
ok $? "an HF Trainer config without --steps: the error names total_num_steps and --steps"
run hfset config "$HF" --set train_batch_size=8 --set train_micro_batch_size_per_gpu=4 \
	--set gradient_accumulation_steps=2 --set gradient_clipping=1.0 --set fp16.enabled=false \
	--set bf16.enabled=true --set optimizer.params.lr=2e-5 --set 'optimizer.params.betas=[0.9,0.95]' \
	--set optimizer.params.eps=1e-8 --set optimizer.params.weight_decay=0.1 \
	--set scheduler.params.warmup_min_lr=0 --set scheduler.params.warmup_max_lr=2e-5 \
	--set scheduler.params.warmup_num_steps=100 --set scheduler.params.total_num_steps=1000 \
	--set zero_optimization.reduce_bucket_size=4194304 \
	--set zero_optimization.stage3_prefetch_bucket_size=3774873 \
	--set zero_optimization.stage3_param_persistence_threshold=20480
[ "$(rc hfset)" -eq 0 ] && contains "$TMP/hfset.out" "micro 4 x accumulation 2" &&
	contains "$TMP/hfset.out" "WarmupDecayLR: log warm-up over 100 updates from 0 to 2e-05" &&
	! contains "$TMP/hfset.out" "auto values:"
ok $? "the same config with each \"auto\" given by --set loads, nothing left to fill ($(head -c 200 "$TMP/hfset.err"))"
run hfsteps config "$HF" --steps 100
[ "$(rc hfsteps)" -eq 0 ] && contains "$TMP/hfsteps.out" "auto values:      17 filled"
ok $? "the same config with --steps: its 17 \"auto\" values filled ($(head -c 200 "$TMP/hfsteps.err"))"

for cmd in config graph; do
	run "long.$cmd" $cmd "$SRC/configs/default.json" --max_length 2048
	[ "$(rc long.$cmd)" -ne 0 ] &&
		contains "$TMP/long.$cmd.err" "max_length 2048 is longer than the 1024 positions of model tiny-llama"
	ok $? "$cmd refuses max_length 2048 > max_position_embeddings 1024"
done
for cmd in config graph; do
	run "accum.$cmd" $cmd "$SRC/configs/default.json" --set gradient_accumulation_steps=5000 --set train_batch_size=5000
done
[ "$(rc accum.config)" -ne 0 ] && cmp -s "$TMP/accum.config.err" "$TMP/accum.graph.err" &&
	contains "$TMP/accum.config.err" "at most 4096 micro-steps"
ok $? "config applies the step compiler's checks, as graph does"
run zero config "$SRC/tests/data/bad-configs/json-leading-zero.json"
[ "$(rc zero)" -ne 0 ] && contains "$TMP/zero.err" "invalid JSON at line 2, column 39: number '01' has a leading zero"
ok $? "config refuses a leading zero with line and column"
run setzero config "$SRC/configs/default.json" --set train_micro_batch_size_per_gpu=01
[ "$(rc setzero)" -ne 0 ] && contains "$TMP/setzero.err" "--set train_micro_batch_size_per_gpu=01: invalid JSON at line 1, column 1"
ok $? "config refuses --set KEY=01"
sed 's/"name": "tiny-llama"/"name": "tiny\\u0000junk"/' "$SRC/models/tiny-llama.json" >"$TMP/nul-model.json"
run nulmodel model info "$TMP/nul-model.json"
[ "$(rc nulmodel)" -ne 0 ] && contains "$TMP/nulmodel.err" "C strings cannot hold it"
ok $? "model info refuses a name with \\u0000"

# the GPU side of the build, and a CUDA worker asked for where there is none
contains "$TMP/version.out" "CUDA: "; ok $? "version says whether the build has CUDA"
if grep -q "CUDA devices: 0\|CUDA: no" "$TMP/version.out"; then
	run nogpu run --ncuda 1 --steps 1 --max_length 32
	[ "$(rc nogpu)" -ne 0 ] && contains "$TMP/nogpu.err" "ncuda 1: StarPU started 0 CUDA workers"
	ok $? "run --ncuda 1 without a CUDA device is refused, naming ncuda"
fi

# A metrics file that cannot be written fails the run, naming the file
# (/dev/full accepts the open and fails every write with ENOSPC).
if [ -w /dev/full ]; then
	run full run "$SRC/configs/default.json" --steps 2 --max_length 32 --metrics /dev/full
	[ "$(rc full)" -ne 0 ] && contains "$TMP/full.err" "/dev/full"
	ok $? "run with an unwritable --metrics file exits non-zero, naming the file"
fi

done_testing
