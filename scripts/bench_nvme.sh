#!/usr/bin/env bash
# bench_nvme.sh - ZeRO-Infinity's disk tier measured on this machine: the
# disk's bandwidth, the disk bytes a step reads and writes against it (the
# bound), stepgraph's step with its optimizer state on disk, and DeepSpeed's
# ZeRO-Infinity step on the same model where it runs here.
#
#   scripts/bench_nvme.sh                              # hidden 512, 4 layers, 3 steps
#   scripts/bench_nvme.sh --hidden 1024 --layers 8 --steps 4 --dir /mnt/nvme
#
# 1. probe   scripts/disk_probe.py: PROBE_MIB (default 4096) of random bytes
#            written to --dir and read back with O_DIRECT (the page cache is
#            out of the path, so the size need not exceed RAM), GB/s each way.
# 2. model   a Llama shape from the arguments (--hidden, --layers,
#            --intermediate (default 3 x hidden), --vocab (default 32000),
#            heads of 64, half as many KV heads, untied head) under
#            ZeRO-3, fp32 AdamW, micro batch 1 of --seq tokens (default 64),
#            offload_optimizer {"device": "nvme", "nvme_path": --dir/...,
#            "buffer_count": --buffer-count (default 4)}, --sub-group-size
#            (default 10,000,000) parameters per sub-group.
# 3. bound   `stepgraph graph --format json`'s disk bytes per step (the state
#            on disk read and written once: graph/disk_tier.h) over the probed
#            read and write bandwidths: no step can be shorter.
# 4. stepgraph `stepgraph run` --steps (default 3) with the state on disk: the
#            mean step after the first, and the disk bytes the process read
#            and wrote per step (/proc/PID/io from the first step's log line
#            to the end, over the steps after it). A build whose `run` refuses
#            "nvme" (the disk runtime is not in it) says so: n/a.
# 5. DeepSpeed scripts/bench_nvme_ds.py in ~/.cache/stepgraph/venv-bench
#            (BENCH_VENV; deepspeed and torch): the same shape under ZeRO-3
#            with offload_optimizer nvme on the CPU accelerator, per step time
#            and /proc/self/io bytes; where its async_io op (libaio) cannot
#            run here, the line says why. --no-deepspeed skips it.
# Prints the figures, the machine file's "disk" block for this disk (free
# space as capacity), step / bound for each, stepgraph / DeepSpeed, and the
# command that reproduces the run. The files under --dir are removed at exit.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BIN=${STEPGRAPH:-$ROOT/stepgraph}
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
VENV=${BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph/venv-bench}
HIDDEN=512 LAYERS=4 INTER="" VOCAB=32000 SEQ=64 STEPS=3 DIR=${TMPDIR:-/var/tmp}
PROBE_MIB=${PROBE_MIB:-4096} SUBGROUP=10000000 BUFFERS=4 DS=1
say() { printf 'bench_nvme: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--hidden) HIDDEN=$2; shift ;;
	--layers) LAYERS=$2; shift ;;
	--intermediate) INTER=$2; shift ;;
	--vocab) VOCAB=$2; shift ;;
	--seq) SEQ=$2; shift ;;
	--steps) STEPS=$2; shift ;;
	--dir) DIR=$2; shift ;;
	--sub-group-size) SUBGROUP=$2; shift ;;
	--buffer-count) BUFFERS=$2; shift ;;
	--no-deepspeed) DS=0 ;;
	-h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;/^set -u/d'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
	[ $# -gt 0 ] && shift
done
INTER=${INTER:-$((3 * HIDDEN))}
for v in HIDDEN LAYERS INTER VOCAB SEQ STEPS SUBGROUP BUFFERS PROBE_MIB; do
	case ${!v} in '' | *[!0-9]* | 0) die "$v must be a positive integer (got '${!v}')" ;; esac
done
[ $((HIDDEN % 128)) -eq 0 ] || die "--hidden must be a multiple of 128 (heads of 64, half as many KV heads)"
[ "$STEPS" -ge 2 ] || die "--steps must be at least 2 (the first step is left out)"
{ [ -d "$DIR" ] && [ -w "$DIR" ]; } || die "--dir $DIR: not a writable directory"
[ -x "$BIN" ] || die "$BIN: not built (make)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_nvme.XXXXXX")
NVME="$DIR/bench_nvme.$$"
cleanup() { rm -rf "$tmp" "$NVME" "$NVME.ds"; }
trap cleanup EXIT
mkdir -p "$NVME" || die "cannot create $NVME"
REPRODUCE="reproduce: scripts/bench_nvme.sh --hidden $HIDDEN --layers $LAYERS --intermediate $INTER --vocab $VOCAB --seq $SEQ --steps $STEPS --sub-group-size $SUBGROUP --buffer-count $BUFFERS --dir $DIR$([ $DS = 0 ] && echo ' --no-deepspeed')   (PROBE_MIB=$PROBE_MIB; on $(hostname), $(nproc) CPUs)"

