#!/usr/bin/env python3
"""numa_trace_check.py TRACE NODES [ONLY_NODE] - checks a Chrome trace of a run
with several NUMA memory nodes (docs/training.md, "NUMA nodes") against the placement rule
written independently of the code: a CPU sub-group s's state lives on NUMA
node s mod NODES (ONLY_NODE given: on that node alone, the only node with
workers the optimizer may use: a rank bound to one node, or SuperOffload's
reserved cores), and each of its CPU optimizer tasks (adam_cpu, and the casts
that touch it) ran on a worker of that node. Every task carries the worker's
node ("numa"); with NODES > 1 the state must be spread over every node.
Prints one line per finding; exits 1 on the first rule broken."""
import json
import sys

trace, nodes = sys.argv[1], int(sys.argv[2])
only_node = int(sys.argv[3]) if len(sys.argv) > 3 else None
events = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
tasks = [e["args"] for e in events if "kind" in e.get("args", {}) and "node" in e["args"]]
assert tasks, "no task events"
missing = [a for a in tasks if "numa" not in a or "data_numa" not in a]
assert not missing, "tasks without numa/data_numa: %r" % missing[:3]
adam = [a for a in tasks if a["kind"] == "adam_cpu"]
assert adam, "no adam_cpu task"
held = set()
for a in adam + [a for a in tasks if a["kind"] == "cast" and a["data_numa"] >= 0]:
    s = a["subgroup"]
    want = only_node if only_node is not None else s % nodes
    assert a["data_numa"] == want, "%s of sub-group %d: state on node %d, expected %d" % (
        a["kind"], s, a["data_numa"], want)
    assert a["numa"] == want, "%s of sub-group %d ran on node %d (%s), its state is on %d" % (
        a["kind"], s, a["numa"], a["worker"], want)
    held.add(want)
if only_node is None:
    assert held == set(range(nodes)), "state on nodes %r, expected all of 0..%d" % (
        sorted(held), nodes - 1)
print("%d adam_cpu tasks on their state's node; state on nodes %s" % (len(adam), sorted(held)))
