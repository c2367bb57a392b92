#!/usr/bin/env python3
"""sglog.py - stepgraph's metrics files (--metrics: JSONL, one row a step) as
the tests read them: the comparisons of two runs and the "it learns" check
that many shell tests made with a heredoc of their own.

As a command (exit 0 when the check holds, 1 with the reason on stderr):

  sglog.py same REF GOT [--rtol R] [--skip K] [--steps N] [--keys K1,K2] [--show]
      GOT's values are REF's from REF's (K+1)-th row on, as many rows (N when
      given, at least one), every value a finite number (a null, how the
      metrics write a NaN, fails even where both runs have it); equal (R 0,
      the default: bit for bit, the metrics having 17 significant digits) or
      within R relative to REF's value. Keys: loss by default. --show prints
      both columns as TAP comments.
  sglog.py learns FILE --steps N [--window W] [--drop D] [--show]
      FILE has N finite losses and the mean of its last W (3) is below the
      mean of its first W by more than D (0). --show prints both means.
  sglog.py losses FILE
      the losses on one line, as Python's repr (17 digits), space-separated.

As a module (tests/ on sys.path): rows, column, finite_column.
"""
import argparse
import json
import math
import sys


class CheckFailed(Exception):
    pass


def rows(path):
    """The step rows of PATH (dicts): blank lines and an evaluation's rows
    (those with "eval_loss", docs/training.md#validation) skipped."""
    with open(path) as f:
        out = [json.loads(line) for line in f if line.strip()]
    return [r for r in out if "eval_loss" not in r]


def column(path, key="loss"):
    """KEY of every row of PATH, as written (None for a null)."""
    return [r.get(key) for r in rows(path)]


def finite_column(path, key="loss"):
    """KEY of every row as floats; CheckFailed at the first value that is not
    a finite number (booleans are not numbers here)."""
    out = []
    for i, x in enumerate(column(path, key)):
        if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
            raise CheckFailed("%s: row %d: %s %r is not a finite number" % (path, i + 1, key, x))
        out.append(float(x))
    return out


def same(ref, got, rtol=0.0, skip=0, steps=None, keys=("loss",), show=False):
    for key in keys:
        a = finite_column(ref, key)[skip:]
        b = finite_column(got, key)
        if show:
            print("# %s %s: %r\n# %s %s: %r" % (ref, key, a, got, key, b))
        if len(a) != len(b) or not a or (steps is not None and len(a) != steps):
            raise CheckFailed("%s: %d rows against %d (from row %d of %s)%s"
                              % (got, len(b), len(a), skip + 1, ref,
                                 "" if steps is None else ", %d wanted" % steps))
        for i, (x, y) in enumerate(zip(a, b)):
            if (x != y) if rtol == 0 else (abs(x - y) > rtol * abs(x)):
                raise CheckFailed("%s row %d: %s %r, %s's %r (rtol %g)"
                                  % (got, i + 1, key, y, ref, x, rtol))


def learns(path, steps, window=3, drop=0.0, show=False):
    a = finite_column(path)
    if len(a) != steps:
        raise CheckFailed("%s: %d losses, %d wanted" % (path, len(a), steps))
    first, last = sum(a[:window]) / window, sum(a[-window:]) / window
    if show:
        print("# mean loss of steps 1-%d %.4f, of steps %d-%d %.4f"
              % (window, first, steps - window + 1, steps, last))
    if not last < first - drop:
        raise CheckFailed("%s: mean loss of the last %d steps %r, not below the first %d's %r by %g: %r"
                          % (path, window, last, window, first, drop, a))


def main(argv):
    p = argparse.ArgumentParser(prog="sglog.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("same")
    s.add_argument("ref")
    s.add_argument("got")
    s.add_argument("--rtol", type=float, default=0.0)
    s.add_argument("--skip", type=int, default=0)
    s.add_argument("--steps", type=int)
    s.add_argument("--keys", default="loss")
    s.add_argument("--show", action="store_true")
    g = sub.add_parser("learns")
    g.add_argument("file")
    g.add_argument("--steps", type=int, required=True)
    g.add_argument("--window", type=int, default=3)
    g.add_argument("--drop", type=float, default=0.0)
    g.add_argument("--show", action="store_true")
    ls = sub.add_parser("losses")
    ls.add_argument("file")
    a = p.parse_args(argv)
    try:
        if a.cmd == "same":
            same(a.ref, a.got, a.rtol, a.skip, a.steps, a.keys.split(","), a.show)
        elif a.cmd == "learns":
            learns(a.file, a.steps, a.window, a.drop, a.show)
        else:
            print(" ".join(repr(x) for x in column(a.file)))
    except (CheckFailed, OSError, ValueError, KeyError) as e:
        print("sglog.py %s: %s" % (a.cmd, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
