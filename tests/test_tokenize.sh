#!/bin/sh
# test_tokenize.sh - scripts/tokenize_data.py (text -> llm.c shards with a
# Hugging Face tokenizer.json) and what `run` makes of its side file.
# The ids of a known text under a hand-written WordLevel tokenizer
# (tests/data/tokenizers/wordlevel.json) are worked out by hand; a 70000-word
# vocabulary gives uint32 shards; the validation split, refusals (stale
# shards, a broken tokenizer file, non-UTF-8 text). Those checks need the
# `tokenizers` package (PyPI) in $STEPGRAPH_TOKENIZE_VENV (default
# ~/.cache/stepgraph/venv-bench, which scripts/tokenize.sh sets up) and are
# skipped without it. The checks of `run` reading tokenizer-info.json
# (printed, a vocabulary mismatch warned about, a malformed file refused)
# always run: their shards are written here with struct. Prints TAP.
set -u
SG_TEST_NAME=tok
. "${SG_SRCDIR:-.}/tests/test_env.sh"
VENV=${STEPGRAPH_TOKENIZE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph/venv-bench}
. "$SRC/tests/train_lib.sh"
plan 11
TOK="$SRC/scripts/tokenize_data.py"
WL="$SRC/tests/data/tokenizers/wordlevel.json"
# shard_ids FILE: "MAGIC COUNT id id ..." read with struct
shard_ids() {
	"$PY" - "$1" <<'PYEOF'
import struct, sys
d = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", d[:1024])
fmt = "<%dI" if h[0] == 20240801 else "<%dH"
print(h[0], h[2], *struct.unpack(fmt % h[2], d[1024:]))
PYEOF
}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import tokenizers' 2>/dev/null; then
	VPY=$VENV/bin/python
	printf 'The cat sat on the mat.\nA dog sat on a mat.\n' >"$TMP/a.txt"
	printf 'the dog\n' >"$TMP/b.txt"
	"$VPY" "$TOK" --tokenizer "$WL" --out "$TMP/s" --val-fraction 0 "$TMP/a.txt" "$TMP/b.txt" 2>"$TMP/tok.err"
	# the(2) cat(3) sat(4) on(5) the(2) mat(6) .(7) a(8) dog(9) sat on a mat . <eot>(1) the dog <eot>
	[ "$(shard_ids "$TMP/s/train_000000.bin")" = "20240520 18 2 3 4 5 2 6 7 8 9 4 5 8 6 7 1 2 9 1" ]
	ok $? "a known text gives the hand-worked ids, an end-of-text id after each document, uint16"
	"$PY" -c 'import json,sys; i=json.load(open(sys.argv[1])); assert i["tokenizer"]=="wordlevel.json" and i["vocab_size"]==10 and i["eot_id"]==1 and i["dtype"]=="uint16"' "$TMP/s/tokenizer-info.json"
	ok $? "tokenizer-info.json records the tokenizer, its vocabulary and the end-of-text id"
	"$PY" - "$TMP/big.json" <<'PYEOF'
import json, sys
vocab = {"[UNK]": 0}
vocab.update({"w%d" % i: i + 1 for i in range(70000)})
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
           "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}},
          open(sys.argv[1], "w"))
