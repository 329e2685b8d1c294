"""Kernels whose arguments are declared once.

A kernel's arguments are a tuple of :class:`Arg`. The same tuple renders the
parameter list in the template (:func:`signature`, passed to it as ``args``) and binds
the launch (:class:`Kernel`, called with keywords), as pyopencl's elementwise kernels
and reikna's ``kernel_call`` do: the list the device compiles and the list the host
passes cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

# Host types of the scalar arguments; any other argument is a buffer or an image.
SCALARS = {"const int": np.int32, "const uint": np.uint32, "const long": np.int64,
           "const ulong": np.uint64,
           "const float": np.float32, "const double": np.float64}


@dataclass(frozen=True)
class Arg:
    """One kernel argument: ``type`` as OpenCL writes it (``"const int"``,
    ``"__global float *"``), ``name``, and a note for the rendered source."""

    name: str
    type: str
    note: str = ""

    def bind(self, value):
        """``value`` as the kernel takes it: scalars cast to their OpenCL width."""
        scalar = SCALARS.get(self.type)
        return value if scalar is None else scalar(value)


def ints(*names) -> tuple:
    """``const int`` arguments without notes (sizes, counts), in the order given."""
    return tuple(Arg(name, "const int") for name in names)


def global_size(sizes, group) -> tuple:
    """Each of ``sizes`` rounded up to a multiple of the work-group's ``group``."""
    return tuple(-(-size // items) * items for size, items in zip(sizes, group))


def signature(args) -> str:
    """The parameter list of ``args``, one per line with its note, closed by ``)``."""
    lines = []
    for i, arg in enumerate(args):
        text = f"    {arg.type}{'' if arg.type.endswith('*') else ' '}{arg.name}"
        text += ")" if i == len(args) - 1 else ","
        lines.append(f"{text:<40}/* {arg.note} */" if arg.note else text)
    return "\n".join(lines)


class Kernel:
    """A built kernel and its declared arguments: ``kernel(queue, global_size,
    local_size, name=value, ...)`` passes every argument by name, in declared order."""

    def __init__(self, kernel, args):
        self.kernel, self.args = kernel, tuple(args)
        self._names = {arg.name for arg in self.args}
        self._index = {arg.name: (i, arg) for i, arg in enumerate(self.args)}

    def __call__(self, queue, global_size, local_size, wait_for=None, global_offset=None,
                 **values):
        if values.keys() != self._names:
            missing = sorted(self._names - values.keys())
            unknown = sorted(values.keys() - self._names)
            raise TypeError(f"kernel {self.kernel.function_name}: missing {missing}, "
                            f"unknown {unknown}")
        return self.kernel(queue, global_size, local_size,
                           *(arg.bind(values[arg.name]) for arg in self.args),
                           global_offset=global_offset, wait_for=wait_for)

    def again(self, queue, global_size, local_size, global_offset=None, **changed):
        """Launch again with only the ``changed`` arguments set anew: the others are
        those of the kernel's last call, which the caller knows (the same thread, the
        same buffers). pyopencl sets an argument in about 7 us on NVIDIA's H200: a full
        call of cone beam's 13 took 104 us, one that set 3 of them anew 40 us."""
        for name, value in changed.items():
            index, arg = self._index[name]
            self.kernel.set_arg(index, arg.bind(value))
        return cl.enqueue_nd_range_kernel(queue, self.kernel, global_size, local_size,
                                          global_offset)
