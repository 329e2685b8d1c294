#!/usr/bin/env python3
"""The host memory bandwidth that NumPy copies reach over threads: what the pipelines
of several GPUs share (each copies its chunks between the caller's arrays and its
page-locked staging, while the GPUs' DMA reads and writes that staging).

    python tuning/host_memory_bandwidth.py [--gib 4]
"""

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=4)
    args = parser.parse_args()
    n = int(args.gib * 2**30)
    source = np.ones(n // 4, np.float32)
    destination = np.zeros_like(source)
    for threads in (1, 4, 8, 16, 32):
        edges = np.linspace(0, source.size, 4 * threads + 1).astype(int)
        best = float("inf")
        with ThreadPoolExecutor(threads) as pool:
            for _ in range(3):
                tick = time.perf_counter()
                for future in [pool.submit(np.copyto, destination[a:b], source[a:b])
                               for a, b in zip(edges[:-1], edges[1:])]:
                    future.result()
                best = min(best, time.perf_counter() - tick)
        print(f"NumPy copy of {args.gib:g} GiB, {threads:2d} threads: {n / best / 1e9:5.1f} GB/s "
              f"copied ({2 * n / best / 1e9:5.1f} GB/s read and written)", flush=True)


if __name__ == "__main__":
    main()
