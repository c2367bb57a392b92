#!/usr/bin/env bash
# bench_gpu.sh - one training step of a Llama model on one NVIDIA GPU: `stepgraph run`
# with SuperOffload (configs/llama-3.2-1b-superoffload-gpu.json: Llama-3.2-1B, sequence
# 4096, micro batch 4, bf16, ZeRO-3, optimizer offloaded to the CPU with speculative CPU
# Adam, activation checkpointing) on one CUDA worker, against the same step in plain
# PyTorch (bench/torch_gpu_bench.py) with the optimizer on the CPU ("offload", the baseline)
# and with everything on the GPU ("gpu").
#
#   scripts/bench_gpu.sh                                  # the defaults above, 12 steps, 3 warm-up
#   scripts/bench_gpu.sh --seq 2048 --batch 8 --steps 20 --warmup 5
#   scripts/bench_gpu.sh --set offload_optimizer.ratio=0.8 --out ratio08.md
#   scripts/bench_gpu.sh --dry-run                        # print the commands, run nothing
#   scripts/bench_gpu.sh --help
#
# Run on the GPU machine once stepgraph is built with CUDA (scripts/setup.sh, ./configure
# $STEPGRAPH_CONFIGURE_FLAGS, make; or scripts/quickstart.sh), from anywhere: it works in
# the repository root, and relative paths are taken from there. Prints a table
# (step time, tokens/s, TFLOPS by the step log's formula, MFU of model FLOPs against --peak, stepgraph's GPU
# busy share and hidden CPU Adam share, the tokens/s ratios stepgraph / offload and
# stepgraph / gpu), whether the targets (MFU >= 40%, >= 1.5x the offload baseline) are met,
# and the commands to reproduce each run; writes the same as Markdown to --out and the
# raw logs beside it (OUT without .md, plus .logs/). Missing targets do not fail the script;
# a run that fails does (exit 1, after the report). Exit 2: no GPU, no CUDA PyTorch, or a
# usage error.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


