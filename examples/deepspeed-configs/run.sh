#!/usr/bin/env bash
# DeepSpeed's CIFAR-10 config across stages and precisions, and SuperOffload's (README.md).
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
if ci; then steps=3 len=32; else steps=20 len=128; fi
CIFAR=$EXAMPLE_DIR/cifar10_ds_config.json
common=(--model tiny-llama --max_length $len --steps $steps --log_interval $steps)
rows=()
for stage in 0 1 2 3; do
	for prec in fp32 bf16 fp16; do
		case $prec in
		fp32) set_prec=(--set bf16.enabled=false --set fp16.enabled=false) ;;
		bf16) set_prec=() ;;
		fp16) set_prec=(--set bf16.enabled=false --set fp16.enabled=true) ;;
		esac
		say "CIFAR-10 config: stage $stage, $prec"
		"$STEPGRAPH" run "$CIFAR" "${common[@]}" --set zero_optimization.stage=$stage \
			"${set_prec[@]}" --metrics "$OUT/cifar-stage$stage-$prec.jsonl"
		rows+=("cifar-stage$stage-$prec")
	done
done
# the same file with its WarmupLR replaced, on the command line, by each of
# DeepSpeed's other schedulers (stage 2, bf16)
declare -A sched=(
	[cosine]='{"type": "WarmupCosineLR", "params": {"warmup_num_steps": 2, "total_num_steps": '$steps'}}'
	[onecycle]='{"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": '$(((steps + 1) / 2))'}}'
	[rangetest]='{"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 2}}'
)
for s in cosine onecycle rangetest; do
	say "CIFAR-10 config, stage 2, bf16, scheduler $(printf '%s' "${sched[$s]}" | sed 's/.*"type": "\([A-Za-z]*\)".*/\1/')"
	"$STEPGRAPH" run "$CIFAR" "${common[@]}" --set zero_optimization.stage=2 \
		--set "scheduler=${sched[$s]}" --metrics "$OUT/cifar-$s.jsonl"
	rows+=("cifar-$s")
done
# and with its Adam replaced by DeepSpeed's other two offloadable optimizers,
# the optimizer on the host in sub-groups (stage 3, bf16)
declare -A optim=(
	[lion]='{"type": "Lion", "params": {"lr": 1e-4, "betas": [0.9, 0.99], "weight_decay": 0.1}}'
	[adagrad]='{"type": "Adagrad", "params": {"lr": 0.01, "weight_decay": 0.01}}'
)
for o in lion adagrad; do
	say "CIFAR-10 config, stage 3 offloaded, bf16, optimizer $(printf '%s' "${optim[$o]}" | sed 's/.*"type": "\([A-Za-z]*\)".*/\1/')"
	"$STEPGRAPH" run "$CIFAR" "${common[@]}" --set zero_optimization.stage=3 \
		--set zero_optimization.offload_optimizer.device=cpu \
		--set zero_optimization.sub_group_size=150000 \
		--set "optimizer=${optim[$o]}" --metrics "$OUT/cifar-$o.jsonl"
	rows+=("cifar-$o")
done
say "ZeRO-3 with the optimizer and the parameters offloaded to the CPU"
"$STEPGRAPH" run "$REPO_ROOT/configs/deepspeed/zero3-offload-all.json" "${common[@]}" \
	--set zero_optimization.sub_group_size=150000 --metrics "$OUT/zero3-offload-all.jsonl"
rows+=(zero3-offload-all)
say "SuperOffload's config"
"$STEPGRAPH" run "$REPO_ROOT/configs/deepspeed/superoffload.json" "${common[@]}" \
	--set zero_optimization.sub_group_size=150000 --metrics "$OUT/superoffload.jsonl"
rows+=(superoffload)
say "summary"
"$PY" - "$OUT" "${rows[@]}" <<'PYEOF'
import json, math, sys
out, names = sys.argv[1], sys.argv[2:]
print("%-22s %12s %12s %8s %10s %10s %10s" % ("run", "first loss", "last loss", "skipped",
                                              "tokens/s", "first lr", "last lr"))
for n in names:
    rows = [json.loads(l) for l in open("%s/%s.jsonl" % (out, n))]
    assert rows and all(isinstance(r["loss"], float) and math.isfinite(r["loss"]) for r in rows), n
    tps = sum(r["tokens_per_s"] for r in rows) / len(rows)
    print("%-22s %12.6f %12.6f %8d %10.0f %10.3g %10.3g" % (
        n, rows[0]["loss"], rows[-1]["loss"], sum(r["skipped"] for r in rows), tps,
        rows[0]["lr"], rows[-1]["lr"]))
PYEOF
