#!/usr/bin/env bash
# snapshot_outputs.sh - what a change must leave alone: the deterministic
# outputs of stepgraph on a set of configs, written to a folder, so that two
# snapshots (before and after a refactoring, a split or a merge) compare with
# `diff -r`.
#
#   scripts/snapshot_outputs.sh [--quick] OUTDIR
#
# For each case (a DeepSpeed config of configs/deepspeed/ with a tiny model:
# ZeRO 0-3, optimizer and parameter offload, fp16, SuperOffload, MoE,
# GPT-OSS, Qwen3): the losses, gradient norms, loss scales, learning rates
# and skips of `run --steps 5` on one CPU worker, the run's log without its
# timings, `graph` as DOT (folded and unfolded) and JSON, `graph --summary`
# for the CPU and for one CUDA worker, `config`, and `simulate` on gh200 (a
# simulated step is deterministic); with the full set also two shipped run
# configs simulated on mi300a. --quick: the first case only.
# STEPGRAPH (default ./stepgraph of the repository) is the program;
# SNAPSHOT_RUN_ARGS adds arguments to every `run`. About 35 s on 2 cores.
# Exit status: 0 written (a command that fails has its status in its file),
# 2 bad arguments.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

quick=0
case "${1:-}" in
-h | --help)
	sg_usage
	exit 0
	;;
--quick)
	quick=1
	shift
	;;
esac
[ $# -eq 1 ] && [ -n "$1" ] ||
	die "usage: scripts/snapshot_outputs.sh [--quick] OUTDIR (see --help)" 2
mkdir -p "$1"
out=$(cd "$1" && pwd)
SG=${STEPGRAPH:-$REPO_ROOT/stepgraph}
[ -x "$SG" ] || die "$SG: not built" 2
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
cd "$REPO_ROOT"
read -r -a extra <<<"${SNAPSHOT_RUN_ARGS:-}"

cases=(
	"z0:configs/deepspeed/zero0.json:tiny-llama"
	"z1:configs/deepspeed/zero1.json:tiny-llama"
	"z2:configs/deepspeed/zero2.json:tiny-llama"
	"z3:configs/deepspeed/zero3.json:tiny-llama"
	"zoff:configs/deepspeed/zero-offload.json:tiny-llama"
	"z3all:configs/deepspeed/zero3-offload-all.json:tiny-llama"
	"z3fp16:configs/deepspeed/zero3-offload-fp16.json:tiny-llama"
	"so:configs/deepspeed/superoffload.json:tiny-llama"
	"moe:configs/deepspeed/zero2.json:tiny-moe"
	"moe3:configs/deepspeed/zero3.json:tiny-moe"
	"gptoss:configs/deepspeed/superoffload.json:tiny-gpt-oss"
	"qwen:configs/deepspeed/zero1.json:tiny-qwen3"
)
[ "$quick" = 1 ] && cases=("${cases[0]}")

# capture FILE CMD...: CMD's standard output and error, then its status
capture() {
	local f=$1
	shift
	set +e
	"$@" >"$f" 2>&1
	echo "rc=$?" >>"$f"
	set -e
}

for c in "${cases[@]}"; do
	IFS=: read -r name cfg model <<<"$c"
	o=$out/$name
	capture "$o.run.log" "$SG" run "$cfg" --model "$model" --steps 5 --ncpus 1 \
		--metrics "$o.metrics" "${extra[@]}"
	# the per-step values, not the times
	"$PY" -c '
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(d["step"], repr(d["loss"]), repr(d.get("grad_norm")), d.get("loss_scale"),
          d.get("lr"), d.get("skipped"))
' "$o.metrics" >"$o.losses" 2>&1 || true
	rm -f "$o.metrics"
	grep -v -E 'Time|ms|start-up|RSS|measured|Throughput' "$o.run.log" >"$o.run" || true
	rm -f "$o.run.log"
	capture "$o.dot" "$SG" graph "$cfg" --model "$model"
	capture "$o.unfold.dot" "$SG" graph "$cfg" --model "$model" --unfold
	capture "$o.json" "$SG" graph "$cfg" --model "$model" --format json
	capture "$o.summary" "$SG" graph "$cfg" --model "$model" --summary --machine gh200
	capture "$o.cuda.summary" "$SG" graph "$cfg" --model "$model" --ncuda 1 --summary
	capture "$o.config" "$SG" config "$cfg" --model "$model"
	capture "$o.sim" "$SG" simulate "$cfg" --model "$model" --machine gh200
done
if [ "$quick" = 0 ]; then
	for cfg in configs/llama-3.1-8b-superoffload.json configs/llama-3.2-1b-superoffload-gpu.json; do
		n=$(basename "$cfg" .json)
		capture "$out/$n.summary" "$SG" graph "$cfg" --summary
		capture "$out/$n.sim" "$SG" simulate "$cfg" --machine mi300a
	done
fi
say "$(find "$out" -type f | wc -l) files in $out (compare two with diff -r)"