usage() {
	cat <<'EOF'
usage: scripts/bench_gpu.sh [options] [-- STEPGRAPH_RUN_OPTIONS...]

Runs, on one NVIDIA GPU and from the repository root:
  1. ./stepgraph run CONFIG --ncuda 1 ... once for --calibrate steps (StarPU's performance
     models; not reported), then for --steps steps: the stepgraph row;
  2. bench/torch_gpu_bench.py --mode offload: bf16 weights on the GPU, fp32 master weights
     and torch AdamW(foreach) on the CPU, gradients and weights over PCIe each step;
  3. bench/torch_gpu_bench.py --mode gpu: all on the GPU, autocast bf16, fused AdamW
     (a row "oom" when it does not fit);
and prints a table of step time, tokens/s, TFLOPS, MFU, GPU busy and hidden CPU Adam
(stepgraph only), the tokens/s ratios, whether the targets are met (stepgraph MFU >= 40%,
stepgraph >= 1.5x offload; reported, never an error) and the commands to reproduce.
All runs use the same model, sequence, micro batch, steps, warm-up and seed; PyTorch gets
--threads CPU threads. Model, sequence and batch default to the config's.

Options:
  --config FILE      stepgraph run config (default configs/llama-3.2-1b-superoffload-gpu.json)
  --model NAME|PATH  model (models/NAME.json); stepgraph gets --model, PyTorch the same file
  --seq N            sequence length; stepgraph gets --max_length N
  --batch N          micro batch; stepgraph gets --set train_micro_batch_size_per_gpu=N
  --steps N          steps per run, warm-up included (default: the config's steps, else its
                     bench_steps, else 12)
  --warmup N         first steps left out of the figures (default: the config's warmup_steps)
  --set KEY=VALUE    a DeepSpeed key for stepgraph (repeatable), e.g.
                     --set offload_optimizer.ratio=0.8
  --calibrate N      steps of the unreported stepgraph run first (default 3; 0: none)
  --threads N        PyTorch CPU threads (default: nproc)
  --peak TFLOPS      the GPU's dense bf16 peak for MFU (default 989: H100 SXM; H200 too)
  --python PY        Python with CUDA PyTorch (default: $PYTHON, else python3)
  --modes LIST       peer modes, comma-separated, of bench/torch_gpu_bench.py: offload,gpu
                     (default), deepspeed (DeepSpeed ZeRO-3 with CPU offload, the same
                     config less its SuperOffload keys), superoffload (DeepSpeed with the
                     config's super_offload); or none. The DeepSpeed modes need deepspeed
                     importable by --python (PYTHONPATH works)
  --out FILE         Markdown report (default bench-gpu.md); logs go to FILE minus .md
                     plus .logs/
  --dry-run          print the commands (after reading the config), run nothing
  -h, --help         this help
Arguments after -- go to both stepgraph runs unchanged (e.g. -- --sched dmdas).
The script works in the repository root: relative paths (--config, --model, --out,
--python) are taken from there.

Environment: PYTHON (as --python), BIN (the stepgraph binary, default ./stepgraph),
STEPGRAPH_MODELS_DIR (model files), StarPU's STARPU_*
variables (passed through; STARPU_HOME keeps the calibrated models between runs).
Exit status: 0 when every run ran (targets met or not), 1 when a run failed, 2 for a
usage error, no NVIDIA GPU (nvidia-smi missing or listing none) or no CUDA PyTorch.
EOF
}

# ---- options ------------------------------------------------------------------------

CONFIG=configs/llama-3.2-1b-superoffload-gpu.json
MODEL="" SEQ="" BATCH="" STEPS="" WARMUP="" CALIBRATE=3
THREADS=$(nproc 2>/dev/null || echo 1)
PEAK=989
PY=${PYTHON:-python3}
BIN=${BIN:-./stepgraph}
MODES=offload,gpu
OUT=bench-gpu.md
DRY=0
SETS=()
EXTRA=()
need() {
	if [ "$#" -lt 2 ] || [ -z "$2" ]; then
		usage >&2
		die "option $1 needs a value" 2
	fi
}
while [ "$#" -gt 0 ]; do
	case "$1" in
	--config) need "$@"; CONFIG=$2; shift 2 ;;
	--model) need "$@"; MODEL=$2; shift 2 ;;
	--seq) need "$@"; SEQ=$2; shift 2 ;;
	--batch) need "$@"; BATCH=$2; shift 2 ;;
	--steps) need "$@"; STEPS=$2; shift 2 ;;
	--warmup) need "$@"; WARMUP=$2; shift 2 ;;
	--set) need "$@"; SETS+=("$2"); shift 2 ;;
	--calibrate) need "$@"; CALIBRATE=$2; shift 2 ;;
	--threads) need "$@"; THREADS=$2; shift 2 ;;
	--peak) need "$@"; PEAK=$2; shift 2 ;;
	--python) need "$@"; PY=$2; shift 2 ;;
	--modes) need "$@"; MODES=$2; shift 2 ;;
	--out) need "$@"; OUT=$2; shift 2 ;;
	--dry-run) DRY=1; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; EXTRA=("$@"); break ;;
	*) usage >&2; die "unknown option: $1" 2 ;;
	esac
done

posint() { # NAME VALUE [0 allowed]
	case "$2" in '' | *[!0-9]*) die "$1 must be a non-negative integer (got '$2')" 2 ;; esac
	[ "${3:-}" = 0 ] || [ "$2" -ge 1 ] || die "$1 must be >= 1 (got '$2')" 2
}
for v in SEQ BATCH STEPS; do [ -z "${!v}" ] || posint "--${v,,}" "${!v}"; done
[ -z "$WARMUP" ] || posint --warmup "$WARMUP" 0
posint --calibrate "$CALIBRATE" 0
posint --threads "$THREADS"
awk -v p="$PEAK" 'BEGIN { exit !(p + 0 > 0) }' || die "--peak must be a number > 0 (got '$PEAK')" 2
for s in "${SETS[@]+"${SETS[@]}"}"; do
	case "$s" in *=*) ;; *) die "--set $s: expected KEY=VALUE" 2 ;; esac
done
TORCH_MODES=()
case "$MODES" in
none) ;;
*)
	IFS=, read -r -a TORCH_MODES <<<"$MODES"
	for m in "${TORCH_MODES[@]}"; do
		case "$m" in offload | gpu | deepspeed | superoffload) ;; *) die "--modes: '$m' is not offload, gpu, deepspeed, superoffload or none" 2 ;; esac
	done
	;;