PYEOF
	: >"$TMP/c.txt"
	for i in 1 2 3 4 5 6 7 8; do echo "w69999 w3 w65536 w0" >>"$TMP/c.txt"; done
	"$VPY" "$TOK" --tokenizer "$TMP/big.json" --out "$TMP/big" --val-fraction 0 "$TMP/c.txt" 2>/dev/null
	shard_ids "$TMP/big/train_000000.bin" | grep -q "^20240801 32 70000 4 65537 1 70000 4 65537 1 "
	ok $? "a 70001-id vocabulary gives uint32 shards (magic 20240801) with ids past 65535"
	for i in $(seq 1 300); do cat "$TMP/a.txt"; done >"$TMP/long.txt"
	head -c 3000000 /dev/zero | tr '\0' 'x' | fold -w 100 >"$TMP/pad.txt"
	"$VPY" "$TOK" --tokenizer "$WL" --out "$TMP/split" --val-fraction 0.5 "$TMP/pad.txt" "$TMP/long.txt" 2>/dev/null
	[ -f "$TMP/split/val_000000.bin" ] && [ -f "$TMP/split/train_000000.bin" ]
	ok $? "--val-fraction 0.5 writes a validation shard and a train shard"
	"$VPY" "$TOK" --tokenizer "$WL" --out "$TMP/s" "$TMP/a.txt" 2>"$TMP/stale.err"
	[ $? -ne 0 ] && grep -q "already holds train_000000.bin" "$TMP/stale.err"
	ok $? "existing shards are not overwritten without --force"
	echo '{"model": ' >"$TMP/broken.json"
	"$VPY" "$TOK" --tokenizer "$TMP/broken.json" --out "$TMP/x" "$TMP/a.txt" 2>"$TMP/broken.err"
	[ $? -ne 0 ] && grep -q "broken.json: not a tokenizer.json" "$TMP/broken.err"
	ok $? "a broken tokenizer.json is refused by name"
	printf 'the \377\376 cat\n' >"$TMP/bin.txt"
	"$VPY" "$TOK" --tokenizer "$WL" --out "$TMP/y" "$TMP/bin.txt" 2>"$TMP/utf.err"
	[ $? -ne 0 ] && grep -q "bin.txt: not UTF-8" "$TMP/utf.err"
	ok $? "non-UTF-8 text is refused naming the file"
else
	for d in "known ids" "tokenizer-info.json" "uint32 shards" "validation split" "no overwrite" \
		"broken tokenizer" "non-UTF-8 text"; do
		skip "$d: the tokenizers package is not in $VENV (scripts/tokenize.sh sets it up)"
	done
fi

# run and the side file (shards written here, no tokenizers package needed)
mkdir -p "$TMP/d"
"$PY" - "$TMP/d/train_000000.bin" <<'PYEOF'
import random, struct, sys
random.seed(3)
toks = [random.randrange(256) for _ in range(4000)]
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)) +
                              struct.pack("<%dH" % len(toks), *toks))
PYEOF
info() { printf '{"tokenizer": "tok.json", "sha256": "%s", "vocab_size": %s}\n' "$1" "$2" >"$TMP/d/tokenizer-info.json"; }
SHA=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
ds base '{}'
info $SHA 256
train same base --steps 1 --data "$TMP/d/train_000000.bin"
[ "$(cat "$TMP/same.rc")" -eq 0 ] && grep -q "tokens: from tokenizer tok.json (sha256 0123456789ab..., vocabulary 256)" "$TMP/same.out" &&
	! grep -q "warning" "$TMP/same.err"
ok $? "run names the tokenizer that made the shards"
info $SHA 32000
train other base --steps 1 --data "$TMP/d/train_000000.bin"
[ "$(cat "$TMP/other.rc")" -eq 0 ] && grep -q "warning: .*tokenizer tok.json with a vocabulary of 32000, model tiny-llama has 256" "$TMP/other.err"
ok $? "a tokenizer vocabulary other than the model's is warned about"
info nothex 256
train bad base --steps 1 --data "$TMP/d/train_000000.bin"
[ "$(cat "$TMP/bad.rc")" -ne 0 ] && grep -q "tokenizer-info.json: sha256: expected 64" "$TMP/bad.err"
ok $? "a malformed tokenizer-info.json is refused by name"
rm -f "$TMP/d/tokenizer-info.json"
train none base --steps 1 --data "$TMP/d/train_000000.bin"
[ "$(cat "$TMP/none.rc")" -eq 0 ] && ! grep -q "tokens: from tokenizer" "$TMP/none.out"
ok $? "without a side file, nothing is claimed"
