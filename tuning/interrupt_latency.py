#!/usr/bin/env python3
"""Seconds from Ctrl-C (SIGINT) to the end of a long run, in the CLI and in Python.

    python tuning/interrupt_latency.py [--size 3072] [--delays 3,6,9] [--volume 64]
    python tuning/interrupt_latency.py --command "pybp reconstruct scan.h5 -o out --overwrite" \
        --delays 0.5,1,1.5,2 --second 0.05

Runs ``pybp demo --size SIZE`` (one slice) and a ``pybp.reconstruct`` of a
``VOLUME x SIZE x SIZE`` stack in a subprocess (or ``--command``), sends SIGINT after
each delay (and, with ``--second``, a second one that many seconds after the first, as a
user pressing Ctrl-C twice does), and prints the exit code, the last line on standard
error, whether a traceback was printed, and how long the process took to end after the
first signal. A delay past the end of the run is reported as such.
"""

import argparse
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

VOLUME_SCRIPT = """
import time, numpy as np, pybp
n, rows = {size}, {volume}
angles = np.linspace(0, np.pi, n, endpoint=False)
projections = np.full((n, rows, n), 1000, np.uint16)
flats, darks = np.full((2, rows, n), 2000, np.uint16), np.zeros((2, rows, n), np.uint16)
print("started", flush=True)
try:
    pybp.reconstruct(projections, angles, flats, darks, progress=False)
    print("finished", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt at", time.time(), flush=True)
"""


def measure(command, delay, ready=None, second=0.0):
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if ready is not None:
        process.stdout.readline()  # set-up done: the delay counts from here
    time.sleep(delay)
    if process.poll() is not None:
        process.communicate()
        return None
    tick, sent = time.monotonic(), time.time()
    process.send_signal(signal.SIGINT)
    if second:
        time.sleep(second)
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    end = time.monotonic() - tick
    caught = [line for line in out.splitlines() if line.startswith("KeyboardInterrupt at")]
    last = (caught or err.strip().splitlines() or out.strip().splitlines() or [""])[-1]
    if last.startswith("KeyboardInterrupt at"):  # from Python: when it was raised
        last = f"KeyboardInterrupt after {float(last.split()[-1]) - sent:.2f} s"
    return end, process.returncode, last, "Traceback" in err


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=3072, help="bins, angles and slice width")
    parser.add_argument("--volume", type=int, default=64, help="slices of the reconstruct run")
    parser.add_argument("--delays", default="3,6,9", help="seconds before SIGINT, comma-separated")
    parser.add_argument("--command", help="instead: this command line (split as a shell does)")
    parser.add_argument("--second", type=float, default=0.0,
                        help="a second SIGINT this many seconds after the first (0: none)")
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",")]
    picture = Path(tempfile.mkdtemp()) / "demo.png"
    runs = {
        f"pybp demo --size {args.size}": ([sys.executable, "-m", "pybp", "demo", "--size",
                                           str(args.size), "--output", str(picture),
                                           "--overwrite"], None),
        f"pybp.reconstruct {args.volume}x{args.size}^2": (
            [sys.executable, "-c", textwrap.dedent(VOLUME_SCRIPT.format(
                size=args.size, volume=args.volume))], "started"),
    }
    if args.command:
        runs = {args.command: (shlex.split(args.command), None)}
    print("| run | SIGINT after | exit | to the process's end | traceback | last line |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (command, ready) in runs.items():
        for delay in delays:
            result = measure(command, delay, ready, args.second)
            if result is None:
                print(f"| {name} | {delay:g} s | finished before | | | |")
                continue
            seconds, code, last, traceback = result
            print(f"| {name} | {delay:g} s | {code} | {seconds:.2f} s | "
                  f"{'yes' if traceback else 'no'} | {last[:70]} |", flush=True)


if __name__ == "__main__":
    main()