esac
case "$OUT" in */) die "--out $OUT: a file name, not a directory" 2 ;; esac

cd "$REPO_ROOT"
if [ -f .deps-build/env.sh ]; then
	# shellcheck disable=SC1091
	. .deps-build/env.sh
fi
[ -x "$BIN" ] || die "no $BIN in $REPO_ROOT: build it first (scripts/quickstart.sh, or scripts/setup.sh, ./configure \$STEPGRAPH_CONFIGURE_FLAGS and make)"
[ -f "$CONFIG" ] || die "--config $CONFIG: no such file" 2

# ---- the configuration, as stepgraph reads it ----------------------------------------

# Everything given to both stepgraph runs: model, sequence and batch only when asked for
# (a run config may name a model by path), the user's --set first so that --batch wins.
SG_OPTS=()
[ -z "$MODEL" ] || SG_OPTS+=(--model "$MODEL")
[ -z "$SEQ" ] || SG_OPTS+=(--max_length "$SEQ")
for s in "${SETS[@]+"${SETS[@]}"}"; do SG_OPTS+=(--set "$s"); done
[ -z "$BATCH" ] || SG_OPTS+=(--set "train_micro_batch_size_per_gpu=$BATCH")

cfg_txt=$("$BIN" config "$CONFIG" "${SG_OPTS[@]+"${SG_OPTS[@]}"}" \
	"${EXTRA[@]+"${EXTRA[@]}"}" 2>&1) ||
	{ printf '%s\n' "$cfg_txt" >&2; die "$BIN config $CONFIG failed (above)" 2; }
# cfg KEY: the integer after KEY on stepgraph config's "run:" / "batch:" lines
cfg() { printf '%s\n' "$cfg_txt" | sed -n "s/.*[ ,]$1 \([0-9][0-9]*\).*/\1/p" | head -n1; }
c_model=$(printf '%s\n' "$cfg_txt" | sed -n 's/^model: *\([^ ]*\) .*/\1/p' | head -n1)
c_seq=$(cfg max_length)
c_micro=$(printf '%s\n' "$cfg_txt" | sed -n 's/.*= micro \([0-9]*\) x accumulation \([0-9]*\) x dp \([0-9]*\).*/\1 \2 \3/p')
read -r c_batch c_accum c_dp <<<"${c_micro:-"" "" ""}"
c_steps=$(cfg steps)
c_bench=$(cfg bench_steps)
c_warm=$(cfg warmup_steps)
c_seed=$(cfg seed)
c_prec=$(printf '%s\n' "$cfg_txt" | sed -n 's/^precision: *\([a-z0-9]*\).*/\1/p' | head -n1)
if printf '%s\n' "$cfg_txt" | grep -q 'activation_checkpointing on'; then c_ckpt=1; else c_ckpt=0; fi
for v in c_model c_seq c_batch c_accum c_dp c_warm c_seed; do
	[ -n "${!v}" ] || { printf '%s\n' "$cfg_txt" >&2; die "could not read ${v#c_} from $BIN config's output (above)"; }
done
printf '%s\n' "$cfg_txt" | grep 'warning' >&2 || true

SEQ=${SEQ:-$c_seq}
BATCH=$c_batch
if [ -z "$STEPS" ]; then
	if [ "${c_steps:-0}" -gt 0 ]; then STEPS=$c_steps
	elif [ "${c_bench:-0}" -gt 0 ]; then STEPS=$c_bench
	else STEPS=12; fi
fi
WARMUP=${WARMUP:-$c_warm}
[ "$WARMUP" -lt "$STEPS" ] || die "the warm-up ($WARMUP steps) must be shorter than the run ($STEPS steps)" 2
if [ "$c_accum" != 1 ] || [ "$c_dp" != 1 ]; then
	say "warning: stepgraph's step is micro batch $c_batch x accumulation $c_accum x dp $c_dp; PyTorch runs one micro-batch of $c_batch per step: compare tokens/s, not step times"
