#!/bin/sh
# test_graph_html.sh - the graph views in a real browser: `stepgraph graph
# --format html` pages (the 8B SuperOffload step, and the default job with a
# trace) loaded by headless Chromium from Debian with no network, the DOM
# after the page's script ran checked for the nodes, the folded groups, a
# search's matches (counted independently from the graph JSON), the selected
# node's details, the critical-path highlight and the timeline's bars (one per
# traced task); a screenshot of the 8B page is kept in tests/artifacts/.
# Folding never loses a node: the unfolded SVG has the JSON's nodes and edges.
# Skipped without chromium (scripts/setup.sh installs it). Prints TAP.
set -u
SG_TEST_NAME=html
. "${SG_SRCDIR:-.}/tests/test_env.sh"
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if ! command -v dot >/dev/null; then
	skip_all "needs Graphviz"
fi
plan 21
CFG8=$SRC/configs/llama-3.1-8b-superoffload.json

# folding never loses a node (no browser needed)
# (untiled: Graphviz needs minutes for the thousands of optimizer chunks)
"$BIN" graph "$CFG8" --optimizer_tile 0 --format json -o "$TMP/g8u.json" 2>/dev/null
"$BIN" graph "$CFG8" --optimizer_tile 0 --unfold --format svg -o "$TMP/full.svg" 2>/dev/null
"$BIN" graph "$CFG8" --optimizer_tile 0 --unfold --format dot -o "$TMP/full.dot" 2>/dev/null
"$PY" - "$TMP/g8u.json" "$TMP/full.svg" "$TMP/full.dot" <<'PYEOF'
import json, re, sys
g = json.load(open(sys.argv[1]))
svg = open(sys.argv[2]).read()
dot = open(sys.argv[3]).read()
ids = set(int(m) for m in re.findall(r'<g id="n(\d+)" class="node"', svg))
assert ids == set(range(len(g["nodes"]))), (len(ids), len(g["nodes"]))
# an edge against the phase grid is written reversed, drawn back (dir=back)
edges = set((int(a), int(b)) if not back else (int(b), int(a))
            for a, b, back in re.findall(r"^  n(\d+) -> n(\d+)( \[dir=back\])?;$", dot, re.M))
assert edges == set(map(tuple, g["edges"])), (len(edges), len(g["edges"]))
PYEOF
ok $? "unfolded: the SVG has every node of the graph JSON, the DOT every edge"

"$BIN" graph "$CFG8" --format json -o "$TMP/g8.json" 2>/dev/null
"$BIN" graph "$CFG8" --format html -o "$TMP/g8.html" 2>"$TMP/g8.err"
ok $? "the 8B SuperOffload page is written"
! grep -Eq '(src|href)="(https?:)?//' "$TMP/g8.html"
ok $? "the page is self-contained: nothing loaded from the network"

