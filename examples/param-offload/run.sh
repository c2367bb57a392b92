#!/usr/bin/env bash
# ZeRO-3 parameter offload on machines you may not own: what it buys in model
# size and what it costs in step time, on GH200, an H100 behind PCIe and
# MI300A (README.md).
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
machines=gh200,h100-pcie,mi300a
if ci; then
	cfg=$REPO_ROOT/configs/llama-3.2-1b-superoffload-gpu.json model=()
else
	cfg=$REPO_ROOT/configs/llama-3.1-8b-superoffload.json model=(--model llama-3.2-3b)
fi
say "step time with and without parameter offload (simulated, dmdas)"
"$STEPGRAPH" tune "$cfg" "${model[@]}" --machines $machines --sched dmdas --priorities on \
	--vary zero_optimization.offload_param.device=none,cpu --out "$OUT/tune"
say "the largest Llama-shaped model that fits each machine, with and without"
for m in ${machines//,/ }; do
	for op in none cpu; do
		"$STEPGRAPH" fit "$REPO_ROOT/configs/llama-3.1-8b-superoffload.json" --machine "$m" \
			--set zero_optimization.offload_param.device=$op >"$OUT/fit-$m-$op.txt"
		grep '^largest that fits' "$OUT/fit-$m-$op.txt" | sed "s/^/$m, offload_param $op: /"
	done
done
say "summary"
"$PY" - "$OUT" "$machines" <<'PYEOF'
import csv, re, sys
out, machines = sys.argv[1], sys.argv[2].split(",")
rows = {(r["machine"], r["zero_optimization.offload_param.device"]): r
        for r in csv.DictReader(open(out + "/tune.csv"))}
def largest(m, op):
    t = open("%s/fit-%s-%s.txt" % (out, m, op)).read()
    g = re.search(r"^largest that fits: .*, ([0-9.]+) B parameters", t, re.M)
    return float(g.group(1)) if g else float("nan")
print("%-10s %14s %14s %9s %16s %16s" % ("machine", "step ms none", "step ms cpu", "cost",
                                         "largest B none", "largest B cpu"))
for m in machines:
    a, b = (float(rows[(m, op)]["step_ms"]) for op in ("none", "cpu"))
    print("%-10s %14.2f %14.2f %8.1f%% %16.2f %16.2f" % (m, a, b, 100 * (b / a - 1),
                                                     largest(m, "none"), largest(m, "cpu")))
PYEOF
