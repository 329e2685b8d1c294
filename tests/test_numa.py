"""A device's stream on the CPUs of its NUMA node (pybp/stream/numa.py): the node read
from a /sys tree made here, the PCI slot from the runtimes' queries, the stream's
threads (the rows' writers, cone beam's slabs written behind) bound there while it
runs and the caller's CPUs put back after, the same bits as unbound; nothing bound
where there is nothing to choose."""

import os
import threading
import types

import numpy as np
import pyopencl as cl
import pytest
from test_write_behind import EXACT, Recorded, _slabs_case

import pybp
from pybp.cl.device import describe, pci_address
from pybp.io.output.npy import NpyFile
from pybp.io.writers import open_output
from pybp.stream import numa

SLOT = "0000:1b:00.0"


def allowed():
    return frozenset(os.sched_getaffinity(0))


def fake_sys(root, nodes: dict, slots: dict, online=None):
    """A /sys tree: ``nodes`` (node -> CPU list text), ``slots`` (PCI address -> its
    ``numa_node`` text), the online nodes (default: those of ``nodes``)."""
    node_dir = root / "devices/system/node"
    node_dir.mkdir(parents=True)
    (node_dir / "online").write_text(online if online is not None else
                                     ",".join(str(n) for n in sorted(nodes)) + "\n")
    for node, cpus in nodes.items():
        (node_dir / f"node{node}").mkdir()
        (node_dir / f"node{node}" / "cpulist").write_text(cpus + "\n")
    for address, node in slots.items():
        (root / "bus/pci/devices" / address).mkdir(parents=True)
        (root / "bus/pci/devices" / address / "numa_node").write_text(node + "\n")
    return root


def two_nodes(tmp_path, monkeypatch, slot_node="1"):
    """Node 1 holds this process's last allowed CPU, node 0 the rest (all of them where
    only one is allowed); the device's slot hangs off ``slot_node``."""
    mine = sorted(allowed())
    near, rest = [mine[-1]], mine[:-1] or mine
    monkeypatch.setattr(numa, "SYS", fake_sys(
        tmp_path / "sys", {0: ",".join(map(str, rest)), 1: str(near[0])},
        {SLOT: slot_node}))
    monkeypatch.delenv(numa.ENV, raising=False)
    return frozenset(near)


def test_cpu_lists():
    assert numa.cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert numa.cpu_list("5") == {5} and numa.cpu_list("") == frozenset()


def test_the_block_and_its_threads_run_on_the_devices_node(tmp_path, monkeypatch):
    """Inside ``near``, this thread and a thread it starts run on the node's CPUs (the
    slot's address as the runtime spells it, upper case too); after, this thread's CPUs
    are as before, also when the block raises."""
    before = allowed()
    node_cpus = two_nodes(tmp_path, monkeypatch)
    device = types.SimpleNamespace(pci_address=SLOT.upper())
    assert numa.nodes() == {0, 1} and numa.node_of(SLOT) == 1
    assert numa.cpus_near(device) == node_cpus
    seen = []
    with numa.near(device) as cpus:
        assert cpus == node_cpus == allowed()
        thread = threading.Thread(target=lambda: seen.append(allowed()))
        thread.start()
        thread.join()
    assert seen == [node_cpus] and allowed() == before
    with pytest.raises(RuntimeError, match="inside"):
        with numa.near(device):
            raise RuntimeError("inside")
    assert allowed() == before


@pytest.mark.parametrize("case", ["one node", "node unknown", "no such slot", "no slot",
                                  "off", "cpus not allowed", "garbled"])
def test_nothing_is_bound_where_there_is_nothing_to_choose(tmp_path, monkeypatch, case):
    before = allowed()
    device = types.SimpleNamespace(pci_address=SLOT)
    if case == "one node":
        monkeypatch.setattr(numa, "SYS", fake_sys(tmp_path, {0: "0-1023"}, {SLOT: "0"}))
    else:
        two_nodes(tmp_path, monkeypatch, slot_node="-1" if case == "node unknown" else
                  "x" if case == "garbled" else "1")
    if case == "no such slot":
        device.pci_address = "0000:99:00.0"
    if case == "no slot":
        device.pci_address = None
    if case == "off":
        monkeypatch.setenv(numa.ENV, "off")
    if case == "cpus not allowed":
        (numa.SYS / "devices/system/node/node1/cpulist").write_text(f"{max(before) + 1000}\n")
    assert numa.cpus_near(device) is None
    with numa.near(device) as cpus:
        assert cpus is None and allowed() == before


def test_pybp_numa_is_on_or_off(tmp_path, monkeypatch):
    """Binding follows PYBP_NUMA (on by default); any other value is refused by name."""
    node_cpus = two_nodes(tmp_path, monkeypatch)
    device = types.SimpleNamespace(pci_address=SLOT)
    for value, want in (("on", node_cpus), (" ON ", node_cpus), ("1", node_cpus),
                        ("off", None), ("0", None), ("no", None)):
        monkeypatch.setenv(numa.ENV, value)
        assert numa.cpus_near(device) == want, value
    monkeypatch.setenv(numa.ENV, "sometimes")
    with pytest.raises(ValueError, match="PYBP_NUMA: expected on or off, got 'sometimes'"):
        numa.cpus_near(device)


