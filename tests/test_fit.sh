#!/bin/sh
# test_fit.sh - `stepgraph fit`: the largest Llama-shaped model whose step
# fits a machine.
#
# A case decided by hand: ZeRO stage 0, fp32, Adam, no offload, sequences of
# 16 tokens. The GPU then holds weights, Adam's m and v (persistent, 12 B a
# parameter) and, at the end of the backward, every fp32 gradient (4 B a
# parameter) plus the optimizer's 4 B temporary of the largest unit (the
# embedding, V x H); activations of 16 tokens are a few MB. So the step needs
# 16 P + 4 V H bytes. Parameters P are counted here from the shape rule
# written again in python (Meta's FFN rule, Llama 3's published depths),
# not by stepgraph. The machine's GPU gets 16 P + 4 V H of hidden 3072 with
# 10 layers plus half a layer: width 2048 (16 layers) fits, width 3072 with
# the rule's 28 layers does not, and the deepest model at 3072 that fits has
# 10 layers. Then: the answer written with --write-model fits by `graph
# --summary` and one more layer does not; the widest candidate fitting is
# said; nothing fitting is said; bad input is refused with a message.
# Prints TAP.
set -u
SG_TEST_NAME=fit
. "${SG_SRCDIR:-.}/tests/test_env.sh"
# machine NAME GPU_BYTES: gh200 with that much GPU memory and 10 TB of host memory
machine() {
	"$PY" - "$SRC/configs/machines/gh200.json" "$TMP/$1.json" "$1" "$2" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = sys.argv[3]
m["gpu"]["memory_gb"] = int(sys.argv[4]) / 1e9
m["cpu"]["memory_gb"] = 10000
json.dump(m, open(sys.argv[2], "w"))
PYEOF
}
cat >"$TMP/ds0.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}
JSON
# the rule, independently: params and the stage-0 fp32 bytes of (hidden, layers)
GPU=$("$PY" - <<'PYEOF'
V = 128256
def ffn(h):  # llama3 model.py: 2/3 of 4h, times ffn_dim_multiplier, up to a multiple of 1024
    f = int((1.2 if h >= 16384 else 1.3) * (2 * 4 * h // 3))
    return -(-f // 1024) * 1024
def params(h, layers):
    kv = 8 * 128
    layer = h * h * 2 + h * kv * 2 + 3 * h * ffn(h) + 2 * h  # q, o, k, v, MLP, two norms
    return layers * layer + 2 * V * h + h  # embedding, lm_head, final norm
def need(h, layers):
    return 16 * params(h, layers) + 4 * V * h
assert ffn(4096) == 14336 and ffn(8192) == 28672 and ffn(16384) == 53248
assert params(4096, 32) == 8030261248  # Llama 3.1 8B
half_layer = (need(3072, 11) - need(3072, 10)) // 2
assert need(2048, 16) < need(3072, 10) < need(3072, 28)
print(need(3072, 10) + half_layer)
PYEOF
)
ok $? "the hand arithmetic: GPU memory for hidden 3072, 10.5 layers = $GPU bytes"
machine small "$GPU"
"$BIN" fit "$TMP/ds0.json" --machine "$TMP/small.json" --max_length 16 --max-hidden 8192 \
	--write-model "$TMP/best.json" >"$TMP/fit.out" 2>"$TMP/fit.err"
ok $? "fit runs"
grep -q "^largest that fits: llama-scaled-h3072-l10, " "$TMP/fit.out"
ok $? "the answer is hidden 3072 with 10 layers, as by hand"
grep -Eq "^ +2048 +16  .* yes " "$TMP/fit.out" && grep -Eq "^ +3072 +28  .* no " "$TMP/fit.out" &&
	grep -Eq "^ +3072 +11\* .* no " "$TMP/fit.out"
ok $? "the table: 2048 x 16 fits; 3072 x 28 and 3072 x 11 do not"
grep -q "stepgraph fit: hidden 3072, 10 layers" "$TMP/fit.err"
ok $? "progress lines on standard error"
[ -s "$TMP/best.json" ] && grep -q '"num_hidden_layers":	10' "$TMP/best.json"
ok $? "--write-model writes the answer as a config.json"
"$BIN" graph "$TMP/ds0.json" --machine "$TMP/small.json" --max_length 16 --model "$TMP/best.json" \
	--summary 2>/dev/null | grep -q "^gpu memory: .*: fits"
ok $? "graph --summary of the answer: fits"
sed 's/"num_hidden_layers":	10/"num_hidden_layers":	11/' "$TMP/best.json" >"$TMP/plus1.json"
"$BIN" graph "$TMP/ds0.json" --machine "$TMP/small.json" --max_length 16 --model "$TMP/plus1.json" \
	--summary 2>/dev/null | grep -q "^gpu memory: .*DOES NOT FIT"
ok $? "graph --summary of the answer with one more layer: does not fit"

machine big 1000000000000000
"$BIN" fit "$TMP/ds0.json" --machine "$TMP/big.json" --max_length 16 --max-hidden 4096 \
	>"$TMP/big.out" 2>/dev/null &&
	grep -q "^largest that fits: llama-scaled-h4096-l32, 8.03 B" "$TMP/big.out" &&
	grep -q "raise --max-hidden" "$TMP/big.out"
ok $? "everything fits: the widest searched (Llama 3.1 8B's shape), and a hint to search wider"
machine tiny 1000000000
"$BIN" fit "$TMP/ds0.json" --machine "$TMP/tiny.json" --max_length 16 >"$TMP/tiny.out" 2>/dev/null &&
	grep -q "^none fits" "$TMP/tiny.out"
ok $? "nothing fits 1 GB: said so"
"$BIN" fit "$TMP/ds0.json" --machine "$TMP/tiny.json" --max_length 16 \
	--write-model "$TMP/none.json" >/dev/null 2>"$TMP/none.err"
[ $? -ne 0 ] && ! [ -e "$TMP/none.json" ] && grep -q "no model fits" "$TMP/none.err"
ok $? "nothing fits with --write-model: an error, no file"

# the whole range --help allows: candidates whose optimizer state alone exceeds
# the machine (Adam: 12 bytes per parameter) are not compiled but reported as not fitting
# (up to 65536 the search used to abort on the compiler's chunk limit), and the
# answer is the one of the default range
SO8="$SRC/configs/llama-3.1-8b-superoffload.json"
"$BIN" fit "$SO8" --machine gh200 >"$TMP/def.out" 2>/dev/null &&
	"$BIN" fit "$SO8" --machine gh200 --max-hidden 65536 >"$TMP/wide.out" 2>"$TMP/wide.err" &&
	grep -q '^  65536 .* no .*(optimizer state > memory)' "$TMP/wide.out" &&
	grep -q "hidden 65536.*does not fit: the optimizer's fp32 state alone is [0-9.]* GiB per rank" "$TMP/wide.err" &&
	[ "$(grep '^largest that fits' "$TMP/def.out")" = "$(grep '^largest that fits' "$TMP/wide.out")" ] &&
	[ -n "$(grep '^largest that fits' "$TMP/def.out")" ]
ok $? "--max-hidden 65536: the widest candidates are too large for Adam's state alone, not fitting; the same answer as the default range"
# Lion keeps one state array where Adam keeps two: its state is 8 bytes per
# parameter against 12 (the same candidate's figure is 2/3 of Adam's), and
# the largest model that fits is at least as large
"$BIN" fit "$SO8" --machine gh200 --max-hidden 65536 --set 'optimizer={"type": "Lion"}' \
	>"$TMP/lion.out" 2>"$TMP/lion.err" &&
	"$PY" - "$TMP/wide.err" "$TMP/lion.err" "$TMP/wide.out" "$TMP/lion.out" <<'PYEOF'
import re, sys
gb = [float(re.search(r"hidden 65536.*state alone is ([0-9.]+) GiB", open(f).read()).group(1))
      for f in sys.argv[1:3]]
size = [float(re.search(r"^largest that fits: .*, ([0-9.]+) B parameters", open(f).read(),
                        re.M).group(1)) for f in sys.argv[3:5]]
print("# hidden 65536: state %.1f GiB (Adam), %.1f GiB (Lion); largest that fits %.2f B (Adam), "
      "%.2f B (Lion)" % (gb[0], gb[1], size[0], size[1]))
sys.exit(0 if abs(gb[1] / gb[0] - 8 / 12) < 1e-3 and size[1] >= size[0] else 1)
PYEOF
ok $? "Lion: 8 bytes of state per parameter against Adam's 12, and a largest model at least as large"
# ZeRO-3 parameter offload: a candidate's bf16 parameters (2 bytes each) leave
# the GPU for the host, so on a PCIe GPU the GPU peak of every candidate both
# searches tried falls by about 2 bytes x its parameters (less one unit's
# fetched shard, which lives on the GPU while it is gathered), and the
# largest model that fits grows
for op in none cpu; do
	"$BIN" fit "$SO8" --machine h100-pcie --set zero_optimization.offload_optimizer.ratio=1 \
		--set zero_optimization.offload_param.device=$op >"$TMP/param_$op.out" 2>/dev/null
done
"$PY" - "$TMP/param_none.out" "$TMP/param_cpu.out" <<'PYEOF'
import re, sys
rows, largest = [], []
for f in sys.argv[1:3]:
    t = open(f).read()
    rows.append({(int(m[0]), int(m[1])): (float(m[2]), float(m[3]))
                 for m in re.findall(r"^\s+(\d+)\s+(\d+)\*?\s+([0-9.]+)\s+([0-9.]+)", t, re.M)})
    largest.append(float(re.search(r"^largest that fits: .*, ([0-9.]+) B parameters", t,
                                   re.M).group(1)))
common = sorted(set(rows[0]) & set(rows[1]))
good = True
for k in common:
    params, off = rows[0][k]
    on = rows[1][k][1]
    want = 2 * params * 1e9 / 2**30
    print("# hidden %d, %d layers: GPU %.1f -> %.1f GiB, 2 x %.2f B parameters = %.1f GiB"
          % (k[0], k[1], off, on, params, want))
    good = good and abs((off - on) - want) <= 0.05 * want + 0.1
print("# largest that fits: %.2f B without, %.2f B with parameter offload" % tuple(largest))
sys.exit(0 if common and good and largest[1] > largest[0] else 1)
PYEOF
ok $? "h100-pcie, parameters offloaded: each candidate's GPU peak falls by 2 bytes per parameter, the largest model grows"

# refuse ARGS... PATTERN: exits non-zero with PATTERN in its one-line message
refuse() {
	pat=$1
	shift
	"$BIN" fit "$@" >/dev/null 2>"$TMP/err"
	rc=$?
	[ $rc -ne 0 ] && grep -q "$pat" "$TMP/err"
}
refuse "needs a machine model" "$TMP/ds0.json"
ok $? "no machine: refused"
refuse "unknown model family" "$TMP/ds0.json" --machine gh200 --family gpt
ok $? "--family gpt: refused, naming the known ones"
refuse "multiple of 1024" "$TMP/ds0.json" --machine gh200 --min-hidden 3000
ok $? "--min-hidden 3000: refused"
refuse "larger than --max-hidden" "$TMP/ds0.json" --machine gh200 --min-hidden 8192 --max-hidden 4096
ok $? "--min-hidden above --max-hidden: refused"
refuse "expected an integer" "$TMP/ds0.json" --machine gh200 --max-hidden lots
ok $? "--max-hidden lots: refused"
refuse "nosuchmachine" "$TMP/ds0.json" --machine nosuchmachine
ok $? "an unknown machine: refused, naming it"
refuse "missing CONFIG" --machine gh200
ok $? "no CONFIG: refused"
"$BIN" fit --help | grep -q -- "--family NAME"
ok $? "fit --help documents --family"
done_testing