# 1. the disk
say "probing $DIR with $PROBE_MIB MiB (O_DIRECT)"
PROBE=$("$PY" "$HERE/disk_probe.py" "$DIR" --size-mib "$PROBE_MIB") || die "the disk probe failed"
RBW=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["read_gbs"])' "$PROBE")
WBW=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["write_gbs"])' "$PROBE")

# 2. the model and the config
cat >"$tmp/model.json" <<JSON
{"name": "bench-nvme-h$HIDDEN-l$LAYERS", "architecture": "llama", "hidden_size": $HIDDEN,
 "intermediate_size": $INTER, "num_hidden_layers": $LAYERS, "num_attention_heads": $((HIDDEN / 64)),
 "num_key_value_heads": $((HIDDEN / 128)), "head_dim": 64, "vocab_size": $VOCAB,
 "max_position_embeddings": $((SEQ > 1024 ? SEQ : 1024)), "tie_word_embeddings": false,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "attention_bias": false}
JSON
cat >"$tmp/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 3, "sub_group_size": $SUBGROUP,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$NVME", "buffer_count": $BUFFERS}}}
JSON
ARGS=(--model "$tmp/model.json" --max_length "$SEQ")

# 3. the disk bytes per step and the bound
"$BIN" graph "$tmp/ds.json" "${ARGS[@]}" --format json >"$tmp/graph.json" 2>"$tmp/graph.err" ||
	die "stepgraph graph failed: $(tail -n 3 "$tmp/graph.err")"
read -r PARAMS DISK RB WB RAM < <("$PY" - "$tmp/graph.json" "$tmp/model.json" <<'PYEOF'
import json, sys
g = json.load(open(sys.argv[1]))["summary"]
m = json.load(open(sys.argv[2]))
h, i, L, v = m["hidden_size"], m["intermediate_size"], m["num_hidden_layers"], m["vocab_size"]
q, kv = m["num_attention_heads"] * 64, m["num_key_value_heads"] * 64
P = L * (2 * h * q + 2 * h * kv + 3 * h * i + 2 * h) + 2 * v * h + h
d = g["disk"]
print(P, d["bytes"], d["read_bytes"], d["write_bytes"], d["ram_bytes"])
PYEOF
)
BOUND_MS=$("$PY" -c 'import sys; r,w,rb,wb=map(float,sys.argv[1:]); print("%.1f" % ((r/(rb*1e9)+w/(wb*1e9))*1e3))' "$RB" "$WB" "$RBW" "$WBW")

# 4. stepgraph
say "stepgraph run: $STEPS steps"
"$BIN" run "$tmp/ds.json" "${ARGS[@]}" --steps "$STEPS" --warmup_steps 0 --log_interval 1 \
	>"$tmp/run.out" 2>&1 &
pid=$!
io_at=""
while kill -0 "$pid" 2>/dev/null; do
	io=$(awk '/^read_bytes/ { r = $2 } /^write_bytes/ { w = $2 } END { print r, w }' "/proc/$pid/io" 2>/dev/null)
	[ -n "$io" ] && last_io=$io
	if [ -z "$io_at" ] && grep -q '^Step 1 |' "$tmp/run.out"; then io_at=$io; fi
	sleep 0.2
done
wait "$pid"
run_rc=$?
SG_MS="" SG_RB="" SG_WB="" SG_WHY=""
if [ $run_rc -ne 0 ]; then
	SG_WHY=$(grep -m1 'stepgraph: ' "$tmp/run.out" | cut -c1-200)
elif [ -n "$io_at" ]; then
	SG_MS=$(sed -n 's/^Step \([0-9]*\) .*Time: \([0-9.]*\) ms.*/\1 \2/p' "$tmp/run.out" |
		awk '$1 > 1 { s += $2; n++ } END { if (n) printf "%.1f", s / n }')
	read -r r0 w0 <<<"$io_at"
	read -r r1 w1 <<<"${last_io:-$io_at}"
	SG_RB=$(((r1 - r0) / (STEPS - 1)))
	SG_WB=$(((w1 - w0) / (STEPS - 1)))
