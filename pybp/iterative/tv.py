"""The kernels of total variation (templates/iterative/tv.cl.mako) on one device: the
gradient, its transpose, and the steps of Chambolle and Pock's primal-dual iteration."""

from __future__ import annotations

from pybp.cl import codegen
from pybp.cl.kernel import Arg, global_size, ints

GRID = (*ints("nx", "ny", "nz"), Arg("dims", "const int", "2: within planes; 3: along z too"),
        Arg("first_plane", "const int", "the first plane taken"))
COUNT = (Arg("first", "const ulong", "the first value taken"),
         Arg("count", "const ulong", "the value after the last taken"))
ARGS = {
    "tv_gradient": (Arg("x", "__global const float *"), Arg("q", "__global float *"), *GRID),
    "tv_transpose": (Arg("q", "__global const float *"), Arg("out", "__global float *"), *GRID),
    "tv_dual": (Arg("q", "__global float *"), Arg("xbar", "__global const float *"),
                Arg("sigma", "const float"), Arg("weight", "const float"), *GRID),
    "data_dual": (Arg("p", "__global float *"), Arg("ax", "__global const float *"),
                  Arg("b", "__global const float *"), Arg("sigma", "const float"), *COUNT),
    "tv_primal": (Arg("x", "__global float *"), Arg("xbar", "__global float *"),
                  Arg("atp", "__global const float *"), Arg("gtq", "__global const float *"),
                  Arg("tau", "const float"), Arg("tau_gradient", "const float"),
                  Arg("nonnegative", "const int"), *COUNT),
}
GROUP = (16, 8, 1)
ITEMS = 256


class Variation:
    """The kernels, built once, for volumes of ``shape`` ``(nz, ny, nx)`` with the
    gradient along ``dims`` axes; each call enqueues one kernel and returns its event.
    Each takes the planes ``planes`` ``(first, stop)`` of its volumes (the elements
    ``span`` of its flat arrays), all of them by default (a device's share of volumes
    split over several: pybp/iterative/team.py)."""

    def __init__(self, context, queue, device, shape, dims):
        self.queue, self.dims, self.shape = queue, dims, tuple(shape)
        nz, ny, nx = shape
        self.grid = dict(nx=nx, ny=ny, nz=nz, dims=dims)
        text = codegen.render("iterative/tv.cl.mako", ARGS)
        self._kernels = {name: codegen.declared(context, device, text, name, args)
                         for name, args in ARGS.items()}

    def _volume(self, name, planes, **values):
        nz, ny, nx = self.shape
        first, stop = (0, nz) if planes is None else planes
        return self._kernels[name](self.queue, global_size((nx, ny, stop - first), GROUP), GROUP,
                                   first_plane=first, **values, **self.grid)

    def _flat(self, name, out, span, **values):
        first, stop = (0, out.size) if span is None else span
        return self._kernels[name](self.queue, global_size((stop - first,), (ITEMS,)), (ITEMS,),
                                   first=first, count=stop, **values)

    def gradient(self, x, q, planes=None):
        return self._volume("tv_gradient", planes, x=x.data, q=q.data)

    def transpose(self, q, out, planes=None):
        return self._volume("tv_transpose", planes, q=q.data, out=out.data)

    def dual(self, q, xbar, sigma, weight, planes=None):
        return self._volume("tv_dual", planes, q=q.data, xbar=xbar.data, sigma=sigma,
                            weight=weight)

    def data_dual(self, p, ax, b, sigma, span=None):
        return self._flat("data_dual", p, span, p=p.data, ax=ax.data, b=b.data, sigma=sigma)

    def primal(self, x, xbar, atp, gtq, tau, tau_gradient, nonnegative, span=None):
        return self._flat("tv_primal", x, span, x=x.data, xbar=xbar.data, atp=atp.data,
                          gtq=gtq.data, tau=tau, tau_gradient=tau_gradient,
                          nonnegative=int(nonnegative))
