"""OpenCL devices: finding them, describing them in plain values, probing whether they
build and run kernels (skipping those that do not) and choosing one. The image formats
they really support are pybp/cl/images.py's."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyopencl as cl

from pybp.cl import cache, codegen, implementations, profiles

ENV_DEVICE = "PYBP_DEVICE"
ENV_DEVICES = "PYBP_DEVICES"  # several: "all", or indices "0,1" (default_devices)
PCI_DEVICES = Path("/sys/bus/pci/devices")  # where Linux lists PCI devices (pci_address)
NVIDIA_PCI_VENDOR = "0x10de"

@functools.lru_cache(maxsize=1)
def _register_pip_runtimes():
    """Once, before the ICD loader's first look: the CPU runtime pip installed here."""
    return implementations.register_pip_runtimes(cache.cache_dir() / "icd")


def keep_ctrl_c():
    """Put Python's SIGINT handler back where an OpenCL runtime took it: Intel's CPU
    runtime installs one of its own when its platform loads and again when a context
    is made on it, and Ctrl-C then did nothing at all in Python (the command's own
    handler, made earlier, was gone too). From the main thread only, as Python allows;
    a context made on another thread is followed by a call from the main one."""
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGINT)
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


@contextlib.contextmanager
def _held_ctrl_c():
    """SIGINT held back (in this thread) while an OpenCL runtime may take its handler,
    and Python's put back before it is let through: a Ctrl-C meanwhile comes after,
    to Python, rather than to the runtime's handler, which dropped it."""
    hold = threading.current_thread() is threading.main_thread() and \
        hasattr(signal, "pthread_sigmask")
    if hold:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        keep_ctrl_c()
        if hold:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def new_context(cl_device) -> cl.Context:
    """A context on ``cl_device``, Ctrl-C kept (:func:`_held_ctrl_c`)."""
    with _held_ctrl_c():
        return cl.Context([cl_device])


def all_devices():
    _register_pip_runtimes()
    found = []
    with _held_ctrl_c():
        try:
            platforms = cl.get_platforms()
        except cl.LogicError:  # no ICD at all
            platforms = []
        for platform in platforms:
            try:
                found.extend(platform.get_devices())
            except cl.Error:
                continue
    return found


def device_type_name(device):
    if implementations.identify(device.platform.name).simulator:
        return "simulator"  # Oclgrind sets every type bit, GPU included
    kind = device.type
    if kind & cl.device_type.GPU:
        return "gpu"
    if kind & cl.device_type.ACCELERATOR:
        return "accelerator"
    if kind & cl.device_type.CPU:
        return "cpu"
    return "other"


@dataclass(frozen=True)
class DeviceDescription:
    """What the profiler and runner need to know of a device, as plain values."""

    index: int
    platform: str
    platform_version: str
    vendor: str
    name: str
    version: str
    driver: str
    type: str
    compute_units: int
    clock_mhz: int
    global_memory: int
    max_allocation: int
    local_memory: int
    constant_memory: int
    image_support: bool
    image2d_max_width: int
    image2d_max_height: int
    compute_capability: tuple | None  # NVIDIA (major, minor)
    gfx_target: str | None  # AMD, e.g. "gfx90a"
    extensions: tuple
    max_work_group_size: int = 1024
    implementation: str = "other"  # pybp.cl.implementations
    timers: bool = True  # profiling timestamps match the wall clock (see probe())
    usable: bool = True  # builds and runs a trivial kernel (see probe())
    why_unusable: str = ""
    pci_address: str | None = None  # "0000:1b:00.0", where the runtime says (pci_address())

    @property
    def identity(self) -> str:
        """Exact device and driver, for tuned profiles (pyopencl's cache key idea)."""
        return " | ".join([self.platform, self.platform_version, self.vendor, self.name,
                           self.version, self.driver])

    def summary(self) -> str:
        images = "images" if self.image_support else "no images"
        return (f"[{self.index}] {self.name} ({self.platform}; {self.type}, "
                f"{self.compute_units} compute units, {images})")

    def label(self) -> str:
        """``[index] name (platform version)``, for messages."""
        return f"[{self.index}] {self.name} ({self.platform_version})"