fi
[ "$c_prec" = bf16 ] || say "warning: the config's precision is ${c_prec:-?}, the PyTorch modes compute in bf16"

# the model file for PyTorch: --model as given, else the config's model by name
TMODEL=${MODEL:-$c_model}
if [ ! -f "$TMODEL" ]; then
	found=""
	for d in ${STEPGRAPH_MODELS_DIR:+"$STEPGRAPH_MODELS_DIR"} models; do
		if [ -f "$d/${TMODEL%.json}.json" ]; then found="$d/${TMODEL%.json}.json"; break; fi
	done
	[ -n "$found" ] || die "no model file for '$TMODEL' (models/$TMODEL.json): give --model PATH" 2
	TMODEL=$found
fi

# ---- the commands ---------------------------------------------------------------------

case "$OUT" in *.md) BASE=${OUT%.md} ;; *) BASE=$OUT ;; esac
LOGS="$BASE.logs"
SG_RUN=("$BIN" run "$CONFIG" --ncuda 1)
SG_CAL=("${SG_RUN[@]}" --steps "$CALIBRATE" --warmup_steps 0 "${SG_OPTS[@]+"${SG_OPTS[@]}"}"
	"${EXTRA[@]+"${EXTRA[@]}"}")
SG_CMD=("${SG_RUN[@]}" --steps "$STEPS" --warmup_steps "$WARMUP" --log_interval 1
	--metrics "$LOGS/stepgraph.jsonl" --trace "$LOGS/stepgraph-trace.json"
	"${SG_OPTS[@]+"${SG_OPTS[@]}"}" "${EXTRA[@]+"${EXTRA[@]}"}")
# the DeepSpeed config CONFIG names (its "deepspeed_config", a path beside it or an object),
# or CONFIG itself: what the DeepSpeed peers run (--set values are stepgraph's only)
ds_config_of() {
	python3 - "$1" "$LOGS/deepspeed-config.json" <<'PYEOF'
import json, os, sys
cfg_path, out = sys.argv[1], sys.argv[2]
c = json.load(open(cfg_path))
ds = c.get("deepspeed_config", c) if isinstance(c, dict) else c
if isinstance(ds, str):
    print(os.path.join(os.path.dirname(cfg_path), ds))
else:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(ds, open(out, "w"), indent=1)
    print(out)
PYEOF
}
torch_cmd() { # MODE: the peer's command into the array TCMD
	TCMD=("$PY" bench/torch_gpu_bench.py --mode "$1"
		--model "$TMODEL" --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP"
		--threads "$THREADS" --peak "$PEAK" --seed "$c_seed")
	[ "$c_ckpt" = 1 ] || TCMD+=(--no-checkpointing)
	case "$1" in deepspeed | superoffload) TCMD+=(--ds-config "$DS_CONFIG") ;; esac
}
DS_CONFIG=$(ds_config_of "$CONFIG") || die "$CONFIG: cannot read its DeepSpeed config" 2
# q WORD...: the words as a shell command line, quoted only where needed
q() {
	local w out="" sq="'"
	for w in "$@"; do
		case "$w" in
		'' | *[!A-Za-z0-9_./=,:+@%-]*) w="'${w//$sq/$sq\\$sq$sq}'" ;;
		esac
		out="${out:+$out }$w"
	done
	printf '%s' "$out"
}

