"""watchdog_bound.py ERR METRICS COMM_TIMEOUT - checks a watchdog's error.

ERR holds stderr of a run that the partition watchdog ended
(runtime/dist/watchdog.c): its first line "no collective completed for IDLE s
(the bound: B s = max(comm_timeout T s, 10 x mean step time M s))". METRICS
is the run's metrics file (one JSON object per step, "time_ms"), read with
the standard json module. Checks, independently of the code's own sums, that
M is the mean of the metrics' step times (within 2%), that B is
max(COMM_TIMEOUT, 10 x that mean) (within 2%), that T is COMM_TIMEOUT and
that IDLE >= B (the bound had passed), IDLE being printed to 0.1 s and B to
0.01 s: an idle time of 7.24 s reads "7.2" against a bound of "7.23", so IDLE
counts up to its rounding, 0.05 s. Prints the figures; exit 1 otherwise.
"""
import json
import re
import sys


def main():
    err, metrics, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    pat = re.compile(r"completed for ([0-9.]+) s \(the bound: ([0-9.]+) s = max\(comm_timeout "
                     r"([0-9.]+) s, 10 x mean step time ([0-9.]+) s\)\)")
    m = next((pat.search(l) for l in open(err) if pat.search(l)), None)
    if not m:
        sys.exit("%s: no watchdog error" % err)
    idle, bound, t, mean = map(float, m.groups())
    times = [json.loads(l)["time_ms"] / 1e3 for l in open(metrics)]
    if not times:
        sys.exit("%s: no steps" % metrics)
    ref = sum(times) / len(times)
    want = max(timeout, 10 * ref)
    print("# %d steps, mean %.4f s (the error says %.4f); bound %.2f s (want %.2f); idle %.1f s"
          % (len(times), ref, mean, bound, want, idle))
    ok = (t == timeout and abs(mean - ref) <= 0.02 * ref + 1e-4 and
          abs(bound - want) <= 0.02 * want + 0.01 and idle + 0.05 >= bound)
    sys.exit(0 if ok else 1)


main()
