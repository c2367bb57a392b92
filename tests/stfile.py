#!/usr/bin/env python3
"""stfile.py - safetensors files as the shell tests open them: the 8-byte
little-endian header length, the JSON header, the data; struct and json
only (independent of stepgraph's reader). What several tests did with a
heredoc of their own:

  stfile.py meta FILE KEY=VALUE... [--drop-prefix P]
      rewrites FILE's __metadata__: KEY=VALUE sets a string, KEY=- removes
      the key (it must be there), --drop-prefix removes every key starting
      with P; the header is padded to 8 bytes with spaces, the data kept.
  stfile.py same-tensors A B
      A and B hold the same tensor names, each with the same bytes
      (metadata aside).

As a module (tests/ on sys.path): read(path) -> (header, data), write(path,
header, data), tensors(path) -> {name: bytes}.
"""
import argparse
import json
import struct
import sys


def read(path):
    """(header dict with __metadata__, the bytes after the header)."""
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    return json.loads(b[8:8 + n]), b[8 + n:]


def write(path, header, data):
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)


def tensors(path):
    header, data = read(path)
    header.pop("__metadata__", None)
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}


def set_meta(path, pairs, drop_prefix=None):
    header, data = read(path)
    meta = header.setdefault("__metadata__", {})
    if drop_prefix:
        for k in [k for k in meta if k.startswith(drop_prefix)]:
            del meta[k]
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError("%s: expected KEY=VALUE or KEY=-" % pair)
        if value == "-":
            del meta[key]
        else:
            meta[key] = value
    write(path, header, data)


def main(argv):
    p = argparse.ArgumentParser(prog="stfile.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("meta")
    m.add_argument("file")
    m.add_argument("pairs", nargs="*")
    m.add_argument("--drop-prefix")
    s = sub.add_parser("same-tensors")
    s.add_argument("a")
    s.add_argument("b")
    a = p.parse_args(argv)
    try:
        if a.cmd == "meta":
            set_meta(a.file, a.pairs, a.drop_prefix)
        else:
            ta, tb = tensors(a.a), tensors(a.b)
            if ta.keys() != tb.keys():
                raise ValueError("the tensor names differ: %s" % sorted(set(ta) ^ set(tb)))
            bad = sorted(k for k in ta if ta[k] != tb[k])
            if bad:
                raise ValueError("%d tensors differ, the first %s" % (len(bad), bad[0]))
    except (OSError, ValueError, KeyError, struct.error) as e:
        print("stfile.py %s: %s" % (a.cmd, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
