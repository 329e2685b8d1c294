#!/usr/bin/env python3
"""A device's stream bound to its NUMA node's CPUs against unbound (pybp/stream/numa.py),
in turn, in one run: parallel beam from memory to memory, every run checked against the
first, unbound, bit for bit.

    python3 tuning/numa_binding.py --size 2048 --rows 1024 --runs 3

It prints the device's PCI slot, its node and the host's nodes. On a host of one node
(nothing to bind), ``--fake-half`` binds to the upper half of this process's CPUs, as
a second node would: a /sys tree of two nodes is made for the run, with the device's
slot on the second.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pybp  # noqa: E402
from pybp.bench.volume import make_scan  # noqa: E402
from pybp.cl.device import describe, open_device  # noqa: E402
from pybp.stream import numa  # noqa: E402


def fake_two_nodes(pci_address: str) -> Path:
    """A /sys tree: this process's CPUs split into two nodes, the device on the second."""
    cpus = sorted(os.sched_getaffinity(0))
    root = Path(tempfile.mkdtemp(prefix="pybp-numa-"))
    halves = (cpus[:len(cpus) // 2] or cpus, cpus[len(cpus) // 2:])
    for node, part in enumerate(halves):
        folder = root / f"devices/system/node/node{node}"
        folder.mkdir(parents=True)
        (folder / "cpulist").write_text(",".join(map(str, part)) + "\n")
    (root / "devices/system/node/online").write_text("0-1\n")
    slot = root / "bus/pci/devices" / pci_address
    slot.mkdir(parents=True)
    (slot / "numa_node").write_text("1\n")
    return root


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3, help="of each, in turn, after one")
    parser.add_argument("--fake-half", action="store_true",
                        help="on a host of one node: bind to half the CPUs, as a second would")
    args = parser.parse_args(argv)
    for name in ("size", "rows", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected at least 1, got {getattr(args, name)}")
    device = describe(open_device(None)[0])
    print(f"{device.name}: PCI slot {device.pci_address}, node "
          f"{numa.node_of(device.pci_address)}; the host's nodes {sorted(numa.nodes())}, "
          f"{len(os.sched_getaffinity(0))} CPUs here", flush=True)
    real = numa.SYS
    bound_sys = real
    if args.fake_half:
        if device.pci_address is None:
            sys.exit("--fake-half: the device names no PCI slot")
        bound_sys = fake_two_nodes(device.pci_address)
    numa.SYS = bound_sys
    cpus = numa.cpus_near(device)
    numa.SYS = real
    if cpus is None:
        sys.exit("nothing to bind on this host (one node, or the slot's node unknown): "
                 "--fake-half binds to half the CPUs")
    angles, projections, flats, darks = make_scan(args.size, args.size, args.rows, 20)
    out = np.empty((args.rows, args.size, args.size), np.float32)
    first, seconds = None, {"unbound": [], "bound": []}
    for k, name in enumerate(["unbound", "bound"] * (args.runs + 1)):
        numa.SYS = bound_sys if name == "bound" else real
        os.environ[numa.ENV] = "on" if name == "bound" else "off"
        tick = time.perf_counter()
        pybp.reconstruct(projections, angles, flats, darks, out=out, device=device.index,
                         progress=False)
        wall = time.perf_counter() - tick
        if first is None:
            first = out.copy()
        same = np.array_equal(out, first)
        if k >= 2:  # the first of each: a warm-up
            seconds[name].append(wall)
        print(f"{name} ({len(cpus)} CPUs)" if name == "bound" else name,
              f"{wall:.2f} s, the same bits as the first: {same}", flush=True)
        if not same:
            sys.exit("the volumes differ")
    numa.SYS = real
    print("median: " + ", ".join(f"{k} {np.median(v):.2f} s" for k, v in seconds.items()))


if __name__ == "__main__":
    main()
