#!/usr/bin/env python3
"""trace_overlap.py - from a `stepgraph run --trace` file (Chrome trace of the
last step), how much of each link lane's copy time ran while a CUDA worker
computed, and while a CPU worker did. Written apart from the C code that
computes the run's own overlap figures (runtime/trace/overlap.c), reading only
the trace.

    python3 tests/trace_overlap.py [--kinds] TRACE.json

Prints one line per link lane with slices (h2d, d2h, net), e.g.
    h2d: 13 copies, 80.2 ms; under CUDA compute 61.0 ms (76.1%), under CPU work 79.8 ms (99.5%)
and a first line with the step's span and the CUDA workers' busy share. With
--kinds, then one line per node kind and worker type, the most time first, e.g.
    validate on CPU workers: 168 tasks, 5786.2 ms
Exit status 0; 1 when the file cannot be read or holds no slice.
"""
import json
import sys


def union(intervals):
    """Sorted, merged [start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(s, e, merged):
    """Length of [s, e) covered by the merged intervals."""
    total = 0.0
    for a, b in merged:
        if b <= s:
            continue
        if a >= e:
            break
        total += min(b, e) - max(a, s)
    return total


def main():
    args = sys.argv[1:]
    kinds = bool(args) and args[0] == "--kinds"
    args = args[1:] if kinds else args
    if len(args) != 1:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 1
    path = args[0]
    try:
        with open(path) as f:
            ev = json.load(f)
    except (OSError, ValueError) as e:
        print("trace_overlap: %s: %s" % (path, e), file=sys.stderr)
        return 1
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    names = {e["tid"]: e["args"]["name"] for e in ev
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    lanes = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("tid") in names:
            lanes.setdefault(names[e["tid"]], []).append((e["ts"], e["ts"] + e["dur"]))
    if not lanes:
        print("trace_overlap: %s: no slice" % path, file=sys.stderr)
        return 1
    cuda = union([iv for n, ivs in lanes.items() if n.startswith("CUDA") for iv in ivs])
    cpu = union([iv for n, ivs in lanes.items() if n.startswith("CPU") for iv in ivs])
    every = [iv for n, ivs in lanes.items() if n != "critical path" for iv in ivs]
    t0, t1 = min(s for s, _ in every), max(e for _, e in every)
    busy = sum(b - a for a, b in cuda)
    print("step span %.1f ms; CUDA workers busy %.1f ms (%.1f%%)" %
          ((t1 - t0) / 1e3, busy / 1e3, 100.0 * busy / (t1 - t0) if t1 > t0 else 0.0))
    for lane in ("link h2d", "link d2h", "link net"):
        ivs = lanes.get(lane)
        if not ivs:
            continue
        total = sum(e - s for s, e in ivs)
        under_cuda = sum(covered(s, e, cuda) for s, e in ivs)
        under_cpu = sum(covered(s, e, cpu) for s, e in ivs)
        pct = (lambda x: 100.0 * x / total) if total > 0 else (lambda x: 0.0)
        print("%s: %d copies, %.1f ms; under CUDA compute %.1f ms (%.1f%%), under CPU work "
              "%.1f ms (%.1f%%)" % (lane.split()[1], len(ivs), total / 1e3, under_cuda / 1e3,
                                    pct(under_cuda), under_cpu / 1e3, pct(under_cpu)))
    if kinds:
        # the worker lanes' tasks (a slice's category is its node kind)
        per = {}
        for e in ev:
            lane = names.get(e.get("tid"), "") if e.get("ph") == "X" else ""
            if lane.startswith("CUDA") or lane.startswith("CPU"):
                key = (e.get("cat", "?"), lane.split()[0])
                n, t = per.get(key, (0, 0.0))
                per[key] = (n + 1, t + e["dur"])
        for (kind, dev), (n, t) in sorted(per.items(), key=lambda kv: (-kv[1][1], kv[0])):
            print("%s on %s workers: %d task%s, %.1f ms" % (kind, dev, n, "" if n == 1 else "s",
                                                           t / 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
