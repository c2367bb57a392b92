#!/usr/bin/env python3
"""prepare_instruct.py - instruction and chat data to llm.c token shards with a
loss mask, for `stepgraph run --data 'DIR/train_*.bin'`.

usage: prepare_instruct.py --tokenizer TOKENIZER.json|MODEL_DIR --out DIR
                           --max-length T [options] FILE...

Each FILE is JSON (a list of records) or JSONL (one record a line). A record
is either
  alpaca style: {"instruction": str, "input": str (optional), "output": str}
  chat:         {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}
The text is laid out by a template (--template):
  alpaca  the Stanford Alpaca prompt (the one DeepSpeedExamples' fine-tuning
          scripts use), then the output and the end-of-sequence token;
  chatml  <|im_start|>ROLE\\nCONTENT<|im_end|>\\n per message;
  model   the model directory's chat template (tokenizer_config.json's
          "chat_template", rendered with jinja2 as transformers does);
  auto    (default) alpaca for alpaca records; for chat records the model's
          template when MODEL_DIR has one, else chatml.
Only the response is trained: the output of an alpaca record, every assistant
message of a chat (with the tokens that end it); prompt and padding tokens are
inputs, not targets (transformers' labels of -100).

Layout (--pad, the default, or --pack): --pad gives every record its own
window of T tokens, padded with the pad token (else the end-of-sequence
token), so that no record sees another; --pack concatenates the records and
cuts windows of T tokens across them. A record longer than T tokens is
dropped and counted as over-long, or cut to T tokens with --truncate.

Output in DIR:
  train_000000.bin, train_000000.bin.mask   the tokens (llm.c shard) and one
                          byte per token, 1 = a target to train on
                          (runtime/io/loss_mask.h)
  val_000000.bin, ...mask the validation split: every k-th usable record,
                          k = round(1 / --val-fraction) (default 0: none)
  tokenizer-info.json     as scripts/tokenize_data.py writes it
  prepare-report.json     the counts printed at the end: records read, used,
                          and each kind of bad record (invalid JSON, not an
                          object, missing or empty fields, unknown roles,
                          over-long), never dropped silently
Every file is written under a temporary name and renamed.

Needs the `tokenizers` package (and `jinja2` for --template model):
`scripts/tokenize.sh --instruct ARGS` sets them up and runs this script.
"""
import argparse
import hashlib
import json
import os
import struct
import sys

MASK_MAGIC, MASK_VERSION = 20261128, 1  # runtime/io/loss_mask.h
EOS_CANDIDATES = ("<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>", "<|eot_id|>")
# The Stanford Alpaca prompt (github.com/tatsu-lab/stanford_alpaca, train.py's
# PROMPT_DICT), which the SuperOffload fine-tuning example formats its data with.
ALPACA_INPUT = ("Below is an instruction that describes a task, paired with an input that "
                "provides further context. Write a response that appropriately completes the "
                "request.\n\n### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n"
                "### Response:\n")
ALPACA_NO_INPUT = ("Below is an instruction that describes a task. Write a response that "
                   "appropriately completes the request.\n\n### Instruction:\n{instruction}"
                   "\n\n### Response:\n")
ROLES = ("system", "user", "assistant", "tool")


def die(msg):
    sys.stderr.write("prepare_instruct: error: %s\n" % msg)
    sys.exit(1)


class Bad(Exception):
    """A record that cannot be used; its argument is the count it goes to."""


