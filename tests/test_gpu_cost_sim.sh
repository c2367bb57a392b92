#!/bin/sh
# test_gpu_cost_sim.sh - the GPU kernel model end to end (docs/simulate.md, "The
# GPU kernel model"): every shipped machine file loads with its gpu.kernels,
# the seed's 8B SuperOffload step on gh200 lands within 15% of DeepSpeed's
# published ~500-600 TFLOPS on a GH200, counted by DeepSpeedExamples'
# estimate_transformer_tflops (written out here from its definition, with the
# parameter count the model file states) and close above its lower bound
# (GPU compute at the same kernel times), a slower GEMM lengthens the
# simulated step, and removing gpu.kernels brings back the flat roofline.
# Simulated time only. Prints TAP.
set -u
SG_TEST_NAME=gpu_cost_sim
. "${SG_SRCDIR:-.}/tests/test_env.sh"
sg_needs_sim
export STEPGRAPH_MODELS_DIR=$SRC/models
export STEPGRAPH_MACHINES_DIR=$SRC/configs/machines
CONFIG=$SRC/configs/llama-3.1-8b-superoffload.json

bad=""
for f in "$SRC"/configs/machines/*.json; do
	m=$(basename "$f" .json)
	"$BIN" graph "$CONFIG" --machine "$m" --summary >"$TMP/load.txt" 2>&1 || bad="$bad $m"
	grep -q '"kernels"' "$f" || bad="$bad $m(no-kernels)"
done
[ -z "$bad" ]
ok $? "every shipped machine file loads and gives gpu.kernels${bad:+ (failed:$bad)}"

# tflops JSON: DeepSpeedExamples' per-sequence 2cPs + 4cLhs^2 (c = 4 with
# checkpointing), 4 sequences a step, over the simulated step
tflops() {
	"$PY" - "$1" "$SRC/models/llama-3.1-8b.json" <<'PYEOF'
import json, re, sys
step = json.load(open(sys.argv[1]))["step_s"]
m = json.load(open(sys.argv[2]))
P = int(re.search(r"([0-9][0-9,]+) parameters", m["source"]).group(1).replace(",", ""))
L, h, s, c, B = m["num_hidden_layers"], m["hidden_size"], 4096, 4.0, 4
print("%.1f" % (B * (2 * c * P * s + 4 * c * L * h * s * s) / step / 1e12))
PYEOF
}
"$BIN" simulate "$CONFIG" --machine gh200 --steps 3 --json "$TMP/gh.json" >"$TMP/gh.txt" 2>&1
t=$(tflops "$TMP/gh.json")
awk -v t="$t" 'BEGIN { exit !(t >= 500 * 0.85 && t <= 600 * 1.15) }'
ok $? "8B SuperOffload on gh200: $t TFLOPS by DeepSpeedExamples' formula, within 15% of 500-600"
# the lower bound counts GPU tasks at the same times: the GPU-bound step is
# at most 10% above it (with the roofline bound it read 1.37x)
awk '/Step time/ { t = $3 } /Lower bound/ { b = $3; by = $0 }
	END { exit !(b > 0 && t >= b && t <= 1.1 * b && by ~ /set by GPU compute/) }' "$TMP/gh.txt"
ok $? "8B on gh200: the step is within 10% above its lower bound, set by GPU compute"

# the same machine with a GEMM rate halved, and without gpu.kernels
"$PY" - "$SRC/configs/machines/gh200.json" "$TMP" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "slowgemm"
m["gpu"]["kernels"]["gemm_tflops"] /= 2
json.dump(m, open(sys.argv[2] + "/slowgemm.json", "w"))
m["name"] = "flat"
del m["gpu"]["kernels"]
json.dump(m, open(sys.argv[2] + "/flat.json", "w"))
PYEOF
"$BIN" simulate "$CONFIG" --machine "$TMP/slowgemm.json" --steps 3 --json "$TMP/slow.json" \
	>/dev/null 2>&1
ts=$(tflops "$TMP/slow.json")
awk -v a="$ts" -v b="$t" 'BEGIN { exit !(a > 0 && a < 0.75 * b) }'
ok $? "half the GEMM rate: $ts TFLOPS, well below $t (the products dominate the step)"
"$BIN" simulate "$CONFIG" --machine "$TMP/flat.json" --steps 3 --json "$TMP/flat.json.out" \
	>/dev/null 2>&1
tf=$(tflops "$TMP/flat.json.out")
awk -v a="$tf" 'BEGIN { exit !(a > 700) }'
ok $? "without gpu.kernels the flat roofline is back: $tf TFLOPS (above 700, as before the model)"
done_testing
