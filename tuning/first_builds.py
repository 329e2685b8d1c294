"""What a new user waits for the kernels: one ``Backprojector`` made and called in a new
process, ``--runs`` times in turn, from empty caches (pybp's and PoCL's, in a folder of
their own): each run's seconds, and those spent making program binaries (on PoCL, a
compile of every kernel once more: kept from a program's second build since then).

    python tuning/first_builds.py --runs 4

Run it from the checkout; an older tree runs as ``PYTHONPATH=OLD`` from another folder.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, time
import numpy as np
import pybp
from pybp.cl import codegen
made = []
real = codegen._make_binary
def timed(program):
    start = time.perf_counter()
    real(program)
    made.append(time.perf_counter() - start)
codegen._make_binary = timed
angles = np.linspace(0, np.pi, 50, endpoint=False)
data = np.random.default_rng(0).standard_normal((4, 50, 72)).astype(np.float32)
start = time.perf_counter()
bp = pybp.Backprojector(72, angles, slice_shape=(61, 75), slices_per_pass=4, kernel="alu")
bp(data)
print(json.dumps(dict(seconds=time.perf_counter() - start, binaries=sum(made),
                      count=len(made), device=bp.device.name.strip())))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: at least 1")
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, PYBP_CACHE_DIR=str(Path(folder) / "pybp"),
                   POCL_CACHE_DIR=str(Path(folder) / "pocl"), PYBP_BUILD_NOTICE="0")
        for run in range(1, args.runs + 1):
            done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                                  text=True, check=True)
            r = json.loads(done.stdout.splitlines()[-1])
            print(f"run {run} ({r['device']}): {r['seconds']:.2f} s, of which binaries "
                  f"{r['binaries']:.2f} s ({r['count']} programs)")


if __name__ == "__main__":
    main()