@dataclass(frozen=True)
class Named:
    """A device's name and identity: what its records (pybp.cl.profiles) are filed under."""

    name: str
    identity: str


def named(device: cl.Device) -> Named:
    platform = device.platform
    parts = [platform.name, platform.version, device.vendor, device.name, device.version,
             device.driver_version]
    return Named(device.name.strip(), " | ".join(part.strip() for part in parts))


def describe(device: cl.Device, index: int | None = None) -> DeviceDescription:
    extensions = tuple(device.extensions.split())
    capability = None
    if "cl_nv_device_attribute_query" in extensions:
        try:
            capability = (device.compute_capability_major_nv, device.compute_capability_minor_nv)
        except (cl.Error, AttributeError):
            capability = None
    gfx = None
    if "amd" in device.vendor.lower() or "advanced micro" in device.vendor.lower():
        match = re.search(r"gfx[0-9a-f]+", device.name.lower())
        if match is None and "cl_amd_device_attribute_query" in extensions:
            try:
                match = re.search(r"gfx[0-9a-f]+", device.board_name_amd.lower())
            except (cl.Error, AttributeError):
                match = None
        gfx = match.group(0) if match else None
    if index is None:
        index = next((i for i, d in enumerate(all_devices()) if d.int_ptr == device.int_ptr), -1)
    image_support = bool(device.image_support)
    platform = device.platform.name.strip()
    description = DeviceDescription(
        index=index,
        platform=platform,
        platform_version=device.platform.version.strip(),
        vendor=device.vendor.strip(),
        name=device.name.strip(),
        version=device.version.strip(),
        driver=device.driver_version.strip(),
        type=device_type_name(device),
        compute_units=int(device.max_compute_units),
        clock_mhz=int(device.max_clock_frequency),
        global_memory=int(device.global_mem_size),
        max_allocation=int(device.max_mem_alloc_size),
        local_memory=int(device.local_mem_size),
        constant_memory=int(device.max_constant_buffer_size),
        image_support=image_support,
        image2d_max_width=int(device.image2d_max_width) if image_support else 0,
        image2d_max_height=int(device.image2d_max_height) if image_support else 0,
        compute_capability=capability,
        gfx_target=gfx,
        extensions=extensions,
        max_work_group_size=int(device.max_work_group_size),
        implementation=implementations.identify(platform).name,
        pci_address=pci_address(device),
    )
    verdict = probe(device)
    return dataclasses.replace(description, timers=verdict.timers, usable=verdict.usable,
                               why_unusable=verdict.why)


def pci_address(device: cl.Device) -> str | None:
    """The device's PCI slot as Linux names it under ``/sys/bus/pci/devices``
    (``domain:bus:device.function``), from NVIDIA's or AMD's attribute queries; None
    where the runtime does not say (CPU runtimes, other vendors)."""
    extensions = device.extensions.split()
    try:
        if "cl_nv_device_attribute_query" in extensions:
            slot = int(device.pci_slot_id_nv)
            try:
                domain = int(device.pci_domain_id_nv)
            except (cl.Error, AttributeError):
                domain = 0  # drivers before the domain query: the first domain
            # NVIDIA does not document the slot's encoding: device << 3 | function (as
            # hwloc reads it), or the device number (the H200 machine's driver: 6 for
            # 0000:00:06.0). The NVIDIA device Linux lists at one of them wins.
            head = f"{domain:04x}:{int(device.pci_bus_id_nv):02x}"
            readings = (f"{head}:{slot >> 3:02x}.{slot & 7:x}", f"{head}:{slot:02x}.0")
            return next((a for a in readings if _pci_vendor(a) == NVIDIA_PCI_VENDOR),
                        readings[0])
        if "cl_amd_device_attribute_query" in extensions:
            topology = device.topology_amd
            return (f"0000:{int(topology.bus):02x}:{int(topology.device):02x}."
                    f"{int(topology.function):x}")
    except (cl.Error, AttributeError, TypeError, ValueError):
        return None
    return None


