#!/usr/bin/env python3
"""Host-device transfer rates that cone-beam slabs are made of.

    PYBP_DEVICE=nvidia python3 tuning/transfer_bandwidth.py

Page-locked uploads and downloads of 1 GiB, both at once on two queues, a pageable
upload, and boxes of 64 rows x 16 projections between a page-locked store of 496
projections of 960 x 1248 and a device buffer (as the slabs' passes copy them), and
up into an image array; each the mean of 3 after one warm-up.
"""

import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pybp.cl.device import open_device  # noqa: E402
from pybp.cl.staging import Staging  # noqa: E402

ANGLES, ROWS, COLS, BOX_ROWS, BOX_ANGLES = 496, 960, 1248, 64, 16


def main():
    _, context, _ = open_device(None)
    q1, q2 = cl.CommandQueue(context), cl.CommandQueue(context)
    staging = Staging(q1)
    n = 1 << 28
    up_host, down_host = staging.array(n, np.float32), staging.array(n, np.float32)
    up_host[:] = 1
    a = cl.Buffer(context, cl.mem_flags.READ_WRITE, up_host.nbytes)
    b = cl.Buffer(context, cl.mem_flags.READ_WRITE, up_host.nbytes)

    def seconds(step, k=3):
        step()
        q1.finish()
        q2.finish()
        tick = time.perf_counter()
        for _ in range(k):
            step()
        q1.finish()
        q2.finish()
        return (time.perf_counter() - tick) / k

    def both():
        cl.enqueue_copy(q1, a, up_host, is_blocking=False)
        cl.enqueue_copy(q2, down_host, b, is_blocking=False)
        q1.flush()
        q2.flush()

    pageable = np.ones(n, np.float32)
    gb = up_host.nbytes / 1e9
    up = seconds(lambda: cl.enqueue_copy(q1, a, up_host, is_blocking=False))
    down = seconds(lambda: cl.enqueue_copy(q1, down_host, b, is_blocking=False))
    print(f"page-locked up {gb / up:.1f} GB/s, down {gb / down:.1f} GB/s, both at once "
          f"{2 * gb / seconds(both):.1f} GB/s in all; pageable up "
          f"{gb / seconds(lambda: cl.enqueue_copy(q1, a, pageable, is_blocking=False)):.1f} GB/s")
    store = staging.array(ANGLES * ROWS * COLS, np.float32).reshape(ANGLES, ROWS, COLS)
    row = COLS * 4
    box = cl.Buffer(context, cl.mem_flags.READ_WRITE, BOX_ANGLES * BOX_ROWS * row)

    def boxes(upward):
        def step():
            for first in range(0, ANGLES, BOX_ANGLES):
                cl.enqueue_copy(q1, box, store, buffer_origin=(0, 0, 0),
                                host_origin=(0, 400, first), region=(row, BOX_ROWS, BOX_ANGLES),
                                buffer_pitches=(row, BOX_ROWS * row),
                                host_pitches=(row, ROWS * row), is_blocking=False) if upward \
                    else cl.enqueue_copy(q1, store, box, buffer_origin=(0, 0, 0),
                                         host_origin=(0, 400, first),
                                         region=(row, BOX_ROWS, BOX_ANGLES),
                                         buffer_pitches=(row, BOX_ROWS * row),
                                         host_pitches=(row, ROWS * row), is_blocking=False)
        return step

    image = cl.create_image(context, cl.mem_flags.READ_ONLY,
                            cl.ImageFormat(cl.channel_order.R, cl.channel_type.FLOAT),
                            shape=(COLS, BOX_ROWS, BOX_ANGLES), is_array=True)
    flat = store.reshape(-1)

    def into_image():  # as the texture family's images, straight from the store
        for first in range(0, ANGLES, BOX_ANGLES):
            cl.enqueue_copy(q1, image, flat[(first * ROWS + 400) * COLS:], origin=(0, 0, 0),
                            region=(COLS, BOX_ROWS, BOX_ANGLES), pitches=(row, ROWS * row),
                            is_blocking=False)

    gb = ANGLES * BOX_ROWS * row / 1e9
    print(f"boxes of {BOX_ROWS} rows x {BOX_ANGLES} projections: up "
          f"{gb / seconds(boxes(True)):.1f} GB/s, down {gb / seconds(boxes(False)):.1f} GB/s, "
          f"up into an image array {gb / seconds(into_image):.1f} GB/s")
    staging.release()


if __name__ == "__main__":
    main()
