#!/bin/sh
# test_bad_input.sh - the stepgraph command used carelessly: inputs of the
# wrong kind (a directory, an empty file, /dev/null, a FIFO, a JSON array)
# for every command that reads a config, data and weights files that lie
# about themselves, checkpoints of another model, outputs that cannot be
# written (a missing directory, a file-size limit standing in for a full
# disk) and a save into another run's checkpoint directory. Each must end
# with a non-zero status that is not a signal, within seconds, with a message
# naming the file or key (the name only is checked, not the wording), and
# leave an older output of the same name as it was, with no temporary file
# beside it. Prints TAP.
set -u
SG_TEST_NAME=bad_input
. "${SG_SRCDIR:-.}/tests/test_env.sh"
# work in TMP (relative names in the messages): the paths given as relative
# ones made absolute first
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
SRC=$(abs "$SRC")
BIN=$(abs "$BIN")
[ -n "${STEPGRAPH_MODELS_DIR:-}" ] && export STEPGRAPH_MODELS_DIR="$(abs "$STEPGRAPH_MODELS_DIR")"
[ -n "${STEPGRAPH_MACHINES_DIR:-}" ] && export STEPGRAPH_MACHINES_DIR="$(abs "$STEPGRAPH_MACHINES_DIR")"
cd "$TMP" || exit 1
CFG=$SRC/configs/default.json
RUN="--max_length 32 --steps 1 --warmup_steps 0 --log_interval 1"
# fails NAME TEXT CMD...: CMD exits 1..125 within 60 s (not a signal, not a
# hang, not success) and its standard error contains TEXT
fails() {
	label=$1 text=$2
	shift 2
	timeout 60 "$@" >"$label.out" 2>"$label.err"
	s=$?
	[ $s -ge 1 ] && [ $s -le 125 ] && grep -qF -- "$text" "$label.err"
	r=$?
	[ $r -eq 0 ] || { echo "# exit $s"; sed 's/^/# /' "$label.err" | tail -3; }
	return $r
}
# no_tmp DIR: nothing temporary left in DIR (atomic writes' ".tmp." files,
# the DOT files of SVG renderings)
no_tmp() { ! ls -a "$1" | grep -q '\.tmp\.\|\.dot\.'; }

# ---- a config of the wrong kind, for every command that reads one ----------
mkdir adir
: >empty.json
echo '[1, 2]' >array.json
mkfifo fifo
bad=""
for f in adir empty.json /dev/null array.json; do
	fails c_config "$f" "$BIN" config "$f" || bad="$bad $f"
done
[ -z "$bad" ]
ok $? "config: a directory, an empty file, /dev/null and a JSON array as CONFIG are named, no crash${bad:+ (failed:$bad)}"
# the other commands read CONFIG through the same loader: one kind each
for pair in graph:adir simulate:empty.json fit:/dev/null run:array.json; do
	cmd=${pair%%:*} f=${pair#*:}
	fails "c_$cmd" "$f" "$BIN" "$cmd" "$f" --machine gh200
	ok $? "$cmd: $f as CONFIG is named, no crash"
done
# a model file that is no regular file: said so (it was "not found")
fails m_null "/dev/null" "$BIN" model info /dev/null && ! grep -q "not found" m_null.err
ok $? "model info /dev/null: named, not called missing"

# ---- data files ---------------------------------------------------------------
"$PY" - <<'PYEOF'
import struct
def shard(name, count, toks, magic=20240520, version=1):
    h = [0] * 256
    h[0], h[1], h[2] = magic, version, count
    with open(name, "wb") as f:
        f.write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(toks), *toks))
shard("bigtok.bin", 200, [7] * 100 + [300] + [7] * 99)   # 300 >= tiny-llama's vocab 256
shard("short.bin", 20, [7] * 20)                          # shorter than one window
shard("lying.bin", 5000, [7] * 200)                       # header counts more than the file has
open("cut.bin", "wb").write(struct.pack("<10i", 20240520, 1, 0, *[0] * 7))
PYEOF
fails d_big "bigtok.bin" "$BIN" run "$CFG" $RUN --data bigtok.bin &&
	grep -q "300" d_big.err
ok $? "data: a token >= the vocabulary is named with its value"
fails d_short "short.bin" "$BIN" run "$CFG" $RUN --data short.bin
ok $? "data: a shard shorter than one sequence is named"
fails d_lie "lying.bin" "$BIN" run "$CFG" $RUN --data lying.bin
ok $? "data: a header counting more tokens than the file holds is named"
fails d_cut "cut.bin" "$BIN" run "$CFG" $RUN --data cut.bin
ok $? "data: a truncated header is named"
fails d_dir "adir" "$BIN" run "$CFG" $RUN --data adir
ok $? "data: a directory is named"
# a FIFO: refused as not a regular file, not waited on for a writer
fails d_fifo "fifo" "$BIN" run "$CFG" $RUN --data fifo
ok $? "data: a FIFO is refused at once, naming it (no hang)"

