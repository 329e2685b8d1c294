#!/usr/bin/env python3
"""The host memory bandwidth that NumPy copies reach over threads: what the pipelines
of several GPUs share (each copies its chunks between the caller's arrays and its
page-locked staging, while the GPUs' DMA reads and writes that staging).

    python tuning/host_memory_bandwidth.py [--gib 4]

(``pybp bench --io`` measures the same, beside the machine's other limits.)
"""

import argparse

from pybp.bench import io


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=4)
    args = parser.parse_args()
    n = int(args.gib * 2**30)
    for threads, rate in io.host_copies(n, repeats=3, threads=(1, 4, 8, 16, 32)).items():
        print(f"NumPy copy of {args.gib:g} GiB, {threads:2d} threads: {rate:5.1f} GB/s "
              f"copied ({2 * rate:5.1f} GB/s read and written)", flush=True)

if __name__ == "__main__":
    main()