# colour = where a task runs: the page's data and its drawing agree with the
# graph JSON's devices (CPU Adam on a CPU worker, backward on a GPU, copies on
# their link), and the drawing's legend names each fill it uses
"$PY" - "$TMP/g8.html" "$TMP/g8.json" <<'PYEOF'
import html, json, re, sys
page, g = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
data = json.loads(re.search(r'<script type="application/json" id="sg-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
want = {"adam_cpu": "cpu", "backward": "gpu", "d2h": "d2h", "h2d": "h2d", "reduce_scatter": "net"}
for n, w in zip(g["nodes"], data["where"]):
    if n["kind"] in want:
        assert w == want[n["kind"]], (n["name"], w)
folded = page[page.index('id="svg-folded"'):page.index('id="svg-full"')]
legend = dict((html.unescape(m.group(2)), m.group(1)) for m in re.finditer(r'<title>legend_\w+</title>\n<path fill="([^"]+)"[^>]*/>\n<text[^>]*>([^<]+)</text>', folded))
for kind, w in want.items():
    n = next(n for n in g["nodes"] if n["kind"] == kind)
    m = re.search(r'<g id="n%d" class="node">.*?<(?:path|polygon) fill="([^"]+)"' % n["id"], folded, re.S)
    if m:  # drawn (not folded): filled with the colour the legend gives its place
        assert m.group(1) == data["places"][w]["color"] == legend[data["places"][w]["label"]], (kind, m.group(1))
PYEOF
ok $? "colour = where a task runs: page data, drawing and legend agree (CPU Adam, GPU backward, links)"

"$BIN" run "$SRC/configs/default.json" --steps 2 --trace "$TMP/trace.json" >/dev/null 2>&1
"$BIN" graph "$SRC/configs/default.json" --format html --times "$TMP/trace.json" -o "$TMP/def.html" 2>/dev/null
ok $? "the default job's page with its trace is written"
# with a trace, "where it ran" is the trace's worker: this run had CPU
# workers only, so tasks planned for the GPU are coloured as CPU tasks
"$PY" - "$TMP/def.html" "$TMP/trace.json" <<'PYEOF'
import json, re, sys
page = open(sys.argv[1]).read()
data = json.loads(re.search(r'<script type="application/json" id="sg-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
ev = json.load(open(sys.argv[2]))["traceEvents"]
lanes = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
ran = {e["args"]["node"]: lanes[e["tid"]] for e in ev if e.get("ph") == "X" and "node" in e.get("args", {})}
checked = 0
for i, n in enumerate(data["graph"]["nodes"]):
    lane = ran.get(i, "")
    if n["device"] != "link" and lane.startswith("CPU"):
        assert data["where"][i] == "cpu", (n["name"], lane, data["where"][i])
        checked += n["device"] == "gpu"
assert checked > 10, checked
PYEOF
ok $? "with a trace each task is coloured by the worker it ran on (GPU-planned tasks that ran on CPUs: cpu)"
"$BIN" graph "$SRC/configs/default.json" --format html --times "$TMP/g8.json" -o "$TMP/bad.html" 2>"$TMP/bad.err"
[ $? -ne 0 ] && grep -q "not a Chrome trace" "$TMP/bad.err" && ! [ -e "$TMP/bad.html" ]
ok $? "a file that is not a trace is refused by name, and no page is written"

# compare: two configs, and one config on two machines (no browser needed)
Z0=$SRC/configs/deepspeed/zero0.json SO=$SRC/configs/deepspeed/superoffload.json
"$BIN" compare "$Z0" "$SO" --model tiny-llama --max_length 64 -o "$TMP/cmp.html" 2>/dev/null &&
	"$BIN" graph "$Z0" --model tiny-llama --max_length 64 --format json -o "$TMP/z0.json" 2>/dev/null &&
	"$BIN" graph "$SO" --model tiny-llama --max_length 64 --format json -o "$TMP/so.json" 2>/dev/null &&
	"$PY" - "$TMP/cmp.html" "$TMP/z0.json" "$TMP/so.json" <<'PYEOF'
import json, re, sys
page = open(sys.argv[1]).read()
a, b = (json.load(open(p)) for p in sys.argv[2:4])
row = re.search(r"<tr><th>tasks</th><td>(\d+)</td><td>(\d+)</td>", page)
assert row and (int(row.group(1)), int(row.group(2))) == (len(a["nodes"]), len(b["nodes"])), row
for kind in ("adam_cpu", "d2h", "h2d"):
    want = sum(n["kind"] == kind for n in b["nodes"])
    m = re.search(r"<tr><th>%s tasks</th><td>(\d+)</td><td>(\d+)</td>" % kind, page)
    assert m and int(m.group(1)) == 0 and int(m.group(2)) == want, (kind, m and m.groups(), want)
assert page.count("<svg") >= 2
PYEOF
ok $? "compare zero0 with SuperOffload: task counts per kind as each graph's JSON has them, both drawings"
"$BIN" compare "$CFG8" --model llama-3.2-3b --machines gh200,mi300a -o "$TMP/cmp2.html" 2>/dev/null &&
	"$PY" - "$TMP/cmp2.html" <<'PYEOF'
import re, sys
page = open(sys.argv[1]).read()
assert "on gh200" in page and "on mi300a" in page
m = re.search(r"<tr><th>lower bound \(ms\)</th><td>([\d.]+)</td><td>([\d.]+)</td>", page)
assert m and float(m.group(1)) > 0 and m.group(1) != m.group(2), m and m.groups()
PYEOF
ok $? "compare one config on gh200 and mi300a: each machine's lower bound"
"$BIN" run "$SRC/configs/default.json" --steps 2 --ncpus 1 --trace "$TMP/trace1.json" >/dev/null 2>&1
"$BIN" compare "$SRC/configs/default.json" "$SRC/configs/default.json" \
	--times "$TMP/trace.json,$TMP/trace1.json" -o "$TMP/cmp3.html" 2>/dev/null &&
	[ "$(grep -c '<rect class="bar"' "$TMP/cmp3.html")" -eq "$("$PY" -c 'import json,sys
print(sum(1 for f in sys.argv[1:] for e in json.load(open(f))["traceEvents"] if e.get("ph") == "X" and "node" in e.get("args", {})))' "$TMP/trace.json" "$TMP/trace1.json")" ] &&
	grep -q "traced step (ms)" "$TMP/cmp3.html"
ok $? "compare with two traces: both timelines on one axis (a bar per task of each)"
"$BIN" compare "$Z0" -o "$TMP/c4.html" 2>"$TMP/c4.err"
[ $? -ne 0 ] && grep -q "two machines" "$TMP/c4.err" && ! [ -e "$TMP/c4.html" ]
ok $? "compare with one config and no second machine is refused, saying what is missing"

# the Chrome trace's "critical path" lane: a chain in which each task follows
# the one before it by a dependency (graph JSON) or on the same worker, ending
# with the step's last task
"$BIN" graph "$SRC/configs/default.json" --format json -o "$TMP/def.json" 2>/dev/null
"$PY" - "$TMP/trace.json" "$TMP/def.json" <<'PYEOF'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
edges = set(map(tuple, json.load(open(sys.argv[2]))["edges"]))
tasks = {e["args"]["node"]: e for e in ev if e.get("ph") == "X" and "node" in e.get("args", {})}
path = sorted((e for e in ev if e.get("cat") == "critical path"), key=lambda e: e["args"]["position"])
ids = [e["args"]["on_path"] for e in path]
assert len(ids) > 3, ids
for a, b in zip(ids, ids[1:]):
    same_worker = tasks[a]["tid"] == tasks[b]["tid"] and tasks[a]["ts"] + tasks[a]["dur"] <= tasks[b]["ts"] + 1e-3
    assert (a, b) in edges or same_worker, (a, b)
last = max(tasks.values(), key=lambda e: e["ts"] + e["dur"])
assert ids[-1] == last["args"]["node"], (ids[-1], last["args"]["node"])
PYEOF
ok $? "the trace's critical-path lane is a chain of dependencies and worker order ending with the last task"

# reports: run and simulate write the page of the step they ran
"$BIN" run "$SRC/configs/default.json" --steps 2 --report "$TMP/run.html" >/dev/null 2>&1 &&
	grep -q "Critical path (executed)" "$TMP/run.html" && grep -q '"times":{"start"' "$TMP/run.html"
ok $? "run --report: the page with the last step's times and executed critical path"
"$BIN" simulate "$CFG8" --machine gh200 --report "$TMP/sim.html" >/dev/null 2>&1 &&
	grep -q "Lower bound of the step on gh200" "$TMP/sim.html" && grep -q '"times":{"start"' "$TMP/sim.html"
ok $? "simulate --report: the page of the simulated step, its bound on the simulated machine"

if [ -z "$CHROMIUM" ]; then
	for d in "8B page in Chromium" "search" "details" "critical path" "screenshot" "timeline" "timeline and critical path"; do
		skip "$d: no chromium (scripts/setup.sh installs Debian's)"
	done
	exit 0
fi
browse() { # PAGE HASH OUT: the DOM after the script ran, offline
	timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-extensions \
		--no-first-run --virtual-time-budget=8000 --dump-dom "file://$1#$2" >"$3" 2>/dev/null
}
browse "$TMP/g8.html" "search=adam_cpu&select=grad_norm" "$TMP/g8.dom"
"$PY" - "$TMP/g8.dom" "$TMP/g8.json" <<'PYEOF'
import json, re, sys
dom, g = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
assert 'data-ready="1"' in dom, "the script did not finish"
folded = dom[dom.index('id="svg-folded"'):dom.index('id="svg-full"')]
drawn = set(re.findall(r'<g id="n(\d+)" class="node', folded))
groups = set(re.findall(r'<g id="f(\d+)" class="node', folded))
assert 10 < len(drawn) < len(g["nodes"]) / 4 and len(groups) >= 2, (len(drawn), len(groups))
PYEOF
ok $? "Chromium runs the 8B page: a readable folded view (few nodes drawn, groups folded)"
want=$("$PY" -c 'import json,sys; print(sum("adam_cpu" in n["name"] or n["kind"] == "adam_cpu" for n in json.load(open(sys.argv[1]))["nodes"]))' "$TMP/g8.json")
grep -q "id=\"hits\">$want match" "$TMP/g8.dom"
ok $? "search adam_cpu finds the $want tasks the graph JSON has"
grep -q "<h2>grad_norm</h2>" "$TMP/g8.dom" && grep -q "<th>kind</th><td>grad_norm</td>" "$TMP/g8.dom" &&
	grep -q "<th>runs on</th><td>GPU worker</td>" "$TMP/g8.dom"
ok $? "selecting a node shows its details (kind, where it runs, accesses, neighbours)"
[ "$(grep -o 'sg-crit' "$TMP/g8.dom" | wc -l)" -gt 3 ]
ok $? "the critical path is highlighted"
mkdir -p "$BUILD/tests/artifacts"
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,1000 \
	--virtual-time-budget=8000 --screenshot="$BUILD/tests/artifacts/graph-8b.png" "file://$TMP/g8.html" >/dev/null 2>&1
[ "$(wc -c <"$BUILD/tests/artifacts/graph-8b.png" 2>/dev/null || echo 0)" -gt 20000 ]
ok $? "a screenshot of the 8B page is kept: tests/artifacts/graph-8b.png"
browse "$TMP/def.html" "view=full" "$TMP/def.dom"
tasks=$("$PY" -c 'import json,sys; print(sum(1 for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and "node" in e.get("args", {})))' "$TMP/trace.json")
bars=$(grep -Eo '<rect class="bar[^"]*" id="bar[0-9]+"' "$TMP/def.dom" | wc -l)
[ "$bars" -eq "$tasks" ] && [ "$tasks" -gt 0 ]
ok $? "the timeline has a bar for each of the trace's $tasks tasks"
grep -q "Critical path (executed)" "$TMP/def.dom" && grep -Eq '<rect class="bar sg-crit" id="bar[0-9]+"' "$TMP/def.dom"
ok $? "with a trace the executed critical path is marked, in the timeline too"
