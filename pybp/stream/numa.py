"""A device's stream on the CPUs of the NUMA node its PCI slot hangs off (issue 53).

On a host of several NUMA nodes (two sockets, each with its own memory and GPUs), a
device's host work (its page-locked staging, the copies into and out of it, the reads
and writes of files) is best done by the CPUs of the GPU's own node, in that node's
memory: the other node's memory is reached over the link between the sockets. While a
device streams, the thread streaming it runs on those CPUs (:func:`near`); the threads
it starts (the pipeline's reader and writer, the copy and writer pools) inherit that,
as Linux gives a new thread its creator's CPUs; and the memory they first touch comes
from that node, Linux's default policy. Nothing changes on a host of one node, for a
device whose slot is unknown (CPU runtimes), or with ``PYBP_NUMA=off``.

Linux only (``/sys``, ``os.sched_setaffinity``); elsewhere nothing is bound.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SYS = Path("/sys")  # (tests point it at a tree of their own)
ENV = "PYBP_NUMA"  # "off": bind nothing
SWITCH = {"": True, "on": True, "1": True, "yes": True, "off": False, "0": False, "no": False}


def cpu_list(text: str) -> frozenset:
    """The CPUs of a Linux CPU list such as ``0-3,8,10-11``."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _listed(path: Path) -> frozenset:
    """The numbers of the Linux CPU list in ``path`` (empty where it cannot be read)."""
    text = _read(path)
    try:
        return cpu_list(text) if text is not None else frozenset()
    except ValueError:
        return frozenset()


def nodes() -> frozenset:
    """The host's online NUMA nodes (empty where ``/sys`` does not say)."""
    return _listed(SYS / "devices/system/node/online")


def node_of(pci_address: str | None) -> int | None:
    """The NUMA node of the PCI device at ``pci_address`` (None: unknown)."""
    if not pci_address:
        return None
    text = _read(SYS / "bus/pci/devices" / pci_address.lower() / "numa_node")
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None  # -1: the firmware does not say


def cpus_of(node: int) -> frozenset:
    """The CPUs of NUMA node ``node`` (empty where unknown)."""
    return _listed(SYS / f"devices/system/node/node{node}/cpulist")


def enabled() -> bool:
    """``PYBP_NUMA``: on (the default) or off; ``ValueError`` naming it for other values."""
    value = os.environ.get(ENV, "").strip().lower()
    if value not in SWITCH:
        raise ValueError(f"{ENV}: expected on or off, got {os.environ[ENV]!r}")
    return SWITCH[value]


def cpus_near(device) -> frozenset | None:
    """The CPUs ``device`` (a :class:`pybp.cl.device.DeviceDescription`) streams from:
    its node's that this thread may run on; None where there is nothing to choose (one
    node, a slot or node not known, none of the node's CPUs allowed here,
    ``PYBP_NUMA=off``, no ``sched_setaffinity``)."""
    if not enabled() or not hasattr(os, "sched_setaffinity") or len(nodes()) < 2:
        return None
    node = node_of(getattr(device, "pci_address", None))
    if node is None:
        return None
    cpus = cpus_of(node) & os.sched_getaffinity(0)
    return cpus or None


@contextlib.contextmanager
def near(device):
    """Run the block (and the threads it starts) on ``device``'s node's CPUs
    (:func:`cpus_near`), then put this thread's CPUs back; yields the CPUs, or None
    where nothing is bound."""
    cpus = cpus_near(device)
    if cpus is None:
        yield None
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield cpus
    finally:
        os.sched_setaffinity(0, before)