ME=()
[ "$BIN" = ./stepgraph ] || ME+=("BIN=$BIN")
ME+=(scripts/bench_gpu.sh --config "$CONFIG")
[ -z "$MODEL" ] || ME+=(--model "$MODEL")
ME+=(--seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP")
for s in "${SETS[@]+"${SETS[@]}"}"; do ME+=(--set "$s"); done
ME+=(--calibrate "$CALIBRATE" --threads "$THREADS" --peak "$PEAK" --modes "$MODES")
[ "$PY" = python3 ] || ME+=(--python "$PY")
ME+=(--out "$OUT")
[ "${#EXTRA[@]}" = 0 ] || ME+=(-- "${EXTRA[@]}")

say "$c_model, sequence $SEQ, micro batch $BATCH, $STEPS steps ($WARMUP warm-up), activation checkpointing $([ "$c_ckpt" = 1 ] && echo on || echo off), PyTorch on $THREADS CPU thread(s)"
if [ "$DRY" = 1 ]; then
	printf 'dry run: would check nvidia-smi (a GPU), %s (torch with CUDA), then run:\n' "$PY"
	printf '  mkdir -p %s\n' "$(q "$LOGS")"
	[ "$CALIBRATE" = 0 ] || printf '  %s\n' "$(q "${SG_CAL[@]}")"
	printf '  %s\n' "$(q "${SG_CMD[@]}")"
	for m in "${TORCH_MODES[@]+"${TORCH_MODES[@]}"}"; do torch_cmd "$m"; printf '  %s\n' "$(q "${TCMD[@]}")"; done
	printf 'and write %s; reproduce: %s\n' "$OUT" "$(q "${ME[@]}")"
	exit 0
fi

# ---- the machine ---------------------------------------------------------------------

command -v nvidia-smi >/dev/null 2>&1 ||
	die "no CUDA device: nvidia-smi not found (this benchmark needs an NVIDIA GPU; --dry-run prints the commands)" 2
gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1) ||
	die "no CUDA device: nvidia-smi failed: $(printf '%s' "$gpus" | head -n1)" 2
gpus=$(printf '%s\n' "$gpus" | grep -v '^ *$' || true)
[ -n "$gpus" ] || die "no CUDA device: nvidia-smi lists no GPU" 2
[ "$(printf '%s\n' "$gpus" | wc -l)" = 1 ] ||
	say "$(printf '%s\n' "$gpus" | wc -l) GPUs; stepgraph takes one CUDA worker, PyTorch cuda:0 (set CUDA_VISIBLE_DEVICES to pick)"
IFS=, read -r g_name g_mem g_drv <<<"$(printf '%s\n' "$gpus" | head -n1)"
gpu_name="${g_name} (${g_mem# }, driver ${g_drv# })"
torch_ver="n/a"
if [ "${#TORCH_MODES[@]}" -gt 0 ]; then
	command -v "$PY" >/dev/null 2>&1 || die "no $PY: give --python PATH (a Python with CUDA PyTorch)" 2
	probe=$("$PY" -c 'import torch; print(torch.__version__, int(torch.cuda.is_available()))' 2>&1) ||
		die "$PY cannot import torch: give --python PATH (a Python with CUDA PyTorch): $(printf '%s' "$probe" | tail -n1)" 2
	read -r torch_ver torch_cuda <<<"$(printf '%s\n' "$probe" | tail -n1)"
	[ "$torch_cuda" = 1 ] ||
		die "$PY has torch $torch_ver without a usable CUDA device: give --python PATH (a Python with CUDA PyTorch)" 2
fi
cpu_name=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //')
NCPU=$(nproc 2>/dev/null || echo "?")
mkdir -p "$LOGS"
failed=0

# ---- stepgraph --------------------------------------------------------------------------

if [ "$CALIBRATE" -gt 0 ]; then
	say "stepgraph: $CALIBRATE calibration step(s) (StarPU performance models; not reported)"
	if ! "${SG_CAL[@]}" >"$LOGS/stepgraph-calibrate.log" 2>&1; then
		tail -n 20 "$LOGS/stepgraph-calibrate.log" >&2
		say "the calibration run failed ($LOGS/stepgraph-calibrate.log); going on"
	fi
fi
say "stepgraph: $(q "${SG_CMD[@]}")"
sg_ok=1
if ! "${SG_CMD[@]}" >"$LOGS/stepgraph.log" 2>&1; then
	tail -n 20 "$LOGS/stepgraph.log" >&2
	say "stepgraph run failed (log: $LOGS/stepgraph.log)"
	sg_ok=0
	failed=1
