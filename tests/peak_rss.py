"""peak_rss.py NAME COMMAND...: runs COMMAND with its output in NAME.out,
its exit status in NAME.rc and its peak resident set in bytes (the largest
of the process and its descendants, getrusage's ru_maxrss of the children)
in NAME.rss. Under mpirun, NAME gets the rank: NAME.r<rank>."""
import os
import resource
import subprocess
import sys

name = sys.argv[1]
rank = os.environ.get("OMPI_COMM_WORLD_RANK")
if rank is not None:
    name += ".r" + rank
with open(name + ".out", "w") as out:
    rc = subprocess.call(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)
with open(name + ".rc", "w") as f:
    f.write("%d\n" % rc)
with open(name + ".rss", "w") as f:
    f.write("%d\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
