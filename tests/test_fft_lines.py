"""The local-memory FFT of templates/stages/fft_lines.cl.mako, alone: lines of radix-2
and of mixed radix (2, 3, 5) lengths, forward and inverse, against NumPy's float64 FFT
(float32 rounding: ``FFT_RTOL`` of relative RMS)."""

import numpy as np
import pyopencl as cl
import pytest

from mako.lookup import TemplateLookup
from mako.template import Template

from pybp.cl import codegen
from pybp.cl.kernel import Arg, signature

FFT_RTOL = 1e-6
KERNELS = {"lines": (Arg("data", "__global float2 *", "lines x length, in place"),
                     Arg("table", "__global const float2 *", "exp(-2 pi i m / table_length)"),
                     Arg("sign", "const float", "-1 forward, +1 inverse"))}
SOURCE = """<%namespace name="fft" file="stages/fft_lines.cl.mako"/>
${fft.complex_helpers()}
${fft.local_fft("fft", length, lines, items, table_length)}
__kernel void lines(
${args['lines']}
{
    __local float2 x[${lines * length}], y[${lines * length}];
    __global float2 *line = data + get_group_id(0) * ${lines * length};
    for (int e = get_local_id(0); e < ${lines * length}; e += ${items})
        x[e] = line[e];
    barrier(CLK_LOCAL_MEM_FENCE);
    fft(x, y, table, sign);
    for (int e = get_local_id(0); e < ${lines * length}; e += ${items})
        line[e] = ${fft.result_buffer(length, "x", "y")}[e];
}
"""


@pytest.mark.parametrize("length, lines, stretch", [(64, 2, 1), (12, 3, 2), (72, 2, 32),
                                                    (288, 1, 1), (360, 2, 8), (1250, 1, 2),
                                                    (2, 4, 1)])
def test_local_fft_of_any_smooth_length(cl_device, length, lines, stretch):
    """``stretch``: the table is of ``length * stretch`` points (a four-step's)."""
    context = cl.Context([cl_device])
    queue = cl.CommandQueue(context)
    items = 64
    table_length = length * stretch
    lookup = TemplateLookup(directories=[str(codegen.templates_dir())])
    code = Template(SOURCE, lookup=lookup).render(
        args={"lines": signature(KERNELS["lines"])}, length=length, lines=lines, items=items,
        table_length=table_length)
    kernel = cl.Program(context, code).build().lines
    rng = np.random.default_rng(length)
    data = (rng.normal(size=(3 * lines, length)) + 1j * rng.normal(size=(3 * lines, length)))
    table = np.exp(-2j * np.pi * np.arange(table_length // 2) / table_length).astype(np.complex64)
    flags = cl.mem_flags
    table_buffer = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=table)
    for sign, want in ((-1, np.fft.fft(data)), (1, np.fft.ifft(data) * length)):
        buffer = cl.Buffer(context, flags.READ_WRITE | flags.COPY_HOST_PTR,
                           hostbuf=data.astype(np.complex64))
        kernel(queue, (3 * items,), (items,), buffer, table_buffer, np.float32(sign))
        got = np.empty(data.shape, np.complex64)
        cl.enqueue_copy(queue, got, buffer)
        error = np.sqrt(np.mean(np.abs(got - want) ** 2) / np.mean(np.abs(want) ** 2))
        assert error < FFT_RTOL, (sign, error)
