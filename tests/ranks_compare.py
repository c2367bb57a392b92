"""ranks_compare.py ONE.jsonl MANY.jsonl RTOL - several ranks against one.

Reads the two runs' metrics (one JSON object per step, written by
`stepgraph run --metrics`) with the standard json module, and checks that
they have the same number of steps (more than zero), that every loss and
gradient norm of both is a finite number (a NaN, an infinity or a null fails),
and that each of the many-rank run's values is within RTOL (relative) of the
one-rank run's. Prints the largest relative difference; exit status 1 with
the first offending step otherwise.
"""
import json
import math
import sys


def read(path):
    rows = []
    for line in open(path):
        row = json.loads(line)
        for key in ("loss", "grad_norm"):
            x = row.get(key)
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
                sys.exit("%s: step %s: %s %r is not a finite number" % (path, row.get("step"), key, x))
        rows.append(row)
    return rows


def main():
    one, many, rtol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    if not one or len(one) != len(many):
        sys.exit("steps: %d in %s, %d in %s" % (len(one), sys.argv[1], len(many), sys.argv[2]))
    worst = 0.0
    for a, b in zip(one, many):
        for key in ("loss", "grad_norm"):
            d = abs(a[key] - b[key]) / max(abs(a[key]), 1e-30)
            worst = max(worst, d)
            if d > rtol:
                sys.exit("step %s: %s %r (one rank) vs %r (several): relative difference %.3g > %g"
                         % (a.get("step"), key, a[key], b[key], d, rtol))
    print("largest relative difference %.3g over %d steps" % (worst, len(one)))


main()
