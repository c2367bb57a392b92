#!/bin/sh
# test_help_truth.sh - the help texts and docs/config-keys.md against the
# parsers, checked from the outside (not through the code that prints the
# help). Prints TAP.
#
# (a) every option that `stepgraph CMD --help` names, in its usage lines or
#     its option lines, is accepted by CMD: passed with a value (or, for a
#     switch, alone) in front of a deliberately bad `--max_length`, the error
#     must be the one about max_length (or about the probe value), never
#     "unknown option" nor "unexpected argument" (which is also what a switch
#     that wrongly eats the next word, or a value option that does not, gives);
# (b) every option in the commands' option tables (runtime/cli/cmd_*.c and
#     the run options in runtime/config/run_options.c) is named in that
#     command's --help;
# (c) every key docs/config-keys.md lists is recognised by its reader: all
#     of them set to null in one config (null = "not given"), the reader must
#     not call any of them unknown (SG_HELP_TRUTH_FULL=1: also, one run per
#     key, a wrong-typed value must be refused with an error naming its path);
# (d) every key in the DeepSpeed reader's tables (runtime/config/ds_config*.c)
#     and in the run options' table is written in docs/config-keys.md;
# (e) the keys the doc says are ignored with a warning are warned about when
#     set away from DeepSpeed's default, and not at the default.
# Negative controls show each check can fail.
set -u
SRC=${SG_SRCDIR:-.}
. "$SRC/tests/tap_lib.sh"
BIN=${SG_BUILDDIR:-.}/stepgraph
if ! [ -x "$BIN" ]; then
	skip_all "needs $BIN"
fi
tap_tmpdir help_truth
tap_starpu_home
export STEPGRAPH_MODELS_DIR="${STEPGRAPH_MODELS_DIR:-$SRC/models}"
export STEPGRAPH_MACHINES_DIR="${STEPGRAPH_MACHINES_DIR:-$SRC/configs/machines}"
CONFIG="$SRC/configs/default.json"
# the OpenBLAS kernels stepgraph would choose, set beforehand: it then does not
# re-execute itself on every one of the runs below
core=$("$BIN" version 2>/dev/null | sed -n 's/^BLAS:.* kernels \([A-Za-z0-9_]*\) (chosen by stepgraph.*/\1/p')
[ -n "$core" ] && [ -z "${OPENBLAS_CORETYPE:-}" ] && export OPENBLAS_CORETYPE="$core"
DOC="$SRC/docs/config-keys.md"

# ---- (a) options named in each command's --help are accepted -------------

# The commands `stepgraph --help` lists (lines "  NAME ..." under "Commands:").
"$BIN" --help >"$TMP/top.txt" 2>&1
ok $? "stepgraph --help exits 0"
awk '/^Commands:/ { on = 1; next } on && /^[^ ]/ { on = 0 }
     on && /^  [a-z]/ { print $1 }' "$TMP/top.txt" | sort -u >"$TMP/commands"
[ "$(wc -l <"$TMP/commands")" -ge 8 ]
ok $? "stepgraph --help lists the commands ($(tr '\n' ' ' <"$TMP/commands"))"

# options NAME ARITY ("value" or "switch") named in a help text: the usage
# lines (from "usage:" to the first blank line) and the option lines
# (indented, starting with '-'; the part before the description, which
# starts after two spaces). A name followed by a word is a value option.
help_options() {
	awk '
	function emit(spec,    nalt, alts, i, nw, w, arity, name) {
		nalt = split(spec, alts, /, /)
		arity = "switch"
		for (i = 1; i <= nalt; i++) {
			nw = split(alts[i], w, " ")
			if (nw > 1) arity = "value"
		}
		for (i = 1; i <= nalt; i++) {
			split(alts[i], w, " ")
			if (w[1] ~ /^--?[a-z]/) print w[1], arity
		}
	}
	/^usage:/ { usage = 1 }
	usage && /^[ \t]*$/ { usage = 0 }
	usage {
		line = $0
		while (match(line, /--?[a-z][a-z0-9_-]*( [^][ |-][^] |]*)?/)) {
			tok = substr(line, RSTART, RLENGTH)
			# "stepgraph-sim" and the like are words, not options
			pre = RSTART > 1 ? substr(line, RSTART - 1, 1) : " "
			line = substr(line, RSTART + RLENGTH)
			if (pre != " " && pre != "[" && pre != "|") continue
			nw = split(tok, w, " ")
			print w[1], (nw > 1 ? "value" : "switch")
		}
		next
	}
	/^ +-/ {
		spec = $0
		sub(/^ +/, "", spec)
		if (match(spec, /   */)) spec = substr(spec, 1, RSTART - 1)
		emit(spec)
	}' "$1" | sort -u
}

