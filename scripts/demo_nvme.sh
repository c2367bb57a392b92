#!/usr/bin/env bash
# demo_nvme.sh - ZeRO-Infinity's NVMe offload on this machine (docs/memory.md, "NVMe offload"):
# a model whose training state (fp32 master, Adam moments and gradients: 16
# bytes a parameter) is at least 1.5x this machine's RAM trains a few steps
# on the CPU with its optimizer state and parameters on a StarPU disk node,
# measured against the disk's own bandwidth.
#
#   scripts/demo_nvme.sh                      # models/llama-2.5b.json, 3 steps
#   NVME_PATH=/mnt/nvme STEPS=2 scripts/demo_nvme.sh
#
# 1. The disk: dd with O_DIRECT writes then reads PROBE_GIB (default 4) GiB in
#    NVME_PATH in 64 MiB blocks (the size of a sub-group tile's buffers).
# 2. The run: `stepgraph run` (ZeRO-3, bf16, offload_optimizer and
#    offload_param device "nvme", sub_group_size 1e8, lookahead 1) with the
#    step log every step; the process's storage bytes (/proc/PID/io
#    read_bytes, write_bytes) are sampled at each step's log line.
# 3. Per step: the bytes read and written, the time, and the disk bound
#    (read bytes / read rate + written bytes / write rate); the factor is the
#    step's time over that bound. Then the least a step must move (the state
#    on disk read once and written once) and its bound.
# Needs about 36 GB free in NVME_PATH; everything it writes there is removed.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${STEPGRAPH:-$SRC/stepgraph}
NVME_PATH=${NVME_PATH:-$SRC/nvme-demo}
MODEL=${MODEL:-$SRC/models/llama-2.5b.json}
STEPS=${STEPS:-3}
PROBE_GIB=${PROBE_GIB:-4}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/demo_nvme.XXXXXX")}
mkdir -p "$NVME_PATH" "$OUT"
echo "# demo_nvme.sh $(date -u +%Y-%m-%dT%H:%MZ) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"

ram=$(awk '/MemTotal/ {print $2 * 1024}' /proc/meminfo)
params=$("$BIN" model info "$MODEL" | awk '/^params/ {gsub(",", "", $2); print $2}')
awk -v r="$ram" -v p="$params" 'BEGIN { s = 16 * p; printf "model %s: %.2f B parameters, training state %.1f GiB (16 B a parameter) = %.2fx the RAM (%.1f GiB)\n", ARGV[1], p / 1e9, s / 2^30, s / r, r / 2^30 }' "$(basename "$MODEL")"

# 1. the disk, with O_DIRECT (no page cache)
probe="$NVME_PATH/demo-probe.$$"
trap 'rm -f "$probe"' EXIT
count=$((PROBE_GIB * 16))
w=$(dd if=/dev/zero of="$probe" bs=64M count=$count oflag=direct 2>&1 | awk '/copied/ {print $(NF-1) * ($NF == "GB/s" ? 1e9 : 1e6)}')
r=$(dd if="$probe" of=/dev/null bs=64M iflag=direct 2>&1 | awk '/copied/ {print $(NF-1) * ($NF == "GB/s" ? 1e9 : 1e6)}')
rm -f "$probe"
echo "disk ($NVME_PATH): O_DIRECT write $(awk -v x="$w" 'BEGIN {printf "%.2f", x / 1e9}') GB/s, read $(awk -v x="$r" 'BEGIN {printf "%.2f", x / 1e9}') GB/s ($PROBE_GIB GiB, 64 MiB blocks)"

# 2. the run
cat >"$OUT/run.json" <<JSON
{"deepspeed_config": {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "bf16": {"enabled": true},
  "gradient_clipping": 0,
  "zero_optimization": {"stage": 3, "sub_group_size": 100000000,
    "offload_optimizer": {"device": "nvme", "nvme_path": "$NVME_PATH", "buffer_count": 2},
    "offload_param": {"device": "nvme", "nvme_path": "$NVME_PATH", "buffer_count": 2}}},
 "model": "$MODEL", "max_length": 16, "seed": 42, "lookahead": 1, "sched": "dmdas"}
JSON
stdbuf -oL "$BIN" run "$OUT/run.json" --steps "$STEPS" --log_interval 1 >"$OUT/run.out" 2>&1 &
pid=$!
: >"$OUT/io.txt"
# record N: the step count, the time and the process's storage bytes so far
record() {
	io=$(awk '/^read_bytes/ {r = $2} /^write_bytes/ {w = $2} END {print r, w}' /proc/$pid/io 2>/dev/null || true)
	[ -z "$io" ] || echo "$1 $(date +%s.%N) $io" >>"$OUT/io.txt"
}
base=0 seen=0
while kill -0 $pid 2>/dev/null; do
	if [ $base = 0 ] && grep -q 'start-up' "$OUT/run.out"; then
		record 0
		base=1
	fi
	n=$(grep -c '^Step ' "$OUT/run.out" || true)
	if [ "$n" -gt "$seen" ]; then
		record "$n"
		seen=$n
	fi
	sleep 0.2
done
rc=0
wait $pid || rc=$?
grep -v '^  (' "$OUT/run.out"
[ $rc -eq 0 ] || { echo "demo_nvme.sh: the run failed ($rc); see $OUT/run.out"; exit 1; }

# 3. per step against the disk bound
echo "step | read GB | written GB | time s | disk bound s | factor"
awk -v rr="$r" -v ww="$w" '
	$1 ~ /^[0-9]+$/ { if (have && $1 == prev + 1) {
		rd = ($3 - r0) / 1e9; wr = ($4 - w0) / 1e9; t = $2 - t0
		bound = rd * 1e9 / rr + wr * 1e9 / ww
		printf "%d | %.2f | %.2f | %.1f | %.1f | %.2f\n", $1, rd, wr, t, bound, t / bound }
	  prev = $1; t0 = $2; r0 = $3; w0 = $4; have = 1 }' "$OUT/io.txt"
# the least a step moves: every byte on disk read once and written once
awk -v rr="$r" -v ww="$w" '/on disk: [0-9.]+ GiB/ { for (i = 1; i <= NF; i++) if ($i == "disk:") d = $(i + 1) * 2^30 }
	END { if (d) printf "the state on disk read and written once: %.2f GB each way, bound %.1f s (reads of a buffer evicted before its last use add to the figures above)\n", d / 1e9, d / rr + d / ww }' "$OUT/run.out"
echo "files: $OUT (run.out, io.txt); $NVME_PATH holds nothing of this run"