# ---- weights and checkpoints ------------------------------------------------
"$BIN" run "$CFG" $RUN --save ck >ck.out 2>&1 &&
	"$BIN" run "$CFG" $RUN --model tiny-qwen3 --save ckq >ckq.out 2>&1
ok $? "checkpoints of tiny-llama and tiny-qwen3 to break"
W=ck/$(cat ck/latest)/model.safetensors
"$PY" - "$W" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
data = b[8 + n:]
open("cut.safetensors", "wb").write(b[:len(b) // 2])          # truncated mid-tensor
k = "model.embed_tokens.weight"
h[k]["shape"] = [h[k]["shape"][0] * 2] + h[k]["shape"][1:]     # a shape the bytes do not hold
hb = json.dumps(h).encode()
open("lying.safetensors", "wb").write(struct.pack("<Q", len(hb)) + hb + data)
open("huge.safetensors", "wb").write(struct.pack("<Q", 1 << 62) + b[8:])  # header length
PYEOF
fails w_cut "cut.safetensors" "$BIN" run "$CFG" $RUN --load cut.safetensors
ok $? "weights: a file truncated mid-tensor is named"
fails w_lie "model.embed_tokens.weight" "$BIN" run "$CFG" $RUN --load lying.safetensors
ok $? "weights: a header whose shape the data does not hold names the tensor"
fails w_huge "huge.safetensors" "$BIN" run "$CFG" $RUN --load huge.safetensors
ok $? "weights: a header length past any file is named"
fails w_fifo "fifo" "$BIN" run "$CFG" $RUN --load fifo
ok $? "weights: a FIFO is refused at once, naming it (no hang)"
fails w_other "q_proj" "$BIN" run "$CFG" $RUN --load ckq
ok $? "a checkpoint of another model: the first tensor of another shape is named"
cp -r ck ckcut
S=ckcut/$(cat ckcut/latest)
"$PY" -c 'import os, sys; os.truncate(sys.argv[1], os.path.getsize(sys.argv[1]) - 4096)' \
	"$S/state.safetensors"
fails w_state "state.safetensors" "$BIN" run "$CFG" $RUN --load ckcut
ok $? "a checkpoint whose training state is truncated: the file is named"
# a `latest` of binary bytes: named, and its bytes not echoed raw (an escape
# sequence would reach the terminal)
cp -r ck ckbin
printf 'step-\033[2J\001\377' >ckbin/latest
fails w_latest "ckbin/latest" "$BIN" run "$CFG" $RUN --load ckbin &&
	! LC_ALL=C grep -q "$(printf '\033')" w_latest.err && grep -q 'step-?\[2J??' w_latest.err
ok $? "a checkpoint whose latest holds binary bytes: named, the bytes shown as '?'"
# a sharded save's step directory, named directly, resumes (it has no
# model.safetensors, only the index and the shards)
"$BIN" run "$CFG" $RUN --save shck --save_shard_size 400000 >shck.out 2>&1
"$BIN" run "$CFG" $RUN --load "shck/$(cat shck/latest)" >shres.out 2>shres.err &&
	grep -q "^Step 2 |" shres.out
r=$?
[ $r -eq 0 ] || sed 's/^/# /' shres.err | tail -2
ok $r "a sharded checkpoint's step directory given to --load resumes at step 2"

# ---- saving into another run's checkpoint directory ------------------------
"$BIN" run "$CFG" $RUN --steps 3 --save_interval 1 --save_keep 0 --save keep >keep.out 2>&1
before=$(cd keep && find . -type f | sort | xargs cat | cksum)
fails s_fresh "keep" "$BIN" run "$CFG" $RUN --save keep
r=$?
fails s_weights "keep" "$BIN" run "$CFG" $RUN --load "keep/step-00000003/model.safetensors" \
	--save keep
[ $r -eq 0 ] && [ $? -eq 0 ] && [ "$(cd keep && find . -type f | sort | xargs cat | cksum)" = "$before" ] &&
	[ "$(ls keep | tr '\n' ' ')" = "latest step-00000001 step-00000002 step-00000003 " ]
ok $? "a new run saving into another run's checkpoint directory is refused; its 3 checkpoints stay"
"$BIN" run "$CFG" $RUN --load keep --save keep >res.out 2>res.err &&
	[ "$(cat keep/latest)" = step-00000004 ] && grep -q "^Step 4 |" res.out
ok $? "the run that wrote it resumes and saves there (step 4)"

# ---- outputs that cannot be written ---------------------------------------
# --report is written after training: checked before (no step runs)
fails o_report "nodir/page.html" "$BIN" run "$CFG" $RUN --steps 50 --report nodir/page.html &&
	! grep -q "^Step" o_report.out
ok $? "run --report into a missing directory fails before training, naming it"
# a file-size limit stands in for a full disk (writes fail with EFBIG): every
# export fails naming its file, and the older file of that name stays
limited() { # LABEL CMD...: CMD under a file-size limit of $LIMIT bytes, SIGXFSZ ignored
	lim=$1
	shift
	(
		trap '' XFSZ
		exec prlimit --fsize="$LIMIT" "$@"
	) >"$lim.out" 2>"$lim.err"
	s=$?
	[ $s -ge 1 ] && [ $s -le 125 ]
}
if command -v prlimit >/dev/null 2>&1; then
	for spec in dot:"graph $CFG -o" json:"graph $CFG --format json -o" \
		simtrace:"simulate $CFG --trace" runtrace:"run $CFG $RUN --trace" \
		fit:"fit $CFG --machine gh200 --max-hidden 2048 --write-model"; do
		label=${spec%%:*} args=${spec#*:}
		mkdir -p "out_$label"
		f=out_$label/old.out
		echo "keep me" >"$f"
		# the simulator writes its platform files (< 20 kB) before the trace
		LIMIT=200
		[ "$label" = simtrace ] && LIMIT=20000
		# shellcheck disable=SC2086
		limited "x_$label" "$BIN" $args "$f" && grep -qF "$f" "x_$label.err" &&
			[ "$(cat "$f")" = "keep me" ] && no_tmp "out_$label"
		r=$?
		[ $r -eq 0 ] || sed 's/^/# /' "x_$label.err" | tail -2
		ok $r "$label: a write past the file-size limit fails naming the file; the old one stays, nothing temporary left"
	done
	# graph --format svg: the DOT file beside it is removed too
	if command -v dot >/dev/null 2>&1; then
		mkdir -p out_svg
		echo "keep me" >out_svg/old.svg
		LIMIT=200
		limited x_svg "$BIN" graph "$CFG" --format svg -o out_svg/old.svg &&
			grep -qF "out_svg/old.svg" x_svg.err && [ "$(cat out_svg/old.svg)" = "keep me" ] &&
			no_tmp out_svg
		ok $? "svg: the same, its DOT file removed"
	else
		skip "no Graphviz"
	fi
else
	skip "no prlimit" 6
fi
# a read-only checkpoint directory (a read-only bind mount: root can write
# through permissions): refused before training, not at the first save
mkdir rosrc romnt
cp -r keep rosrc/ck
at_exit 'umount "$TMP/romnt" 2>/dev/null'
if mount --bind -o ro rosrc romnt 2>/dev/null && ! touch romnt/probe 2>/dev/null; then
	fails o_ro "romnt/ck" "$BIN" run "$CFG" $RUN --steps 20 --load romnt/ck --save romnt/ck &&
		! grep -q "^Step" o_ro.out
	r=$?
	umount romnt
	ok $r "run --save into a read-only checkpoint directory fails before training, naming it"
else
	mountpoint -q romnt 2>/dev/null && umount romnt
	skip "no read-only bind mount here (needs root)"
fi

# ---- tune: a --vary key the config does not read ---------------------------
fails t_vary "zero_optimization.stagee" "$BIN" tune "$CFG" --machines gh200 --sched lws \
	--priorities on --vary zero_optimization.stagee=0:1:1 --out tv &&
	! [ -e tv.csv ]
ok $? "tune --vary with a misspelt DeepSpeed key is refused, naming it, before simulating"
fails t_times "adir" "$BIN" graph "$CFG" --times adir
ok $? "graph --times given a directory names it"

# ---- SIGTERM (timeout, a batch system) -----------------------------------------
# wait_for GLOB PID: until a file matching GLOB exists (at most 20 s) while PID lives
wait_for() {
	i=0
	while [ $i -lt 200 ] && kill -0 "$2" 2>/dev/null; do
		# shellcheck disable=SC2086
		ls $1 >/dev/null 2>&1 && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}
# gone PATTERN: no process whose command line matches PATTERN, waiting for
# it at most 10 s. A guard, not a timing: a child (the simulator, dot) gets
# its SIGTERM from the kernel when its parent ends, and on a loaded machine
# it may run its exit some time after the parent's wait returned.
gone() {
	i=0
	while pgrep -f "$1" >/dev/null; do
		[ $i -ge 100 ] && return 1
		sleep 0.1
		i=$((i + 1))
	done
	return 0
}
# a run saving every step, killed after its first checkpoint: exit by the
# signal, no staging directory left, the checkpoint resumes
"$BIN" run "$CFG" $RUN --steps 500 --save_interval 1 --save sig >sig.out 2>&1 &
pid=$!
wait_for "sig/latest" $pid
sleep 0.3
kill -TERM $pid
wait $pid 2>/dev/null
s=$?
[ $s -eq 143 ] && ! ls -a sig | grep -q '^\.tmp' &&
	"$BIN" run "$CFG" $RUN --load sig >sig2.out 2>&1
ok $? "run killed by SIGTERM while saving every step: exit 143, no staging directory left, resumes (exit $s)"
# simulate: no simulator left running, no scratch directory left
mkdir simtmp
TMPDIR=$TMP/simtmp "$BIN" simulate "$CFG" --steps 100 --trace simtrace.json >sim.out 2>&1 &
pid=$!
wait_for "simtmp/stepgraph-sim.*/log-0.txt" $pid
sleep 0.5
kill -TERM $pid
wait $pid 2>/dev/null
s=$?
[ $s -eq 143 ] && gone "$TMP/simtmp" && [ -z "$(ls simtmp)" ] && ! [ -e simtrace.json ]
ok $? "simulate killed by SIGTERM: no simulator left running, no scratch directory, no trace (exit $s)"
# StarPU refusing the state's memory (its limit, STARPU_LIMIT_CPU_MEM, below
# what the optimizer state needs): an error naming the buffer and StarPU's count
STARPU_LIMIT_CPU_MEM=1 fails starpu_mem "StarPU counts" "$BIN" run "$CFG" $RUN &&
	grep -q "cannot allocate .* bytes): StarPU counts .* of its 1 MiB" starpu_mem.err
ok $? "state StarPU cannot hold under STARPU_LIMIT_CPU_MEM: an error naming the buffer and the limit"
# step-local data beyond StarPU's limit (the state, 9.4 MiB, fits in 11 MiB;
# the step needs 13.9): StarPU would retry the allocation for ever; the run
# ends with an error naming the limit and StarPU's count once no task has run
# for STEPGRAPH_STALL_SECONDS
STEPGRAPH_STALL_SECONDS=2 STARPU_LIMIT_CPU_MEM=11 fails stall "the step cannot go on" \
	"$BIN" run "$CFG" $RUN --steps 3 &&
	grep -q "no task has run for [0-9]* s and StarPU counts [0-9.]* of the 11.0 MiB it may use in main memory (STARPU_LIMIT_CPU_MEM" stall.err &&
	grep -q "warning: a step's plan needs 1[0-9.]* MiB of main memory, more than the 11.0 MiB" stall.err
ok $? "a step StarPU cannot fit under STARPU_LIMIT_CPU_MEM: a warning before the first step, then an error, not a hang"
# a bad window is refused before any output: no checkpoint directory, the
# old metrics file as it was
echo keep >stall_keep.jsonl
STEPGRAPH_STALL_SECONDS=5s fails stall_bad "STEPGRAPH_STALL_SECONDS=5s: expected seconds" \
	"$BIN" run "$CFG" $RUN --save stall_ck --metrics stall_keep.jsonl &&
	! [ -e stall_ck ] && [ "$(cat stall_keep.jsonl)" = keep ]
ok $? "STEPGRAPH_STALL_SECONDS=5s: refused by name before any output (no checkpoint directory, metrics untouched)"
STEPGRAPH_BUFFER_CACHE=off fails cache_bad "STEPGRAPH_BUFFER_CACHE=off: expected 0" \
	"$BIN" run "$CFG" $RUN --save cache_ck --metrics stall_keep.jsonl &&
	! [ -e cache_ck ] && [ "$(cat stall_keep.jsonl)" = keep ]
ok $? "STEPGRAPH_BUFFER_CACHE=off: refused by name before any output (no checkpoint directory, metrics untouched)"
# a run refused after the output checks (here: a data file that is not
# there) removes the save directory it made, and keeps one that existed
"$BIN" run "$CFG" $RUN --data missing.bin --save refused_ck >refused.out 2>&1
r1=$?
mkdir -p kept_ck
"$BIN" run "$CFG" $RUN --data missing.bin --save kept_ck >>refused.out 2>&1
r2=$?
[ $r1 -ne 0 ] && [ $r2 -ne 0 ] && grep -q "missing.bin" refused.out && ! [ -e refused_ck ] && [ -d kept_ck ]
ok $? "a run refused after its output checks leaves no save directory of its own (an existing one stays)"
# ... and the same watch leaves a run that fits alone, however short its window
STEPGRAPH_STALL_SECONDS=3 STARPU_LIMIT_CPU_MEM=20 timeout 60 "$BIN" run "$CFG" $RUN --steps 8 \
	>fits.out 2>fits.err &&
	[ "$(grep -c '^Step [0-9]* |' fits.out)" = 8 ] && grep -q "measured 1[0-9.]* MiB" fits.out &&
	! grep -q "plan needs" fits.err
ok $? "a step that fits under STARPU_LIMIT_CPU_MEM=20 trains its 8 steps with a 3 s stall window, no warning"
# what the user wrote, named: a --save that is a file, a flag without its
# value, and names one edit away from a shipped model, machine or policy
echo "not a directory" >save_is_a_file
fails save_file "save: save_is_a_file exists and is not a directory" "$BIN" run "$CFG" $RUN \
	--save save_is_a_file && [ "$(cat save_is_a_file)" = "not a directory" ]
ok $? "--save naming a regular file: refused as not a directory (not 'Permission denied'), the file kept"
fails steps_bare "--steps: a value is required (an integer)" "$BIN" run "$CFG" --steps
ok $? "--steps without a value says that it needs one"
fails model_typo 'model "tiny-lama": no ' "$BIN" run "$CFG" $RUN --model tiny-lama &&
	grep -qF "(did you mean tiny-llama?)" model_typo.err
ok $? "a model name one letter off: did you mean tiny-llama?"
fails sched_typo 'unknown StarPU policy "dmdaz" (did you mean dmda?)' "$BIN" run "$CFG" $RUN --sched dmdaz
ok $? "a policy name one letter off: did you mean dmda?"
fails machine_typo "machine mi300: no file" "$BIN" simulate "$CFG" --machine mi300 &&
	grep -qF "(did you mean mi300a?)" machine_typo.err && grep -q "shipped, in .*: .*gh200x4" machine_typo.err
ok $? "a machine name one letter off: did you mean mi300a?, with the shipped machines listed"
# a misspelled key: --set names itself, --strict (and "strict": true) stops
# at an unknown key the file has, and a flag's value is blamed on the flag
fails set_typo "--set zero_optimisation.stage=1: unknown key zero_optimisation (did you mean zero_optimization?)" \
	"$BIN" run "$CFG" $RUN --set zero_optimisation.stage=1 && ! grep -q "^Step" set_typo.out
ok $? "--set with a misspelled key: an error naming the --set, no step run"
printf '{"train_micro_batch_size_per_gpu": 1, "zero_optimisation": {"stage": 1}}\n' >typo.json
"$BIN" config typo.json >typo_warn.out 2>&1 &&
	grep -q "warning: typo.json: unknown key zero_optimisation" typo_warn.out &&
	fails typo_strict "unknown key zero_optimisation (did you mean zero_optimization?) (strict: unknown keys are errors)" \
		"$BIN" config --strict typo.json
ok $? "a misspelled key in a file: a warning, and an error with --strict"
printf '{"deepspeed_config": "typo.json", "strict": true}\n' >typo_run.json
fails typo_strict_key "(strict: unknown keys are errors)" "$BIN" config typo_run.json
ok $? "the run config key strict: true does the same"
fails maxlen_cli "command line (--max_length): max_length 100000 is longer than" \
	"$BIN" run "$CFG" $RUN --max_length 100000
ok $? "--max_length too long for the model: blamed on the command line, not the config file"
# graph --format svg of a large graph (Graphviz takes minutes): the old SVG
# stays, its temporary SVG and DOT files go, and so does dot
if command -v dot >/dev/null 2>&1; then
	mkdir svgsig
	echo "keep me" >svgsig/big.svg
	"$BIN" graph "$SRC/configs/llama-3.1-8b-superoffload.json" --format svg --unfold \
		-o svgsig/big.svg >svg.out 2>&1 &
	pid=$!
	wait_for "svgsig/big.svg.tmp.*" $pid
	sleep 0.5
	kill -TERM $pid
	wait $pid 2>/dev/null
	s=$?
	[ $s -eq 143 ] && gone "$TMP/svgsig" && [ "$(cat svgsig/big.svg)" = "keep me" ] &&
		no_tmp svgsig
	ok $? "graph --format svg killed by SIGTERM during the layout: old SVG kept, no temporary file, no dot left (exit $s)"
else
	skip "no Graphviz"
fi
done_testing
