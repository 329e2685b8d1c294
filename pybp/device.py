"""OpenCL device selection, a plain description of a device, and its usable image formats."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

ENV_DEVICE = "PYBP_DEVICE"

# Channel orders for 1, 2 and 4 texel channels, and channel types per storage.
CHANNEL_ORDERS = {1: cl.channel_order.R, 2: cl.channel_order.RG, 4: cl.channel_order.RGBA}
CHANNEL_TYPES = {"float": cl.channel_type.FLOAT, "half": cl.channel_type.HALF_FLOAT}


def _all_devices():
    found = []
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


def _device_type_name(device):
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

    @property
    def identity(self) -> str:
        """Exact device and driver, for tuned profiles (pyopencl's cache key idea)."""
        return " | ".join([self.platform, self.platform_version, self.vendor, self.name,
                           self.version, self.driver])

    def summary(self) -> str:
        images = "images" if self.image_support else "no images"
        return (f"[{self.index}] {self.name} ({self.platform}; {self.type}, "
                f"{self.compute_units} compute units, {images})")


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
        index = next((i for i, d in enumerate(_all_devices()) if d.int_ptr == device.int_ptr), -1)
    image_support = bool(device.image_support)
    return DeviceDescription(
        index=index,
        platform=device.platform.name.strip(),
        platform_version=device.platform.version.strip(),
        vendor=device.vendor.strip(),
        name=device.name.strip(),
        version=device.version.strip(),
        driver=device.driver_version.strip(),
        type=_device_type_name(device),
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
    )


def devices():
    """The OpenCL devices this machine offers, as :class:`DeviceDescription` rows.

    The ``index`` is what ``device=`` and ``PYBP_DEVICE`` accept.
    """
    return [describe(d, i) for i, d in enumerate(_all_devices())]


def _speed_rank(device):
    # A GPU before an accelerator before a CPU; then the larger, faster chip.
    order = {"gpu": 0, "accelerator": 1, "cpu": 2, "other": 3}[_device_type_name(device)]
    return (order, -device.max_compute_units * device.max_clock_frequency)


def select_device(device=None) -> cl.Device:
    """Pick a device: a ``pyopencl.Device``, an index, or a substring of its name.

    Without one, ``PYBP_DEVICE`` decides, else the fastest device (a GPU first).
    """
    if isinstance(device, cl.Device):
        return device
    found = _all_devices()
    if not found:
        raise RuntimeError(
            "no OpenCL device found: install a GPU driver with OpenCL, or the CPU runtime "
            'with `pip install "pybp-opencl[pocl]"`'
        )
    source = "device"
    if device is None:
        device = os.environ.get(ENV_DEVICE) or None
        source = ENV_DEVICE
    if device is None:
        return min(found, key=_speed_rank)
    if isinstance(device, (bool, np.bool_)):
        raise TypeError(f"{source}: expected an index or a name, got {device!r}")
    if isinstance(device, (int, np.integer)) or (isinstance(device, str) and device.strip().isdigit()):
        index = int(device)
        names = "; ".join(f"[{i}] {d.name}" for i, d in enumerate(found))
        if not 0 <= index < len(found):
            raise ValueError(f"{source}: no device has index {index}; available: {names}")
        return found[index]
    if isinstance(device, str):
        needle = device.strip().lower()
        matches = [d for d in found
                   if needle in d.name.lower() or needle in d.platform.name.lower()]
        if not matches:
            names = "; ".join(f"[{i}] {d.name}" for i, d in enumerate(found))
            raise ValueError(f"{source}: no device matches {device!r}; available: {names}")
        return min(matches, key=_speed_rank)
    raise TypeError(f"{source}: expected a pyopencl.Device, an index or a name, got {type(device).__name__}")


_PROBE_SOURCE = """
__constant sampler_t nearest = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;
__kernel void sample(__read_only image2d_t image, __global float4 *out)
{
    const int x = get_global_id(0), y = get_global_id(1);
    out[y * get_global_size(0) + x] = read_imagef(image, nearest, (float2)(x + 0.5f, y + 0.5f));
}
"""


def _format_usable(context, channels, storage):
    """Whether an image of this format can be made and sampled by a kernel.

    Some runtimes list formats they cannot allocate (silx issue 3243), and PoCL 3.0
    copies single-channel half images faithfully but samples garbage from them; so
    make one and read it back through a kernel.
    """
    fmt = cl.ImageFormat(CHANNEL_ORDERS[channels], CHANNEL_TYPES[storage])
    dtype = np.float16 if storage == "half" else np.float32
    data = (np.arange(8 * 4 * channels) - 7.25).astype(dtype).reshape(4, 8, channels)
    try:
        image = cl.create_image(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, fmt,
                         shape=(8, 4), hostbuf=data)
        sampled = np.empty((4, 8, 4), np.float32)
        out = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, sampled.nbytes)
        program = cl.Program(context, _PROBE_SOURCE).build()
        with cl.CommandQueue(context) as queue:
            program.sample(queue, (8, 4), None, image, out)
            cl.enqueue_copy(queue, sampled, out)
        return bool(np.array_equal(sampled[..., :channels], data.astype(np.float32)))
    except (cl.Error, ValueError, TypeError, RuntimeError):
        return False


_FORMATS = {}  # device -> usable formats; a cache, since probing builds a program


def usable_image_formats(context) -> frozenset:
    """``(channels, storage)`` pairs of 2-D images this context can allocate and read."""
    device = context.devices[0]
    if device.int_ptr in _FORMATS:
        return _FORMATS[device.int_ptr]
    if not device.image_support:
        return frozenset()
    listed = {(f.channel_order, f.channel_data_type) for f in
              cl.get_supported_image_formats(context, cl.mem_flags.READ_ONLY,
                                             cl.mem_object_type.IMAGE2D)}
    usable = set()
    for channels, order in CHANNEL_ORDERS.items():
        for storage, ctype in CHANNEL_TYPES.items():
            if (order, ctype) in listed and _format_usable(context, channels, storage):
                usable.add((channels, storage))
    _FORMATS[device.int_ptr] = frozenset(usable)
    return _FORMATS[device.int_ptr]