fi
sgl="$LOGS/stepgraph.log"
sg_mean=$(sed -n 's/.*Step time: mean \([0-9.]*\) ms.*/\1/p' "$sgl" | tail -n1)
sg_tok=$(sed -n 's/.*Throughput: \([0-9.]*\) tokens\/s.*/\1/p' "$sgl" | tail -n1)
sg_tfl=$(sed -n 's/.*Throughput: .* | TFLOPS: \([0-9.]*\).*/\1/p' "$sgl" | tail -n1)
sg_mtf=$(sed -n 's/.*Throughput: .* | Model TFLOPS: \([0-9.]*\).*/\1/p' "$sgl" | tail -n1)
sg_busy=$(sed -n 's/.*GPU: busy \([0-9.]*\)% of the last step.*/\1/p' "$sgl" | tail -n1)
sg_hidden=$(sed -n 's/.*CPU Adam [0-9.]* ms, \([0-9.]*\)% of it under GPU work.*/\1/p' "$sgl" | tail -n1)
sg_adam=$(sed -n 's/.*CPU Adam \([0-9.]*\) ms,.*/\1/p' "$sgl" | tail -n1)
sg_roll=$(sed -n 's/.*SuperOffload: \([0-9]* of [0-9]*\) speculative.*/\1/p' "$sgl" | tail -n1)
# the last step's copies against compute, read from its trace (tests/trace_overlap.py)
sg_copies=()
if [ -s "$LOGS/stepgraph-trace.json" ]; then
	mapfile -t sg_copies < <("$PY" tests/trace_overlap.py "$LOGS/stepgraph-trace.json" 2>&1)
fi
sg_median=""
if [ -s "$LOGS/stepgraph.jsonl" ]; then
	sg_median=$(awk -v w="$WARMUP" '
		match($0, /"step":[0-9]+/) { s = substr($0, RSTART + 7, RLENGTH - 7) + 0 }
		match($0, /"time_ms":[-0-9.eE+]+/) { t = substr($0, RSTART + 10, RLENGTH - 10) + 0 }
		{ if (s > w) ts[n++] = t }
		END {
			if (!n) exit
			for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (ts[j] < ts[i]) { x = ts[i]; ts[i] = ts[j]; ts[j] = x }
			printf "%.3f\n", (ts[int((n - 1) / 2)] + ts[int(n / 2)]) / 2
		}' "$LOGS/stepgraph.jsonl")
fi
if [ "$sg_ok" = 1 ] && [ -z "$sg_busy" ]; then
	say "warning: stepgraph printed no 'GPU: busy' line: it ran without a CUDA worker (StarPU built without CUDA, or no GPU visible to it?)"
fi

# ---- PyTorch ----------------------------------------------------------------------------

declare -A T_MEAN T_MED T_TOK T_TFL T_MFU T_STATUS T_INFO
for m in "${TORCH_MODES[@]+"${TORCH_MODES[@]}"}"; do
	torch_cmd "$m"
	say "torch $m: $(q "${TCMD[@]}")"
	o="$LOGS/torch-$m.out" e="$LOGS/torch-$m.log"
	if "${TCMD[@]}" >"$o" 2>"$e"; then
		field() { sed -n "s/^torch_gpu .* $1=\([^ ]*\).*/\1/p" "$o" | tail -n1; }
		T_STATUS[$m]=$(field status)
		T_MEAN[$m]=$(field mean_step_ms)
		T_MED[$m]=$(field median_step_ms)
		T_TOK[$m]=$(field tokens_per_s)
		T_TFL[$m]=$(field tflops)
		T_MFU[$m]=$(field mfu)
		T_INFO[$m]=$(sed -n 's/^torch_gpu_info //p' "$e" | tail -n1)
		[ -n "${T_STATUS[$m]}" ] || { T_STATUS[$m]=failed; failed=1; say "torch $m printed no result line ($o)"; }
		[ "${T_STATUS[$m]}" != oom ] || say "torch $m: out of GPU memory (status=oom)"
	else
		tail -n 20 "$e" >&2
		say "torch $m failed (log: $e)"
		T_STATUS[$m]=failed
		failed=1
	fi
done

# ---- the report ----------------------------------------------------------------------------

num() { [[ "${1:-}" =~ ^[0-9]+(\.[0-9]*)?$ ]]; } # a figure (not n/a, not empty)
fmt() { if num "${2:-}"; then awk -v x="$2" -v f="$1" 'BEGIN { printf f, x }'; else echo n/a; fi; }
mfu() { if num "${1:-}"; then awk -v t="$1" -v p="$PEAK" 'BEGIN { printf "%.1f%%", 100 * t / p }'; else echo n/a; fi; }
pct() { if num "${1:-}"; then awk -v f="$1" 'BEGIN { printf "%.1f%%", 100 * f }'; else echo n/a; fi; }
ratio() { if num "${1:-}" && num "${2:-}" && awk -v b="$2" 'BEGIN { exit !(b > 0) }'; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; else echo n/a; fi; }

ROWS=() # "run|mean|median|tok|tflops|mfu|busy|hidden|x"
sg_status=ok
[ -n "$sg_busy" ] || sg_status="ok, no CUDA worker"
[ "$sg_ok" = 1 ] || sg_status=failed
ROWS+=("stepgraph (SuperOffload, 1 CUDA worker)|$(fmt %.1f "$sg_mean")|$(fmt %.1f "$sg_median")|$(fmt %.0f "$sg_tok")|$(fmt %.1f "$sg_tfl")|$(mfu "$sg_mtf")|$(fmt %.1f%% "$sg_busy")|$(fmt %.1f%% "$sg_hidden")|$sg_status")
for m in "${TORCH_MODES[@]+"${TORCH_MODES[@]}"}"; do
	case "$m" in
	offload) label="PyTorch offload (AdamW on the CPU)" ;;
	gpu) label="PyTorch gpu (fused AdamW on the GPU)" ;;
	deepspeed) label="DeepSpeed ZeRO-3, optimizer on the CPU" ;;
	superoffload) label="DeepSpeed SuperOffload" ;;
	esac
	ROWS+=("$label|$(fmt %.1f "${T_MEAN[$m]:-}")|$(fmt %.1f "${T_MED[$m]:-}")|$(fmt %.0f "${T_TOK[$m]:-}")|$(fmt %.1f "${T_TFL[$m]:-}")|$(pct "${T_MFU[$m]:-}")|n/a|n/a|${T_STATUS[$m]}")