def load_tokenizer(spec):
    """(Tokenizer, path of tokenizer.json, raw bytes, model dir or None)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        die("the tokenizers package is missing (run scripts/tokenize.sh --instruct, which "
            "sets it up)")
    model_dir = spec if os.path.isdir(spec) else None
    path = os.path.join(spec, "tokenizer.json") if model_dir else spec
    try:
        raw = open(path, "rb").read()
        tok = Tokenizer.from_str(raw.decode("utf-8"))
    except OSError as e:
        die("%s: %s" % (path, e.strerror))
    except Exception as e:  # the tokenizers package raises its own types
        die("%s: not a tokenizer.json the tokenizers package reads: %s" % (path, e))
    return tok, path, raw, model_dir


def model_chat_template(model_dir):
    """(template text, bos, eos) from MODEL_DIR/tokenizer_config.json, or None."""
    if not model_dir:
        return None
    p = os.path.join(model_dir, "tokenizer_config.json")
    if not os.path.isfile(p):
        return None
    try:
        cfg = json.load(open(p, encoding="utf-8"))
    except (OSError, ValueError) as e:
        die("%s: %s" % (p, e))
    t = cfg.get("chat_template")
    if isinstance(t, list):  # named templates: the default one
        t = next((x.get("template") for x in t if x.get("name") == "default"), None)
    if not isinstance(t, str):
        return None

    def name(v):
        return v.get("content") if isinstance(v, dict) else v
    return t, name(cfg.get("bos_token")) or "", name(cfg.get("eos_token")) or ""


def read_records(path):
    """Yields (record or None, reason) for each record of a JSON or JSONL file."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        die("%s: %s" % (path, e.strerror))
    except UnicodeDecodeError as e:
        die("%s: not UTF-8 (byte %d)" % (path, e.start))
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except ValueError as e:
            die("%s: not valid JSON: %s" % (path, e))
        for r in data:
            yield r
        return
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError:
            yield Bad("invalid_json")


