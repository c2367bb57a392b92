#!/usr/bin/env python3
"""tasklog.py - the task list STEPGRAPH_TASK_LOG=PATH writes (the first step as
submitted to StarPU: one line a task, tab-separated name, codelet, priority,
where, scheduling context, buffers as BUFFER:MODE,...), as the shell tests
read it.

  tasklog.py kinds FILE CODELET=COUNT...
      prints the count of every codelet as a TAP comment and checks those
      named (a codelet absent counts 0); exit 1 with the differences.

As a module (PYTHONPATH=tests): rows(path) -> [[name, codelet, ...]],
kinds(rows) -> Counter of codelets, accesses(rows) -> {task: {buffer: mode}}.
"""
import collections
import sys


def rows(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def kinds(rs):
    return collections.Counter(r[1] for r in rs)


def accesses(rs):
    return {r[0]: dict(a.rsplit(":", 1) for a in r[5].split(",") if a) for r in rs}


def main(argv):
    if len(argv) < 2 or argv[0] != "kinds":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        got = kinds(rows(argv[1]))
        want = {k: int(v) for k, v in (a.split("=", 1) for a in argv[2:])}
    except (OSError, ValueError, IndexError) as e:
        print("tasklog.py kinds: %s" % e, file=sys.stderr)
        return 1
    print("# task kinds:", dict(got))
    bad = {k: (got.get(k, 0), n) for k, n in want.items() if got.get(k, 0) != n}
    if bad:
        print("tasklog.py kinds: (got, wanted): %s" % bad, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