# probe CMD OPTION ARITY: the command must parse OPTION and reach the bad
# --max_length behind it.
probe() {
	cmd=$1 opt=$2 arity=$3
	extra=""
	# compare: two configs (one needs --machines), and the page
	[ "$cmd" = compare ] && extra="$CONFIG -o $TMP/compare.html"
	if [ "$arity" = value ]; then
		# shellcheck disable=SC2086
		"$BIN" "$cmd" "$CONFIG" "$opt" sgprobe --max_length sgbad $extra >"$TMP/p.out" 2>&1
	else
		# shellcheck disable=SC2086
		"$BIN" "$cmd" "$CONFIG" "$opt" --max_length sgbad $extra >"$TMP/p.out" 2>&1
	fi
	st=$?
	if grep -q "unknown option\|unexpected argument" "$TMP/p.out"; then
		return 1
	fi
	[ "$st" -ne 0 ] && grep -q -e max_length -e sgprobe -e "$opt\b" "$TMP/p.out"
}

# The run options' block ("Run options ..." to the end), printed by every
# command that loads a config. Each command's own options (the rest of its
# help) are all probed; of the block, config's are all probed, and where a
# command prints the same block, its first, middle and last options (the
# commands hand the block to one parser; SG_HELP_TRUTH_FULL=1 probes all).
"$BIN" config --help >"$TMP/help-config.txt" 2>&1
awk '/^Run options/ { on = 1 } on' "$TMP/help-config.txt" >"$TMP/block-ref"
[ -s "$TMP/block-ref" ]
ok $? "config --help has the run options' block"
for cmd in $(cat "$TMP/commands"); do
	"$BIN" "$cmd" --help >"$TMP/help-$cmd.txt" 2>&1
	ok $? "stepgraph $cmd --help exits 0"
	help_options "$TMP/help-$cmd.txt" >"$TMP/opts-$cmd"
	# the same option described once as a switch and once with a value
	dup=$(awk '{ print $1 }' "$TMP/opts-$cmd" | uniq -d | tr '\n' ' ')
	[ -z "$dup" ]
	ok $? "$cmd --help: each option has one form (not both a switch and a value option: $dup)"
	case $cmd in model | version) continue ;; esac
	awk '/^Run options/ { exit } { print }' "$TMP/help-$cmd.txt" >"$TMP/own-$cmd.txt"
	awk '/^Run options/ { on = 1 } on' "$TMP/help-$cmd.txt" >"$TMP/block-$cmd.txt"
	help_options "$TMP/own-$cmd.txt" >"$TMP/probe-$cmd"
	help_options "$TMP/block-$cmd.txt" >"$TMP/blockopts-$cmd"
	if [ "$cmd" = config ] || [ -n "${SG_HELP_TRUTH_FULL:-}" ] || ! cmp -s "$TMP/block-ref" "$TMP/block-$cmd.txt"; then
		cat "$TMP/blockopts-$cmd" >>"$TMP/probe-$cmd"
	else
		nb=$(wc -l <"$TMP/blockopts-$cmd")
		sed -n "1p;$(((nb + 1) / 2))p;\$p" "$TMP/blockopts-$cmd" >>"$TMP/probe-$cmd"
	fi
	bad=""
	count=0
	for line in $(sort -u "$TMP/probe-$cmd" | tr ' ' ':'); do
		opt=${line%:*} arity=${line#*:}
		case $opt in --help | -h) continue ;; esac
		count=$((count + 1))
		probe "$cmd" "$opt" "$arity" || bad="$bad $opt($arity): $(head -c 200 "$TMP/p.out" | tr '\n' ' ')"
	done
	[ -z "$bad" ] && [ "$count" -gt 0 ]
	ok $? "$cmd accepts each of the $count options of its --help probed${bad:+; not:$bad}"
done

# negative controls: an option no command has, and a switch given a value
! probe graph --sgprobe-nonsense value
ok $? "control: an option that is not there fails the probe"
! probe graph --summary value
ok $? "control: a switch probed as a value option fails the probe (the value is a stray argument)"
! probe graph --format switch
ok $? "control: a value option probed as a switch fails the probe (it eats --max_length)"