fi

# 5. DeepSpeed
DS_MS="" DS_RB="" DS_WB="" DS_WHY="skipped (--no-deepspeed)"
if [ $DS = 1 ]; then
	if ! [ -x "$VENV/bin/python" ]; then
		DS_WHY="no Python with deepspeed at $VENV (scripts/bench_venv.sh makes it)"
	else
		say "DeepSpeed ZeRO-Infinity: $STEPS steps"
		"$VENV/bin/python" "$HERE/bench_nvme_ds.py" --model "$tmp/model.json" --seq "$SEQ" \
			--steps "$STEPS" --nvme-path "$NVME.ds" --sub-group-size "$SUBGROUP" \
			--buffer-count "$BUFFERS" >"$tmp/ds.out" 2>"$tmp/ds.err"
		ds_rc=$?
		DS_WHY=$(sed -n 's/^unavailable: //p' "$tmp/ds.out" | head -n 1)
		if [ $ds_rc -eq 0 ]; then
			read -r DS_MS DS_RB DS_WB < <("$PY" - "$tmp/ds.out" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')][1:]
n = len(rows) or 1
print("%.1f %d %d" % (sum(r["ms"] for r in rows) / n, sum(r["read_bytes"] for r in rows) // n,
                      sum(r["write_bytes"] for r in rows) // n))
PYEOF
			)
		elif [ -z "$DS_WHY" ]; then
			DS_WHY="failed: $(grep -v WARNING "$tmp/ds.err" | tail -n 2 | tr '\n' ' ' | cut -c1-240)"
		fi
	fi
fi

# the report
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf '%s\n\n' "$REPRODUCE"
printf 'disk %s: read %s GB/s, write %s GB/s (O_DIRECT, %s MiB)\n' "$DIR" "$RBW" "$WBW" "$PROBE_MIB"
# the machine file's block for this disk (docs/simulate.md, machine model keys)
CAP=$(df -P -B 1000000000 "$DIR" | awk 'NR == 2 { print $4 }')
printf 'machine file block: "disk": {"name": "%s (probed)", "capacity_gb": %s, "read_gbs": %s, "write_gbs": %s}\n' \
	"$(df -P "$DIR" | awk 'NR == 2 { print $1 }')" "$CAP" "$RBW" "$WBW"
printf 'model: llama hidden %s, %s layers, intermediate %s, vocab %s: %s parameters; sequence %s, ZeRO-3, fp32 AdamW, buffer_count %s\n' \
	"$HIDDEN" "$LAYERS" "$INTER" "$VOCAB" "$PARAMS" "$SEQ" "$BUFFERS"
printf 'state on disk %s (12 B a parameter: master, m, v); RAM working set %s\n' "$(mb "$DISK")" "$(mb "$RAM")"
printf 'disk bytes per step (graph): read %s, written %s; bound at the probed bandwidths: %s ms\n\n' \
	"$(mb "$RB")" "$(mb "$WB")" "$BOUND_MS"
printf '  %-28s %12s %14s %14s %12s\n' "" "step ms" "disk read" "disk written" "step / bound"
if [ -n "$SG_MS" ]; then
	printf '  %-28s %12s %14s %14s %11sx\n' "stepgraph" "$SG_MS" "$(mb "$SG_RB")" "$(mb "$SG_WB")" \
		"$(ratio "$SG_MS" "$BOUND_MS")"
else
	printf '  %-28s n/a: %s\n' "stepgraph" "${SG_WHY:-no step logged}"
fi
if [ -n "$DS_MS" ]; then
	printf '  %-28s %12s %14s %14s %11sx\n' "DeepSpeed ZeRO-Infinity" "$DS_MS" "$(mb "$DS_RB")" \
		"$(mb "$DS_WB")" "$(ratio "$DS_MS" "$BOUND_MS")"
else
	printf '  %-28s n/a: %s\n' "DeepSpeed ZeRO-Infinity" "$DS_WHY"
fi
if [ -n "$SG_MS" ] && [ -n "$DS_MS" ]; then
	printf '\nstepgraph / DeepSpeed step time: %sx\n' "$(ratio "$SG_MS" "$DS_MS")"
else
	printf '\nstepgraph / DeepSpeed: n/a (both must run)\n'
fi
printf '(steps after the first; disk bytes from /proc/PID/io, the block device'"'"'s bytes)\n'