def _pci_vendor(address: str) -> str | None:
    try:
        return (PCI_DEVICES / address / "vendor").read_text().strip().lower()
    except (OSError, UnicodeDecodeError):
        return None


def devices():
    """The OpenCL devices this machine offers, as :class:`DeviceDescription` rows.

    The ``index`` is what ``device=`` and ``PYBP_DEVICE`` accept.
    """
    return [describe(d, i) for i, d in enumerate(all_devices())]


def device_list(devices) -> list:
    """``devices`` as a list of ``pyopencl.Device``: ``"all"`` (every GPU, else every
    device of the fastest kind, of those that build and run kernels; never a simulator;
    of CPU runtimes, the fastest, as they share the host's cores), a list of indices,
    names or devices, or a string of comma-separated indices or names (``"0,1"``). A
    device named twice runs two pipelines (useful to test several pipelines on one
    CPU)."""
    if isinstance(devices, str) and devices.strip().lower() == "all":
        found = [d for d in usable_devices() if device_type_name(d) != "simulator"]
        if not found:
            select_device(None)  # raises the no-device error
        best = min(found, key=speed_rank)
        if device_type_name(best) == "cpu":  # CPU runtimes all share the one host CPU
            return [best]
        return [d for d in found if device_type_name(d) == device_type_name(best)]
    if isinstance(devices, str):
        devices = [d.strip() for d in devices.split(",") if d.strip()]
    if isinstance(devices, cl.Device) or not hasattr(devices, "__iter__"):
        devices = [devices]
    devices = list(devices)
    if not devices:
        raise ValueError("devices: expected 'all' or at least one device, got none")
    chosen = []
    for d in devices:
        try:
            chosen.append(select_device(d))
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"devices: {str(exc).split(': ', 1)[-1]}") from None
    return chosen


def default_devices() -> str:
    """The devices where none are named: the ``PYBP_DEVICES`` variable, else
    ``PYBP_DEVICE``, else ``"all"`` (a worker's, and ``pybp reconstruct --scheduler
    local``'s: a volume resumed on another CPU runtime would differ in its last bits)."""
    return os.environ.get(ENV_DEVICES) or os.environ.get(ENV_DEVICE) or "all"


# ---- probing: does a device build and run a kernel, and do its timers tell the truth --
PROBE_VERSION = 2  # 2: the CPU speed
PROBE_ITEMS = 1024
PROBE_WALL = 0.02  # seconds a timed probe launch should last for its timers to be judged


@dataclass(frozen=True)
class Probe:
    """Whether a device builds and runs pybp's simplest kernel (``why`` if not), and
    whether its profiling timestamps agree with the wall clock (rusticl's say about
    1 ns per kernel: then pybp times by the wall clock); ``speed``: GU/s of pybp's own
    back-projection on a small case, where it was timed (:func:`record_speed`; 0: not
    timed), which chooses among CPU runtimes."""

    usable: bool
    why: str = ""
    timers: bool = True
    speed: float = 0.0
    fresh: bool = dataclasses.field(default=False, compare=False)  # made here, not read


def _count_reference(n: int) -> np.ndarray:
    value = np.arange(PROBE_ITEMS, dtype=np.float32)
    for _ in range(min(n, 64)):  # converged to 2.0 long before
        value = value * np.float32(0.5) + np.float32(1.0)
    return value