# ---- (b) each command's own options and the run options are in its --help -

# cmd_NAME.c: entries {"name", "o" or NULL, &value or NULL, ...} of its
# sg_cli_opt table
for f in "$SRC"/runtime/cli/cmd_*.c; do
	cmd=$(basename "$f" .c)
	cmd=${cmd#cmd_}
	[ -f "$TMP/help-$cmd.txt" ] || continue
	missing=""
	for o in $(sed -n 's/.*{"\([a-z][a-z0-9_-]*\)", \("[a-z]"\|NULL\), \(&[a-z_]*\|NULL\), \(&[a-z_]*\|NULL\)}.*/\1/p;
	                    s/.*{"\([a-z][a-z0-9_-]*\)", \("[a-z]"\|NULL\), \(&[a-z_]*\|NULL\), \(&[a-z_]*\|NULL\)},  *{"\([a-z][a-z0-9_-]*\)".*/\5/p' "$f" | sort -u); do
		[ "$o" = help ] && continue
		grep -q -- "--$o\b" "$TMP/help-$cmd.txt" || missing="$missing --$o"
	done
	[ -z "$missing" ]
	ok $? "$cmd --help names every option of cmd_$cmd.c's table${missing:+; missing:$missing}"
done
sed -n 's/^ *{ *"\([a-z_]*\)", R_[A-Z]*,.*/\1/p' "$SRC/runtime/config/run_options.c" >"$TMP/run_keys"
[ "$(wc -l <"$TMP/run_keys")" -ge 20 ]
ok $? "the run options' table has $(wc -l <"$TMP/run_keys") entries"
missing=""
for k in $(cat "$TMP/run_keys"); do
	grep -q -- "--$k\b" "$TMP/help-run.txt" || missing="$missing --$k"
done
[ -z "$missing" ]
ok $? "run --help names every run option${missing:+; missing:$missing}"

# ---- (c) every key docs/config-keys.md lists is read -----------------------

# Documented keys, one "ds PATH" or "run KEY" a line: the first column of
# the tables and the "Accepted silently" lists. A section whose heading names
# keys (## `zero_optimization`) holds paths under them: a key that does not
# start with one of them is under the first. In a cell, later keys without a
# dot are siblings of the first; "[stage3_]x" is x and stage3_x.
awk '
function parent(p) { return p ~ /\./ ? substr(p, 1, length(p) - length(leaf(p)) - 1) : "" }
function leaf(p,    a, k) { k = split(p, a, "."); return a[k] }
function full(t,    i) {
	for (i = 1; i <= nsecs; i++)
		if (t == secs[i] || index(t, secs[i] ".") == 1) return t
	return nsecs ? secs[1] "." t : t
}
function emit(kind, p) { print kind, p }
function keys(text, kind,    first, t, variants, v, nv, k) {
	first = ""
	while (match(text, /`[^`]+`/)) {
		t = substr(text, RSTART + 1, RLENGTH - 2)
		text = substr(text, RSTART + RLENGTH)
		if (t !~ /^[[a-z]/) continue
		nv = 1; variants[1] = t
		if (t ~ /^\[stage3_\]/) { sub(/^\[stage3_\]/, "", t); variants[1] = t; variants[2] = "stage3_" t; nv = 2 }
		for (k = 1; k <= nv; k++) {
			v = variants[k]
			if (kind == "run") { emit(kind, v); continue }
			if (first == "" || v ~ /\./) { v = full(v); if (first == "") first = v }
			else v = (parent(first) == "" ? "" : parent(first) ".") v
			emit(kind, v)
		}
	}
}
/^##+ / {
	nsecs = 0; acc = 0
	sect = "ds"
	if ($0 ~ /^## Run options/) sect = "run"
	if ($0 ~ /^## Shipped configs|^### Batch rule|^### JSON rules|^## Rules/) sect = ""
	h = $0
	while (match(h, /`[a-z_.0-9]+`/)) { secs[++nsecs] = substr(h, RSTART + 1, RLENGTH - 2); h = substr(h, RSTART + RLENGTH) }
	next
}
sect != "" && /^\| `/ { split($0, col, "|"); keys(col[2], sect); next }
sect == "ds" && /^Accepted silently|^Ignored with a warning/ { acc = 1; text = "" }
acc {
	text = text " " $0
	if ($0 ~ /`\.([ ]|$)/ || $0 ~ /^[ \t]*$/) {
		sub(/`\.[ ].*$/, "`", text)
		sub(/Any other key.*$/, "", text)
		gsub(/\([^)]*\)/, "", text)  # asides: "(a non-empty object, e.g. `x`: ...)"
		# each key of the list on its own: none is a sibling of another
		while (match(text, /`[^`]+`/)) {
			one = substr(text, RSTART, RLENGTH)
			text = substr(text, RSTART + RLENGTH)
			keys(one, "ds")
		}
		acc = 0
	}
}' "$DOC" | sort -u >"$TMP/doc_keys"
ndoc=$(grep -c '^ds ' "$TMP/doc_keys")
nrun=$(grep -c '^run ' "$TMP/doc_keys")
[ "$ndoc" -ge 100 ] && [ "$nrun" -ge 20 ]
ok $? "docs/config-keys.md lists $ndoc DeepSpeed keys and $nrun run options"

# One DeepSpeed config holding every documented key, each null (DeepSpeed's
# None: "not given") inside the objects its path names, and one run config
# holding every documented run option, null: the reader warns "unknown key
# PATH ignored" for each key it does not know, and must warn about none.
null_configs() { # null_configs DOC_KEYS [EXTRA_DS_PATH]: writes $TMP/null-ds.json, $TMP/null-run.json
	{ cat "$1"; [ -n "${2:-}" ] && echo "ds $2"; } | awk '
	function render(pre,    k, out, sep, name, full) {
		out = "{"; sep = ""
		for (k = 1; k <= nkids[pre]; k++) {
			name = kid[pre, k]
			full = pre == "" ? name : pre "." name
			if (full == "train_batch_size") v = "4"
			else if (full == "optimizer.type") v = "\"AdamW\""
			else if (full == "scheduler.type") v = "\"WarmupLR\""
			else if (nkids[full] > 0) v = render(full)
			else v = "null"
			out = out sep "\"" name "\": " v; sep = ", "
		}
		return out "}"
	}
	function add(path,    n, p, i, pre, full) {
		n = split(path, p, "."); pre = ""
		for (i = 1; i <= n; i++) {
			full = pre == "" ? p[i] : pre "." p[i]
			if (!((pre, p[i]) in seen)) { seen[pre, p[i]] = 1; kid[pre, ++nkids[pre]] = p[i] }
			pre = full
		}
	}
	$1 == "ds" { add($2) }
	$1 == "run" { run = run ", \"" $2 "\": null" }
	END {
		if (!(("", "train_batch_size") in seen)) add("train_batch_size")
		print render("") > "'"$TMP"'/null-ds.json"
		print "{\"deepspeed_config\": {\"train_batch_size\": 4}" run "}" > "'"$TMP"'/null-run.json"
	}'
}
null_configs "$TMP/doc_keys"
"$BIN" config "$TMP/null-ds.json" >"$TMP/null-ds.out" 2>&1
st=$?
unknown=$(grep -o "unknown key [^ ]*" "$TMP/null-ds.out" | tr '\n' ' ')
[ "$st" -ne 0 ] && unknown="$unknown (config failed: $(head -c 300 "$TMP/null-ds.out" | tr '\n' ' '))"
[ -z "$unknown" ]
ok $? "the DeepSpeed reader knows each documented key${unknown:+; not: $unknown}"
"$BIN" config "$TMP/null-run.json" >"$TMP/null-run.out" 2>&1
st=$?
unknown=$(grep -o "unknown key [^ ]*" "$TMP/null-run.out" | tr '\n' ' ')
[ "$st" -ne 0 ] && unknown="$unknown (config failed: $(head -c 300 "$TMP/null-run.out" | tr '\n' ' '))"
[ -z "$unknown" ]
ok $? "the run config reader knows each documented run option${unknown:+; not: $unknown}"
# control: one made-up key among them is reported
null_configs "$TMP/doc_keys" zero_optimization.offload_optimizer.sgprobe_not_a_key
"$BIN" config "$TMP/null-ds.json" >"$TMP/null-c.out" 2>&1
grep -q "unknown key zero_optimization.offload_optimizer.sgprobe_not_a_key" "$TMP/null-c.out"
ok $? "control: a made-up key among the documented ones is reported unknown"

# every top-level key DeepSpeed itself reads (tests/data/deepspeed-top-keys.txt,
# recorded from DeepSpeed 0.19.8) is known to the reader: none is "unknown"
grep -v '^#' "$SRC/tests/data/deepspeed-top-keys.txt" |
	awk 'BEGIN { printf "{\"train_batch_size\": 4" } $1 != "train_batch_size" { printf ", \"%s\": null", $1 }
	END { print "}" }' >"$TMP/ds-keys.json"
"$BIN" config "$TMP/ds-keys.json" >"$TMP/ds-keys.out" 2>&1
st=$?
unknown=$(grep -o "unknown key [^ ]*" "$TMP/ds-keys.out" | tr '\n' ' ')
[ "$st" -eq 0 ] && [ -z "$unknown" ] && [ "$(grep -vc '^#' "$SRC/tests/data/deepspeed-top-keys.txt")" -ge 60 ]
ok $? "every top-level key DeepSpeed 0.19.8 reads is known to the reader${unknown:+; unknown: $unknown}"

# The keys docs/config-keys.md says are *warned*: set away from DeepSpeed's
# default each must be named in a warning; at the default, none is.
cat >"$TMP/warned.json" <<'EOF'
{"train_batch_size": 4, "communication_data_type": "bf16", "data_types": {"grad_accum_dtype": "fp32"},
 "optimizer": {"type": "AdamW", "params": {"fp32_optimizer_states": false}},
 "fp16": {"enabled": false, "auto_cast": true, "fp16_master_weights_and_grads": true},
 "bf16": {"bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
 "activation_checkpointing": {"cpu_checkpointing": true},
 "zero_optimization": {"stage": 3, "zero_quantized_weights": true, "zero_quantized_nontrainable_weights": true,
  "zero_quantized_gradients": true, "zeropp_loco_param": {"err_beta": 0.8}, "zero_hpz_partition_size": 2,
  "mics_shard_size": 2},
 "hybrid_engine": {"enabled": true}, "eigenvalue": {"enabled": true}, "autotuning": {"enabled": true},
 "nebula": {"enabled": true}, "compile": {"deepcompile": true}, "pipeline": {"stages": "auto"},
 "sparse_attention": {"mode": "fixed"}, "compression_training": {"weight_quantization": {}},
 "weight_quantization": {"post_init_quant": {}}, "expert_parallel": {"enabled": true},
 "datastates_ckpt": {"host_cache_size": 16}, "graph_harvesting": true, "managed_gradient_accumulation": false}
EOF
cat >"$TMP/unwarned.json" <<'EOF'
{"train_batch_size": 4, "data_types": {},
 "optimizer": {"type": "AdamW", "params": {"fp32_optimizer_states": true}},
 "fp16": {"enabled": false, "auto_cast": false, "fp16_master_weights_and_grads": false},
 "bf16": {"bf16_master_weights_and_grads": false, "bf16_optimizer_states": false},
 "activation_checkpointing": {"cpu_checkpointing": false},
 "zero_optimization": {"stage": 3, "zero_quantized_weights": false, "zero_quantized_nontrainable_weights": false,
  "zero_quantized_gradients": false, "zeropp_loco_param": {}, "zero_hpz_partition_size": 1,
  "mics_shard_size": 0},
 "hybrid_engine": {"enabled": false}, "eigenvalue": {"enabled": false}, "autotuning": {"enabled": false},
 "nebula": {"enabled": false}, "compile": {}, "pipeline": {}, "sparse_attention": {},
 "compression_training": {}, "weight_quantization": {}, "expert_parallel": {}, "datastates_ckpt": {},
 "graph_harvesting": false, "managed_gradient_accumulation": true}
EOF
"$BIN" config "$TMP/warned.json" >"$TMP/warned.out" 2>&1
missing=""
for k in communication_data_type data_types optimizer.params.fp32_optimizer_states fp16.auto_cast \
	fp16.fp16_master_weights_and_grads bf16.bf16_master_weights_and_grads bf16.bf16_optimizer_states \
	activation_checkpointing.cpu_checkpointing zero_optimization.zero_quantized_weights \
	zero_optimization.zero_quantized_nontrainable_weights zero_optimization.zero_quantized_gradients \
	zero_optimization.zeropp_loco_param zero_optimization.zero_hpz_partition_size \
	zero_optimization.mics_shard_size hybrid_engine eigenvalue autotuning nebula compile pipeline \
	sparse_attention compression_training weight_quantization expert_parallel datastates_ckpt \
	graph_harvesting managed_gradient_accumulation; do
	grep -q "warning: .*: $k: .* has no effect in stepgraph (ignored): " "$TMP/warned.out" || missing="$missing $k"
	grep -q "^ds $k$" "$TMP/doc_keys" || missing="$missing $k(not in the doc)"
done
[ -z "$missing" ]
ok $? "each warned key set away from DeepSpeed's default is a warning naming it${missing:+; not:$missing}"
"$BIN" config "$TMP/unwarned.json" >"$TMP/unwarned.out" 2>&1
! grep -q "warning" "$TMP/unwarned.out"
ok $? "the same keys at DeepSpeed's defaults: no warning ($(grep warning "$TMP/unwarned.out" | head -c 200))"

# probe_key ds|run PATH: 0 when the reader refuses the value [0] at PATH
# with an error naming PATH (the sections that need a "type" get one).
# Slower (a run per key): only with SG_HELP_TRUTH_FULL=1.
ds_json() {
	awk -v path="$1" 'BEGIN {
		n = split(path, p, ".")
		if (p[1] == "optimizer" && path != "optimizer.type" && n > 1)
			extra1 = "\"type\": \"AdamW\", "
		if (p[1] == "scheduler" && path != "scheduler.type" && n > 1)
			extra1 = "\"type\": \"WarmupDecayLR\", "
		if (p[1] == "scheduler" && p[3] != "total_num_steps" && n > 2)
			extra2 = "\"total_num_steps\": 10, "
		v = "[0]"
		for (i = n; i >= 1; i--) {
			pre = ""
			if (i == 2) pre = extra1
			if (i == 3) pre = extra2
			v = "{" pre "\"" p[i] "\": " v "}"
		}
		print "{\"train_batch_size\": 4, " substr(v, 2)
	}'
}
probe_key() {
	if [ "$1" = ds ]; then
		ds_json "$2" >"$TMP/k.json"
	else
		printf '{"deepspeed_config": {"train_batch_size": 4}, "%s": [0]}\n' "$2" >"$TMP/k.json"
	fi
	"$BIN" config "$TMP/k.json" >"$TMP/k.out" 2>&1 && return 1
	grep -q "unknown key" "$TMP/k.out" && return 1
	grep -q -F "$2" "$TMP/k.out"
}
if [ -n "${SG_HELP_TRUTH_FULL:-}" ]; then
	bad=""
	while read -r kind path; do
		probe_key "$kind" "$path" || bad="$bad $kind:$path ($(head -c 160 "$TMP/k.out" | tr '\n' ' '))"
	done <"$TMP/doc_keys"
	[ -z "$bad" ]
	ok $? "each documented key is type-checked (a wrong-typed value is refused naming it)${bad:+; not:$bad}"
fi
! probe_key ds zero_optimization.sgprobe_not_a_key
ok $? "control: an unknown DeepSpeed key fails the typed probe (a warning only)"
probe_key ds zero_optimization.offload_optimizer.ratio
ok $? "control: a known key passes the typed probe"

# ---- (d) every key the readers know is documented ---------------------------

# the string of each field table entry of ds_config*.c: FI("x", ..., FX("x", ...
sed -n 's/^ *F[A-Z]*("\([a-z0-9_]*\)",.*/\1/p' "$SRC"/runtime/config/ds_config*.c | sort -u >"$TMP/ds_names"
[ "$(wc -l <"$TMP/ds_names")" -ge 100 ]
ok $? "ds_config*.c's tables have $(wc -l <"$TMP/ds_names") key names"
missing=""
for k in $(cat "$TMP/ds_names"); do
	awk '{ print $2 }' "$TMP/doc_keys" | grep -q "\(^\|\.\)$k\(\.\|$\)" || missing="$missing $k"
done
[ -z "$missing" ]
ok $? "every DeepSpeed key the reader knows is in docs/config-keys.md${missing:+; missing:$missing}"
missing=""
for k in $(cat "$TMP/run_keys"); do
	grep -q "^run $k$" "$TMP/doc_keys" || missing="$missing $k"
done
[ -z "$missing" ]
ok $? "every run option is in docs/config-keys.md's run options table${missing:+; missing:$missing}"

done_testing