class Renderer:
    """Turns a record into (token ids, mask) with its template."""

    def __init__(self, tok, template, chat_tpl, eos_id, eos_text):
        self.tok, self.template, self.eos_id, self.eos_text = tok, template, eos_id, eos_text
        self.jinja = None
        if chat_tpl:
            try:
                import jinja2
            except ImportError:
                die("--template model needs the jinja2 package (scripts/tokenize.sh "
                    "--instruct sets it up)")
            env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

            def raise_exception(msg):
                raise jinja2.exceptions.TemplateError(msg)
            env.globals["raise_exception"] = raise_exception
            self.jinja = env.from_string(chat_tpl[0])
            self.bos_text, self.tpl_eos = chat_tpl[1], chat_tpl[2]

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False)

    def alpaca(self, r):
        for k in ("instruction", "output"):
            if k not in r:
                raise Bad("missing_field")
            if not isinstance(r[k], str):
                raise Bad("not_a_string")
        inp = r.get("input", "")
        if not isinstance(inp, str):
            raise Bad("not_a_string")
        if not r["instruction"].strip() or not r["output"].strip():
            raise Bad("empty")
        prompt = (ALPACA_INPUT if inp.strip() else ALPACA_NO_INPUT).format(
            instruction=r["instruction"], input=inp)
        # as the Alpaca recipe does: the prompt's tokens are those of the
        # whole text's start; the response's follow, then the end token
        ids = self.encode(prompt + r["output"]).ids
        n_prompt = len(self.encode(prompt).ids)
        if self.eos_id is not None:
            ids.append(self.eos_id)
        return ids, [0] * n_prompt + [1] * (len(ids) - n_prompt)

    def chat_text(self, messages, upto, generation):
        """The template's text of messages[:upto] (chatml or the model's)."""
        if self.jinja is None:
            text = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"])
                           for m in messages[:upto])
            return text + ("<|im_start|>assistant\n" if generation else "")
        return self.jinja.render(messages=messages[:upto], add_generation_prompt=generation,
                                 bos_token=self.bos_text, eos_token=self.tpl_eos)

    def chat(self, r):
        msgs = r["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise Bad("empty")
        for m in msgs:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise Bad("missing_field")
            if not isinstance(m["content"], str) or not isinstance(m["role"], str):
                raise Bad("not_a_string")
            if m["role"] not in ROLES:
                raise Bad("unknown_role")
        if not any(m["role"] == "assistant" and m["content"].strip() for m in msgs):
            raise Bad("empty")
        # the characters of each assistant turn: the text rendered up to it
        # (with the generation prompt) is a prefix of the text including it
        spans, full = [], self.chat_text(msgs, len(msgs), False)
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            before = self.chat_text(msgs, i, True)
            upto = self.chat_text(msgs, i + 1, False)
            if not upto.startswith(before) or not full.startswith(upto):
                raise Bad("template_not_prefix")
            spans.append((len(before), len(upto)))
        enc = self.encode(full)
        mask = [1 if any(a <= s < b for a, b in spans) else 0 for s, _ in enc.offsets]
        return list(enc.ids), mask

    def render(self, r):
        if not isinstance(r, dict):
            raise Bad("not_an_object")
        if "messages" in r:
            return self.chat(r)
        if self.template in ("chatml", "model"):
            raise Bad("missing_field")  # a chat template needs messages
        return self.alpaca(r)


class MaskedShard:
    """One llm.c shard DIR/PREFIX_000000.bin and its loss mask, written at close."""

    def __init__(self, out, prefix, wide):
        self.path = os.path.join(out, "%s_000000.bin" % prefix)
        self.wide, self.ids, self.mask = wide, [], []

    def add(self, ids, mask):
        self.ids.extend(ids)
        self.mask.extend(mask)

    def write(self):
        if not self.ids:
            return None
        if len(self.ids) >= 2**31:
            die("%s: %d tokens, more than an llm.c header counts" % (self.path, len(self.ids)))
        magic, version, fmt = (20240801, 7, "<%dI") if self.wide else (20240520, 1, "<%dH")
        n = len(self.ids)
        atomic(self.path, struct.pack("<256i", magic, version, n, *([0] * 253)) +
               struct.pack(fmt % n, *self.ids))
        atomic(self.path + ".mask", struct.pack("<256i", MASK_MAGIC, MASK_VERSION, n,
                                                *([0] * 253)) + bytes(self.mask))
        return os.path.basename(self.path)


def atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def eos_token(tok, name):
    """(text, id) of --eos, else of the first known end-of-sequence token."""
    for c in ([name] if name else EOS_CANDIDATES):
        i = tok.token_to_id(c)
        if i is not None:
            return c, i
    if name:
        die("--eos %s: the tokenizer has no such token" % name)
    return None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("--tokenizer", required=True,
                    help="a Hugging Face tokenizer.json, or a model directory holding one")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--max-length", type=int, required=True,
                    help="T: tokens per window (stepgraph's max_length)")
    ap.add_argument("--template", default="auto", choices=("auto", "alpaca", "chatml", "model"))
    lay = ap.add_mutually_exclusive_group()
    lay.add_argument("--pad", action="store_true", help="one record per window (default)")
    lay.add_argument("--pack", action="store_true", help="records concatenated")
    ap.add_argument("--truncate", action="store_true",
                    help="cut over-long records to T tokens instead of dropping them")
    ap.add_argument("--val-fraction", type=float, default=0.0,
                    help="share of the usable records for validation (default 0)")
    ap.add_argument("--eos", default=None, help="end-of-sequence token (default: detected)")
    ap.add_argument("--force", action="store_true", help="overwrite shards in --out")
    ap.add_argument("files", nargs="+", help="JSON or JSONL files of records")
    a = ap.parse_args()
    T = a.max_length
    if T < 2:
        die("--max-length %d: expected at least 2" % T)
    if not 0 <= a.val_fraction < 1:
        die("--val-fraction %g: expected a number in [0, 1)" % a.val_fraction)
    for p in a.files:
        if not os.path.isfile(p):
            die("%s: no such file" % p)
    tok, tok_path, raw, model_dir = load_tokenizer(a.tokenizer)
    chat_tpl = model_chat_template(model_dir)
    if a.template == "model" and not chat_tpl:
        die("--template model: %s has no tokenizer_config.json with a chat_template" %
            a.tokenizer)
    use_tpl = chat_tpl if a.template in ("model", "auto") else None
    eos_text, eos_id = eos_token(tok, a.eos)
    if eos_id is None:
        sys.stderr.write("prepare_instruct: note: no end-of-sequence token found; responses "
                         "end without one (--eos TOKEN to set it)\n")
    pad_id = eos_id if eos_id is not None else 0
    vocab = tok.get_vocab_size(with_added_tokens=True)
    os.makedirs(a.out, exist_ok=True)
    stale = [n for n in os.listdir(a.out) if n.endswith(".bin") or n.endswith(".mask")]
    if stale and not a.force:
        die("%s already holds %s: pass --force to overwrite, or another --out" %
            (a.out, ", ".join(sorted(stale)[:3])))
    for n in stale:
        os.remove(os.path.join(a.out, n))

    r = Renderer(tok, a.template, use_tpl, eos_id, eos_text)
    train, val = MaskedShard(a.out, "train", vocab > 65536), MaskedShard(a.out, "val",
                                                                       vocab > 65536)
    every = round(1 / a.val_fraction) if a.val_fraction > 0 else 0
    counts = {"read": 0, "used": 0, "truncated": 0, "bad": {}}
    for p in a.files:
        for rec in read_records(p):
            counts["read"] += 1
            try:
                if isinstance(rec, Bad):
                    raise rec
                ids, mask = r.render(rec)
                cut = len(ids) > T
                if cut and not a.truncate:
                    raise Bad("over_long")
                ids, mask = ids[:T], mask[:T]
                if not any(mask[1:]):
                    raise Bad("nothing_to_train")
                counts["truncated"] += cut
            except Bad as e:
                k = e.args[0]
                counts["bad"][k] = counts["bad"].get(k, 0) + 1
                continue
            mask = [0] + mask[1:]  # a record's first token is no target
            if not a.pack:
                ids = ids + [pad_id] * (T - len(ids))
                mask = mask + [0] * (T - len(mask))
            counts["used"] += 1
            (val if every and counts["used"] % every == 0 else train).add(ids, mask)
    for s in (train, val):  # one last token, so that the last window is whole
        if s.ids:
            s.add([pad_id], [0])
    if len(train.ids) < T + 1:
        die("%d usable records give %d training tokens: fewer than one window of %d + 1 "
            "(read %d; bad: %s)" % (counts["used"], len(train.ids), T, counts["read"],
                                    json.dumps(counts["bad"])))
    names = {"train": train.write(), "val": val.write()}
    trained = sum(train.mask)
    counts.update({"train_tokens": len(train.ids), "val_tokens": len(val.ids),
                   "trained_tokens": trained, "windows": (len(train.ids) - 1) // T,
                   "layout": "pack" if a.pack else "pad", "max_length": T})
    atomic(os.path.join(a.out, "prepare-report.json"),
           (json.dumps(counts, indent=1) + "\n").encode())
    info = {"tokenizer": os.path.basename(tok_path), "sha256": hashlib.sha256(raw).hexdigest(),
            "vocab_size": vocab, "eot": eos_text, "eot_id": eos_id,
            "dtype": "uint32" if vocab > 65536 else "uint16",
            "train": [names["train"]], "val": [names["val"]] if names["val"] else [],
            "train_tokens": len(train.ids), "val_tokens": len(val.ids)}
    atomic(os.path.join(a.out, "tokenizer-info.json"), (json.dumps(info, indent=1) + "\n").encode())
    nbad = sum(counts["bad"].values())
    sys.stderr.write("prepare_instruct: %d records read, %d used (%d truncated), %d bad%s\n" %
                     (counts["read"], counts["used"], counts["truncated"], nbad,
                      "" if not nbad else " (" + ", ".join(
                          "%s %d" % kv for kv in sorted(counts["bad"].items())) + ")"))
    sys.stderr.write("prepare_instruct: train %d tokens, %d trained (%.1f%%), %d windows of %d "
                     "(%s); val %d tokens -> %s\n" %
                     (len(train.ids), trained, 100.0 * trained / len(train.ids),
                      counts["windows"], T, counts["layout"], len(val.ids), a.out))


if __name__ == "__main__":
    main()