def _run_probe(cl_device) -> Probe:
    try:
        context = new_context(cl_device)
        try:
            program = codegen.compiled(context, codegen.render("device_probe.cl.mako"))
        except cl.Error as exc:
            return Probe(False, f"cannot build kernels ({codegen.first_error(exc)})")
        queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        count = cl.Kernel(program, "count")
        out = np.zeros(PROBE_ITEMS, np.float32)
        buffer = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, out.nbytes)
        n = 16
        while True:  # lengthen the launch until the wall clock can judge its timer
            start = time.perf_counter()
            event = count(queue, (PROBE_ITEMS,), None, buffer, np.int32(n))
            cl.enqueue_copy(queue, out, buffer)  # blocking, after the kernel
            wall = time.perf_counter() - start
            if not np.array_equal(out, _count_reference(n)):
                return Probe(False, "gives wrong results for a trivial kernel")
            if wall >= PROBE_WALL or n >= 1 << 24:
                break
            n *= 4
        seconds = (event.profile.end - event.profile.start) * 1e-9
        return Probe(True, timers=bool(seconds >= 0.1 * wall))
    except cl.Error as exc:
        return Probe(False, f"cannot run kernels ({codegen.first_error(exc)})")


_PROBES = {}  # device pointer -> Probe: once per process; on disk once per device and driver


def probe(cl_device) -> Probe:
    """Build and run a trivial kernel on ``cl_device`` once per device and driver (the
    verdict is kept with the device's records, ``pybp.cl.profiles``)."""
    if cl_device.int_ptr in _PROBES:
        return _PROBES[cl_device.int_ptr]
    identity = named(cl_device)
    record = profiles.read_record(identity, "probe").get("probe")
    if record and record.get("version") == PROBE_VERSION:
        found = Probe(record["usable"], record["why"], record["timers"], record.get("speed", 0.0))
    else:
        found = dataclasses.replace(_run_probe(cl_device), fresh=True)
        try:
            if not found.usable and not found.why.startswith("cannot build"):
                raise OSError  # may pass another time: not kept
            profiles.update_record(identity, "probe", {"probe": dict(
                version=PROBE_VERSION, usable=found.usable, why=found.why, timers=found.timers)})
        except OSError:
            pass  # an unwritable cache: probe again next time
    _PROBES[cl_device.int_ptr] = found
    return found


def record_speed(cl_device, speed: float):
    """Keep ``speed`` (GU/s of pybp's back-projection, timed by
    :mod:`pybp.parallel.speed`) with the device's probe: it ranks CPU runtimes from then
    on (:func:`speed_rank`)."""
    verdict = dataclasses.replace(probe(cl_device), speed=float(speed))
    _PROBES[cl_device.int_ptr] = verdict
    identity = named(cl_device)
    try:
        profiles.update_record(identity, "probe", {"probe": dict(
            version=PROBE_VERSION, usable=verdict.usable, why=verdict.why,
            timers=verdict.timers, speed=verdict.speed)})
    except OSError:
        pass  # an unwritable cache: timed again next time


def _label(device, found) -> str:
    index = next((i for i, d in enumerate(found) if d.int_ptr == device.int_ptr), -1)
    return f"[{index}] {device.name.strip()} ({device.platform.version.strip()})"


# ---- choosing -------------------------------------------------------------------------
def speed_rank(device):
    # A GPU before an accelerator before a CPU, a simulator last; CPU runtimes by the
    # speed of pybp's back-projection timed on each here (record_speed), where it was;
    # then the implementation's rank (pybp.cl.implementations); then the larger chip.
    order = {"gpu": 0, "accelerator": 1, "cpu": 2, "other": 3, "simulator": 4}
    kind = device_type_name(device)
    return (order[kind], -probe(device).speed if kind == "cpu" else 0.0,
            implementations.identify(device.platform.name).rank,
            -device.max_compute_units * device.max_clock_frequency)


NO_DEVICE_REMEDY = ('install a GPU driver with OpenCL, or the CPU runtimes (pybp\'s cpu '
                    'extra): `pip install pocl-binary-distribution intel-opencl-rt`')


def usable_devices(found=None, warn=True) -> list:
    """The devices that build and run kernels (:func:`probe`); each one skipped gets one
    warning naming it and why, once: in the process that found it out (a verdict read
    from the device's record is not told again; `pybp devices` lists it)."""
    found = all_devices() if found is None else found
    usable = []
    for device in found:
        verdict = probe(device)
        if verdict.usable:
            usable.append(device)
        elif warn and verdict.fresh and device.int_ptr not in _WARNED:
            _WARNED.add(device.int_ptr)
            warnings.warn(f"pybp: skipping {_label(device, found)}: {verdict.why}",
                          RuntimeWarning, stacklevel=3)
    return usable