done

r_off=n/a r_gpu=n/a r_ds=n/a r_so=n/a
[ -z "${T_TOK[offload]:-}" ] || r_off=$(ratio "$sg_tok" "${T_TOK[offload]}")
[ -z "${T_TOK[gpu]:-}" ] || r_gpu=$(ratio "$sg_tok" "${T_TOK[gpu]}")
[ -z "${T_TOK[deepspeed]:-}" ] || r_ds=$(ratio "$sg_tok" "${T_TOK[deepspeed]}")
[ -z "${T_TOK[superoffload]:-}" ] || r_so=$(ratio "$sg_tok" "${T_TOK[superoffload]}")
if num "$sg_mtf"; then
	mfu_met=$(awk -v t="$sg_mtf" -v p="$PEAK" 'BEGIN { print (100 * t / p >= 40) ? "met" : "not met" }')
else
	mfu_met="not measured"
fi
if [ "$r_off" != n/a ]; then
	off_met=$(awk -v r="${r_off%x}" 'BEGIN { print (r >= 1.5) ? "met" : "not met" }')
else
	off_met="not measured"
fi

report() { # FORMAT: text or md
	local md=$1 row f lead=''
	if [ "$md" = md ]; then
		printf '# stepgraph GPU benchmark\n\n'
		printf -- '- GPU: %s; CPU: %s, %s CPUs; PyTorch %s on %s thread(s)\n' "$gpu_name" "${cpu_name:-?}" "$NCPU" "$torch_ver" "$THREADS"
		printf -- '- %s, sequence %s, micro batch %s (%s tokens per step), activation checkpointing %s; %s steps, the first %s left out\n' \
			"$c_model" "$SEQ" "$BATCH" "$((SEQ * BATCH * c_accum * c_dp))" "$([ "$c_ckpt" = 1 ] && echo on || echo off)" "$STEPS" "$WARMUP"
		printf -- '- TFLOPS: DeepSpeedExamples'"'"' formula B (2 c P s + 4 c L h s^2) per step / mean step time (c = %s); MFU: model FLOPs B (6 P_ne s + 6 L q s^2) per second against %s TFLOP/s (docs/flops.md)\n\n' \
			"$([ "$c_ckpt" = 1 ] && echo 4 || echo 3)" "$PEAK"
		printf '| run | mean step ms | median ms | tokens/s | TFLOPS | MFU | GPU busy | CPU Adam hidden | status |\n'
		printf '|---|---:|---:|---:|---:|---:|---:|---:|---|\n'
		for row in "${ROWS[@]}"; do printf '| %s |\n' "${row//|/ | }"; done
	else
		printf 'GPU: %s; CPU: %s, %s CPUs; PyTorch %s on %s thread(s)\n' "$gpu_name" "${cpu_name:-?}" "$NCPU" "$torch_ver" "$THREADS"
		printf '%s, sequence %s, micro batch %s, activation checkpointing %s; %s steps, the first %s left out; MFU against %s TFLOP/s\n\n' \
			"$c_model" "$SEQ" "$BATCH" "$([ "$c_ckpt" = 1 ] && echo on || echo off)" "$STEPS" "$WARMUP" "$PEAK"
		printf '  %-40s %12s %10s %10s %8s %7s %9s %11s  %s\n' run "mean ms" "median ms" tokens/s TFLOPS MFU "GPU busy" "Adam hidden" status
		for row in "${ROWS[@]}"; do
			IFS='|' read -r -a f <<<"$row"
			printf '  %-40s %12s %10s %10s %8s %7s %9s %11s  %s\n' "${f[@]}"
		done
	fi
	printf '\n'
	local b=""
	[ "$md" = md ] && b="- "
	[ "$md" = md ] || lead='  '
	printf '%stokens/s ratio stepgraph / offload: %s; stepgraph / gpu: %s; stepgraph / DeepSpeed offload: %s; stepgraph / DeepSpeed SuperOffload: %s\n' "$b" "$r_off" "$r_gpu" "$r_ds" "$r_so"
	[ -z "$sg_adam" ] || printf '%sstepgraph last step: CPU Adam %s ms in all, %s%% of it under GPU work\n' "$b" "$sg_adam" "${sg_hidden:-?}"
	[ -z "$sg_roll" ] || printf '%sSuperOffload: %s speculative sub-group steps rolled back\n' "$b" "$sg_roll"
	for line in "${sg_copies[@]+"${sg_copies[@]}"}"; do
		printf '%sstepgraph trace of the last step: %s\n' "$b" "$line"
	done
	for m in "${TORCH_MODES[@]+"${TORCH_MODES[@]}"}"; do
		[ -z "${T_INFO[$m]:-}" ] || printf '%storch %s: %s\n' "$b" "$m" "${T_INFO[$m]}"
	done
	printf '%starget stepgraph MFU >= 40%%: %s (%s)\n' "$b" "$mfu_met" "$(mfu "$sg_mtf")"
	printf '%starget stepgraph >= 1.5x the offload baseline (tokens/s): %s (%s)\n' "$b" "$off_met" "$r_off"
	if [ "$r_ds" != n/a ]; then
		printf '%starget stepgraph faster than DeepSpeed'"'"'s offload (tokens/s): %s (%s)\n' "$b" \
			"$(awk -v r="${r_ds%x}" 'BEGIN { print (r > 1) ? "met" : "not met" }')" "$r_ds"
	fi
	if [ "$md" = md ]; then
		printf '\n## Reproduce\n\nFrom the repository root (logs in %s): the whole benchmark, then each run:\n\n```sh\n' "\`$LOGS\`"
	else
		printf '\nreproduce (from the repository root; logs in %s): the whole benchmark, then each run:\n' "$LOGS"
	fi
	printf '%s%s\n' "$lead" "$(q "${ME[@]}")"
	[ "$CALIBRATE" = 0 ] || printf '%s%s\n' "$lead" "$(q "${SG_CAL[@]}")"
	printf '%s%s\n' "$lead" "$(q "${SG_CMD[@]}")"
	for m in "${TORCH_MODES[@]+"${TORCH_MODES[@]}"}"; do
		torch_cmd "$m"
		printf '%s%s\n' "$lead" "$(q "${TCMD[@]}")"
	done
	if [ "$md" = md ]; then printf '```\n'; fi
	return 0
}
printf '\n'
report text
report md >"$OUT"
say "wrote $OUT (logs in $LOGS)"
exit "$failed"
