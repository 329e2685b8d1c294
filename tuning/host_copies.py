#!/usr/bin/env python3
"""Host-side copy speeds that decide the pipeline's staging (docs/design.md, section 5).

    python tuning/host_copies.py [--mib 512] [--threads 8]

Prints GB/s of: device-to-host and host-to-device DMA into pageable NumPy memory and
into mapped ``ALLOC_HOST_PTR`` buffers (per flag set), and CPU copies (several threads)
between NumPy memory and those mapped buffers. Pick the device with PYBP_DEVICE.
"""

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyopencl as cl

from pybp.cl.device import select_device


def seconds(action, repeats=3):
    action()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def threaded_copy(pool, threads, destination, source):
    edges = np.linspace(0, destination.size, 4 * threads + 1).astype(int)
    for f in [pool.submit(np.copyto, destination[a:b], source[a:b]) for a, b in zip(edges[:-1], edges[1:])]:
        f.result()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    n = args.mib << 18  # float32 values
    gb = n * 4 / 1e9
    context = cl.Context([select_device()])
    queue = cl.CommandQueue(context)
    device = cl.Buffer(context, cl.mem_flags.READ_WRITE, n * 4)
    pool = ThreadPoolExecutor(args.threads)
    plain = np.ones(n, np.float32)
    other = np.ones(n, np.float32)
    rate = lambda s: f"{gb / s:6.1f} GB/s"
    print(f"numpy -> numpy, {args.threads} threads: {rate(seconds(lambda: threaded_copy(pool, args.threads, other, plain)))}")
    print(f"numpy -> numpy, 1 thread:   {rate(seconds(lambda: np.copyto(other, plain)))}")
    print(f"DMA device -> pageable numpy: {rate(seconds(lambda: cl.enqueue_copy(queue, plain, device)))}")
    print(f"DMA pageable numpy -> device: {rate(seconds(lambda: cl.enqueue_copy(queue, device, plain)))}")
    copy_host = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
    print(f"new buffer with COPY_HOST_PTR from pageable numpy: "
          f"{rate(seconds(lambda: cl.Buffer(context, copy_host, hostbuf=plain).release()))}")

    def enqueued():
        buffer = cl.Buffer(context, cl.mem_flags.READ_ONLY, n * 4)
        cl.enqueue_copy(queue, buffer, plain)
        buffer.release()
    print(f"new buffer, then an enqueued copy from pageable numpy: {rate(seconds(enqueued))}")
    for label, flags in [("READ_WRITE", cl.mem_flags.READ_WRITE), ("READ_ONLY", cl.mem_flags.READ_ONLY),
                         ("WRITE_ONLY", cl.mem_flags.WRITE_ONLY)]:
        staging = cl.Buffer(context, flags | cl.mem_flags.ALLOC_HOST_PTR, n * 4)
        mapped, _ = cl.enqueue_map_buffer(queue, staging, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                          (n,), np.float32, is_blocking=True)
        mapped[:] = 1
        print(f"ALLOC_HOST_PTR|{label}: DMA to it {rate(seconds(lambda: cl.enqueue_copy(queue, mapped, device)))}, "
              f"from it {rate(seconds(lambda: cl.enqueue_copy(queue, device, mapped)))}; "
              f"CPU copy out of it {rate(seconds(lambda: threaded_copy(pool, args.threads, other, mapped)))}, "
              f"into it {rate(seconds(lambda: threaded_copy(pool, args.threads, mapped, other)))}", flush=True)
        mapped.base.release(queue)
        queue.finish()


if __name__ == "__main__":
    main(sys.argv[1:])
