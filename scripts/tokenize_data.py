#!/usr/bin/env python3
"""tokenize_data.py - text files to llm.c token shards with a Hugging Face
tokenizer.json, for `stepgraph run --data 'DIR/train_*.bin'`.

usage: tokenize_data.py --tokenizer TOKENIZER.json --out DIR [options] TEXT...

Each TEXT file is a document, read in chunks of about 1 MB cut at line ends
(a byte-level or whitespace pre-tokenizer never merges across a newline, so
the ids are those of the whole file). An end-of-text token follows each
document: --eot names it, else the first of <|end_of_text|>, <|endoftext|>,
</s>, <|im_end|> the tokenizer knows, else none (said on stderr).

Output in DIR:
  val_000000.bin          the validation split: chunk i of the stream goes to
                          it when floor((i+1)f) > floor(i f), f = --val-fraction
  train_NNNNNN.bin        the rest, --shard-tokens tokens per shard
  tokenizer-info.json     which tokenizer made the shards (file name, SHA-256,
                          vocabulary size, end-of-text id, token dtype); `run`
                          prints it and warns when the model's vocabulary differs
Tokens are uint16 (magic 20240520) when the vocabulary has at most 65536
ids, else uint32 (magic 20240801), as llm.c writes them. Every file is
written under a temporary name and renamed. DIR must hold no .bin files
unless --force.

Needs the `tokenizers` package (PyPI): scripts/tokenize.sh sets up a virtual
environment with it and runs this script.
"""
import argparse
import hashlib
import json
import os
import struct
import sys
import time

CHUNK = 1 << 20
EOT_CANDIDATES = ("<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>")


def die(msg):
    sys.stderr.write("tokenize: error: %s\n" % msg)
    sys.exit(1)


class ShardWriter:
    """Writes llm.c shards DIR/PREFIX_NNNNNN.bin of at most `limit` tokens."""

    def __init__(self, out, prefix, limit, wide):
        self.out, self.prefix, self.limit, self.wide = out, prefix, limit, wide
        self.buf, self.count, self.names = [], 0, []

    def add(self, ids):
        for t in ids:
            self.buf.append(t)
            if len(self.buf) == self.limit:
                self.flush()

    def flush(self):
        if not self.buf:
            return
        name = "%s_%06d.bin" % (self.prefix, len(self.names))
        magic, version, fmt = (20240801, 7, "<%dI") if self.wide else (20240520, 1, "<%dH")
        header = struct.pack("<256i", magic, version, len(self.buf), *([0] * 253))
        path = os.path.join(self.out, name)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(struct.pack(fmt % len(self.buf), *self.buf))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self.names.append(name)
        self.count += len(self.buf)
        self.buf = []


def chunks(path):
    """The file's text in pieces of about CHUNK bytes, cut after a newline."""
    with open(path, "rb") as f:
        rest = b""
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            rest = block[cut:]
            yield block[:cut]
        if rest:
            yield rest


def progress(done, total, ntok, t0, final=False):
    if not sys.stderr.isatty() and not final:
        return
    frac = done / total if total else 1.0
    rate = ntok / max(time.time() - t0, 1e-9)
    bar = "#" * int(30 * frac)
    sys.stderr.write("\rtokenize: [%-30s] %5.1f%% %8.1f MB %10d tokens %9.0f tok/s" %
                     (bar, 100 * frac, done / 1e6, ntok, rate))
    if final:
        sys.stderr.write("\n")
    sys.stderr.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer.json")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--val-fraction", type=float, default=0.01,
                    help="share of the stream for validation (default 0.01; 0 = none)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000,
                    help="tokens per train shard (default 1e8)")
    ap.add_argument("--eot", default=None, help="end-of-text token (default: detected)")
    ap.add_argument("--force", action="store_true", help="overwrite .bin files in --out")
    ap.add_argument("text", nargs="+", help="text files (UTF-8), one document each")
    a = ap.parse_args()
    if not 0 <= a.val_fraction < 1:
        die("--val-fraction %g: expected a number in [0, 1)" % a.val_fraction)
    if a.shard_tokens < 2:
        die("--shard-tokens %d: expected at least 2" % a.shard_tokens)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        die("the tokenizers package is missing (pip install tokenizers, or run "
            "scripts/tokenize.sh, which sets it up)")
    try:
        raw = open(a.tokenizer, "rb").read()
        tok = Tokenizer.from_str(raw.decode("utf-8"))
    except OSError as e:
        die("%s: %s" % (a.tokenizer, e.strerror))
    except Exception as e:  # the tokenizers package raises its own exception types
        die("%s: not a tokenizer.json the tokenizers package reads: %s" % (a.tokenizer, e))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    wide = vocab > 65536
    for p in a.text:
        if not os.path.isfile(p):
            die("%s: no such file" % p)
    os.makedirs(a.out, exist_ok=True)
    stale = [n for n in os.listdir(a.out) if n.endswith(".bin")]
    if stale and not a.force:
        die("%s already holds %s: pass --force to overwrite, or another --out" %
            (a.out, ", ".join(sorted(stale)[:3]) + (" ..." if len(stale) > 3 else "")))
    for n in stale:
        os.remove(os.path.join(a.out, n))
    eot = None
    if a.eot is not None:
        eot = tok.token_to_id(a.eot)
        if eot is None:
            die("--eot %s: the tokenizer has no such token" % a.eot)
    else:
        for c in EOT_CANDIDATES:
            if tok.token_to_id(c) is not None:
                a.eot, eot = c, tok.token_to_id(c)
                break
        if eot is None:
            sys.stderr.write("tokenize: note: no end-of-text token found; documents are "
                             "concatenated without one (--eot TOKEN to set it)\n")

    train = ShardWriter(a.out, "train", a.shard_tokens, wide)
    val = ShardWriter(a.out, "val", 1 << 62, wide)
    total = sum(os.path.getsize(p) for p in a.text)
    done, ntok, index, t0 = 0, 0, 0, time.time()
    for p in a.text:
        pieces = list(chunks(p)) or [b""]
        for k, block in enumerate(pieces):
            try:
                text = block.decode("utf-8")
            except UnicodeDecodeError as e:
                die("%s: not UTF-8 text (byte %d of a chunk): %s" % (p, e.start, e.reason))
            ids = tok.encode(text, add_special_tokens=False).ids if text else []
            if k == len(pieces) - 1 and eot is not None:
                ids.append(eot)
            to_val = int((index + 1) * a.val_fraction) > int(index * a.val_fraction)
            (val if to_val else train).add(ids)
            index += 1
            ntok += len(ids)
            done += len(block)
            progress(done, total, ntok, t0)
    train.flush()
    val.flush()
    progress(total, total, ntok, t0, final=True)
    if train.count < 2:
        die("the text gives %d training tokens: too little for one window" % train.count)
    info = {"tokenizer": os.path.basename(a.tokenizer),
            "sha256": hashlib.sha256(raw).hexdigest(),
            "vocab_size": vocab, "eot": a.eot, "eot_id": eot,
            "dtype": "uint32" if wide else "uint16",
            "train": train.names, "val": val.names,
            "train_tokens": train.count, "val_tokens": val.count}
    tmp = os.path.join(a.out, "tokenizer-info.json.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(a.out, "tokenizer-info.json"))
    sys.stderr.write("tokenize: %d train tokens in %d shard(s), %d validation tokens, "
                     "vocabulary %d (%s) -> %s\n" % (train.count, len(train.names), val.count,
                                                   vocab, info["dtype"], a.out))


if __name__ == "__main__":
    main()