class NvDevice:
    """What pyopencl gives of an NVIDIA device's slot (bus 0x1b, device 3, function 1)."""

    extensions = "cl_khr_fp64 cl_nv_device_attribute_query"
    pci_bus_id_nv = 0x1B
    pci_slot_id_nv = 3 << 3 | 1

    def __init__(self, domain=2):
        self.domain = domain

    @property
    def pci_domain_id_nv(self):
        if self.domain is None:  # a driver before the domain query
            raise cl.LogicError("clGetDeviceInfo", cl.status_code.INVALID_VALUE, "")
        return self.domain


class AmdDevice:
    extensions = "cl_amd_device_attribute_query"
    topology_amd = types.SimpleNamespace(type=1, bus=0xC1, device=0, function=0)


class CpuDevice:
    extensions = "cl_khr_fp64"


def test_the_pci_slot_as_linux_names_it(cl_device, tmp_path, monkeypatch):
    """NVIDIA's slot read as device << 3 | function, or as the device number where Linux
    lists an NVIDIA device there and none at the first reading; AMD's topology; no slot
    from a CPU runtime, or from a query that fails."""
    from pybp.cl import device as cl_device_module

    monkeypatch.setattr(cl_device_module, "PCI_DEVICES", tmp_path)
    assert pci_address(NvDevice()) == "0002:1b:03.1"  # neither listed: the first reading
    assert pci_address(NvDevice(domain=None)) == "0000:1b:03.1"
    for address, vendor in (("0002:1b:19.0", "0x10de\n"), ("0002:1b:03.1", "0x8086\n")):
        (tmp_path / address).mkdir()
        (tmp_path / address / "vendor").write_text(vendor)
    assert pci_address(NvDevice()) == "0002:1b:19.0"  # slot 25 read as device 0x19
    (tmp_path / "0002:1b:03.1" / "vendor").write_text("0x10de\n")
    assert pci_address(NvDevice()) == "0002:1b:03.1"  # both NVIDIA's: the first reading
    assert pci_address(AmdDevice()) == "0000:c1:00.0"
    assert pci_address(CpuDevice()) is None
    broken = NvDevice()
    broken.__class__ = type("Broken", (NvDevice,), {"pci_bus_id_nv": property(
        lambda self: (_ for _ in ()).throw(cl.LogicError("x", cl.status_code.INVALID_VALUE,
                                                         "")))})
    assert pci_address(broken) is None
    # The description carries the device's own: none from a CPU runtime.
    monkeypatch.undo()
    got = describe(cl_device).pci_address
    assert got == pci_address(cl_device)
    if cl_device.type & cl.device_type.CPU:
        assert got is None


def _bound_to(monkeypatch, cpus):
    """Every device bound to ``cpus``; the devices asked about."""
    asked = []

    def cpus_near(device):
        asked.append(device)
        return cpus
    monkeypatch.setattr(numa, "cpus_near", cpus_near)
    return asked


def test_the_rows_stream_writes_from_the_devices_node(cl_device, tmp_path, monkeypatch):
    """Parallel beam into a ``.npy``: every piece is written by a thread on the device's
    node's CPUs, the caller's CPUs are as before once it returns, and the volume is the
    unbound run's bit for bit."""
    n, size, rows = 16, 32, 12
    rng = np.random.default_rng(3)
    projections = rng.uniform(0, 1, (n, rows, size)).astype(np.float32)
    angles = np.linspace(0, np.pi, n, endpoint=False)
    want = pybp.reconstruct(projections, angles, device=cl_device, progress=False, log=False)
    before = allowed()
    node_cpus = frozenset([max(before)])
    asked = _bound_to(monkeypatch, node_cpus)
    writers, real = [], NpyFile.__setitem__

    def recorded(self, key, slices):
        writers.append(allowed())
        real(self, key, slices)
    monkeypatch.setattr(NpyFile, "__setitem__", recorded)
    output = open_output(tmp_path / "v.npy", (rows, size, size))
    try:
        pybp.reconstruct(projections, angles, out=output, device=cl_device, progress=False,
                         log=False)
        output.finish()
    finally:
        output.close()
    assert writers and set(writers) == {node_cpus}
    assert [d.name for d in asked] == [cl_device.name] and allowed() == before
    assert np.array_equal(np.load(tmp_path / "v.npy"), want)


def test_cone_slabs_are_written_behind_from_the_devices_node(cl_device, rng, monkeypatch):
    """Cone beam in slabs into an output that is not an array: the slabs written behind
    are written by threads on the device's node's CPUs, to the one-piece volume's bits,
    and the caller's CPUs are as before."""
    g, projections, limit = _slabs_case(rng)
    one = pybp.fdk(projections, g, params=EXACT, device=cl_device, progress=False)
    before = allowed()
    node_cpus = frozenset([max(before)])
    asked = _bound_to(monkeypatch, node_cpus)
    writers = []

    class Affinity(Recorded):
        def __setitem__(self, key, planes):
            writers.append((threading.current_thread().name, allowed()))
            super().__setitem__(key, planes)
    with pybp.ConeBackprojector(g, EXACT, filter="ramp", memory_limit=limit,
                                device=cl_device) as bp:
        out = Affinity(g.volume_shape)
        bp(projections, out=out)
    assert np.array_equal(out.array, one)
    assert {name.split("_")[0] for name, _ in writers} == {"pybp-write-behind"}
    assert {cpus for _, cpus in writers} == {node_cpus}
    # asked when its staging was reserved and its held slabs made, then for the stream
    assert len(asked) >= 2 and {d.name for d in asked} == {cl_device.name}
    assert allowed() == before