_WARNED = set()  # devices whose skipping was told


def _no_usable_device(found) -> RuntimeError:
    reasons = "; ".join(f"{_label(d, found)} {probe(d).why}" for d in found)
    return RuntimeError(f"no usable OpenCL device: {reasons}. Remedy: {NO_DEVICE_REMEDY}, or "
                        f"choose another device with {ENV_DEVICE} (see `pybp devices`)")


def _checked(device, source, found):
    verdict = probe(device)
    if not verdict.usable:
        others = [_label(d, found) for d in usable_devices(found, warn=False)]
        if others:  # installing what is installed would not help: another device works
            raise RuntimeError(f"{source}: {_label(device, found)} {verdict.why}; choose "
                               f"another device: {', '.join(others)} (see `pybp devices`)")
        raise RuntimeError(f"{source}: {_label(device, found)} {verdict.why}; choose another "
                           f"device (see `pybp devices`) or: {NO_DEVICE_REMEDY}")
    return device


def select_device(device=None) -> cl.Device:
    """Pick a device: a ``pyopencl.Device``, an index, or a piece of its name, its
    platform's name or its platform's version (``"PoCL 3.1"``).

    Without one, ``PYBP_DEVICE`` decides, else the fastest device that builds and runs
    kernels (a GPU first; a simulator never). A chosen device that cannot raises
    ``RuntimeError`` naming it and why.
    """
    if isinstance(device, cl.Device):
        return _checked(device, "device", all_devices())
    found = all_devices()
    if not found:
        raise RuntimeError(f"no OpenCL device found: {NO_DEVICE_REMEDY}")
    source = "device"
    if device is None:
        device = os.environ.get(ENV_DEVICE) or None
        source = ENV_DEVICE
    if device is None:
        usable = [d for d in usable_devices(found)
                  if device_type_name(d) != "simulator"]
        if not usable:
            raise _no_usable_device(found)
        return min(usable, key=speed_rank)
    if isinstance(device, (bool, np.bool_)):
        raise TypeError(f"{source}: expected an index or a name, got {device!r}")
    names = "; ".join(f"[{i}] {d.name}" for i, d in enumerate(found))
    if isinstance(device, (int, np.integer)) or (isinstance(device, str) and device.strip().isdigit()):
        index = int(device)
        if not 0 <= index < len(found):
            raise ValueError(f"{source}: no device has index {index}; available: {names}")
        return _checked(found[index], source, found)
    if isinstance(device, str):
        needle = device.strip().lower()
        matches = [d for d in found if needle in d.name.lower()
                   or needle in d.platform.name.lower() or needle in d.platform.version.lower()]
        if not matches:
            raise ValueError(f"{source}: no device matches {device!r}; available: {names}")
        usable = [d for d in matches if probe(d).usable]
        return _checked(min(usable or matches, key=speed_rank), source, found)
    raise TypeError(f"{source}: expected a pyopencl.Device, an index or a name, got {type(device).__name__}")


_CONTEXTS = {}  # one context per device for the calls that give none: programs are kept
_CONTEXTS_LOCK = threading.Lock()


def open_device(device=None, context=None, queue=None):
    """``(cl_device, context, queue or None)`` from what the caller gave: a queue, a
    context, or a device choice (see :func:`select_device`; its context is
    made once per process, so that built programs are reused)."""
    if queue is not None:
        return queue.device, queue.context, queue
    if context is not None:
        return context.devices[0], context, None
    cl_device = select_device(device)
    with _CONTEXTS_LOCK:
        key = cl_device.int_ptr
        if key not in _CONTEXTS:
            _CONTEXTS[key] = new_context(cl_device)
        return cl_device, _CONTEXTS[key], None
