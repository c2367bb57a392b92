#!/usr/bin/env bash
# Three step graphs side by side, their JSON and summaries, and a trace (README.md).
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
len=128
ci && len=32
for cfg in zero0 zero3 superoffload; do
	say "$cfg"
	args=(--model tiny-llama --max_length $len --set gradient_accumulation_steps=1)
	[ $cfg = superoffload ] && args+=(--set zero_optimization.sub_group_size=150000)
	"$STEPGRAPH" graph "$REPO_ROOT/configs/deepspeed/$cfg.json" "${args[@]}" --summary
	"$STEPGRAPH" graph "$REPO_ROOT/configs/deepspeed/$cfg.json" "${args[@]}" --format svg -o "$OUT/$cfg.svg"
	"$STEPGRAPH" graph "$REPO_ROOT/configs/deepspeed/$cfg.json" "${args[@]}" --format json -o "$OUT/$cfg.json"
done
cat >"$OUT/index.html.tmp" <<'HTML'
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>stepgraph: one step under three DeepSpeed configs</title>
<style>body{font-family:sans-serif;margin:1em} .row{display:flex;gap:1em;align-items:flex-start}
.col{flex:1;min-width:0} .col img{width:100%;border:1px solid #ccc}</style></head><body>
<h1>One training step of tiny-llama under three DeepSpeed configs</h1>
<div class="row">
<div class="col"><h2>ZeRO stage 0</h2><a href="zero0.svg"><img src="zero0.svg" alt="stage 0 graph"></a></div>
<div class="col"><h2>ZeRO stage 3</h2><a href="zero3.svg"><img src="zero3.svg" alt="stage 3 graph"></a></div>
<div class="col"><h2>Stage 3 + SuperOffload</h2><a href="superoffload.svg"><img src="superoffload.svg" alt="SuperOffload graph"></a></div>
</div>
<p>Data: zero0.json, zero3.json, superoffload.json. A real step's trace: trace.json
(chrome://tracing or ui.perfetto.dev).</p>
</body></html>
HTML
mv "$OUT/index.html.tmp" "$OUT/index.html"
say "a traced run of the default job"
"$STEPGRAPH" run "$REPO_ROOT/configs/default.json" --steps 3 --max_length $len --trace "$OUT/trace.json"
echo "wrote $OUT/index.html, $OUT/{zero0,zero3,superoffload}.{svg,json}, $OUT/trace.json"
