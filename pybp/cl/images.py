"""The 2-D image formats a context can truly allocate and sample (some runtimes list
formats they cannot), probed once per device and driver: the texture kernels' storage
(pybp/parallel/profiler.py) picks among them."""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from pybp.cl import codegen, profiles
from pybp.cl.device import named

# Channel orders for 1, 2 and 4 texel channels, and channel types per storage.
CHANNEL_ORDERS = {1: cl.channel_order.R, 2: cl.channel_order.RG, 4: cl.channel_order.RGBA}
CHANNEL_TYPES = {"float": cl.channel_type.FLOAT, "half": cl.channel_type.HALF_FLOAT}


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
        sampled = np.empty((4, 8, channels), np.float32)
        out = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, sampled.nbytes)
        program = codegen.compiled(context, codegen.render("image_probe.cl.mako", channels=channels))
        with cl.CommandQueue(context) as queue:
            program.sample(queue, (8, 4), None, image, out)
            cl.enqueue_copy(queue, sampled, out)
        return bool(np.array_equal(sampled, data.astype(np.float32)))
    except (cl.Error, ValueError, TypeError, RuntimeError):
        return False


_FORMATS = {}  # device -> usable formats: once per process; on disk once per device and driver
FORMATS_VERSION = 1


def usable_image_formats(context) -> frozenset:
    """``(channels, storage)`` pairs of 2-D images this context can allocate and read,
    probed once per device and driver (kept with the device's probe record: the four
    probes cost a small reconstruction on PoCL 15 ms of its 0.35 s)."""
    device = context.devices[0]
    if device.int_ptr in _FORMATS:
        return _FORMATS[device.int_ptr]
    if not device.image_support:
        return frozenset()
    identity = named(device)
    record = profiles.read_record(identity, "probe").get("formats")
    if record and record.get("version") == FORMATS_VERSION:
        usable = {(channels, storage) for channels, storage in record["usable"]}
    else:
        listed = {(f.channel_order, f.channel_data_type) for f in
                  cl.get_supported_image_formats(context, cl.mem_flags.READ_ONLY,
                                                 cl.mem_object_type.IMAGE2D)}
        usable = {(channels, storage) for channels, order in CHANNEL_ORDERS.items()
                  for storage, ctype in CHANNEL_TYPES.items()
                  if (order, ctype) in listed and _format_usable(context, channels, storage)}
        try:
            profiles.update_record(identity, "probe", {"formats": dict(
                version=FORMATS_VERSION, usable=sorted(usable))})
        except OSError:
            pass  # an unwritable cache: probe again next time
    _FORMATS[device.int_ptr] = frozenset(usable)
    return _FORMATS[device.int_ptr]
