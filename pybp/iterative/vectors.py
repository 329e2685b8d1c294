"""The vector steps of the iterative methods on one device (templates/iterative/
vectors.cl.mako), on pyopencl arrays of float32."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla

from pybp.cl import codegen
from pybp.cl.kernel import Arg, global_size

FIRST = Arg("first", "const ulong", "the first element taken")
N = Arg("n", "const ulong", "the element after the last taken")
COUNT = Arg("n", "const ulong", "the elements taken, from first")
PROBLEMS = (Arg("block", "const ulong", "the elements of a problem's runs"),
            Arg("problems", "const int", "independent problems (slices) the elements hold"))
DOT_GROUP = 256  # work-items of a dot product's group
DOT_GROUPS = 256  # the most partial sums of one problem, read back and added in float64
DOT_ITEM_FLOATS = 64  # elements a work-item adds, where a problem is small
ITEMS = 256  # work-group size of the elementwise steps

ARGS = {
    "combine": (Arg("out", "__global float *"), Arg("a", "const float"),
                Arg("x", "__global const float *"), Arg("b", "const float"),
                Arg("y", "__global const float *"), FIRST, N),
    "fill": (Arg("out", "__global float *"), Arg("value", "const float"), FIRST, N),
    "invert_sums": (Arg("sums", "__global const float *"), Arg("weights", "__global float *"),
                    FIRST, N),
    "weighted_residual": (Arg("b", "__global const float *", "the data"),
                 Arg("r", "__global float *", "A x in, the weighted residual out"),
                 Arg("w", "__global const float *", "the inverse row sums"), FIRST, N),
    "sirt_step": (Arg("x", "__global float *"), Arg("d", "__global const float *"),
             Arg("w", "__global const float *", "the inverse column sums, masked"),
             Arg("relaxation", "const float"), Arg("nonnegative", "const int"), FIRST, N),
    "scale": (Arg("x", "__global float *"), Arg("w", "__global const float *"), FIRST, N),
    "combine_each": (Arg("out", "__global float *"),
                     Arg("a", "__global const float *", "one per problem"),
                     Arg("x", "__global const float *"),
                     Arg("b", "__global const float *", "one per problem"),
                     Arg("y", "__global const float *"), FIRST, N, *PROBLEMS),
    "problem_dots": (Arg("x", "__global const float *"), Arg("y", "__global const float *"),
                     Arg("sums", "__global float *", "one per work-group: problems x parts"),
                     FIRST, COUNT, *PROBLEMS),
    "problem_peaks": (Arg("x", "__global const float *"),
                      Arg("sums", "__global float *", "one per work-group: problems x parts"),
                      FIRST, COUNT, *PROBLEMS),
}


class Vectors:
    """The steps, built once for ``queue``'s device; each call enqueues one kernel and
    returns its event, except :meth:`dots`, which returns the float64 sum. Each step
    takes the elements ``span`` ``(first, stop)`` of its arrays, all of them by default
    (a device's share of vectors split over several: pybp/iterative/team.py)."""

    def __init__(self, context, queue, device):
        self.queue = queue
        text = codegen.render("iterative/vectors.cl.mako", ARGS, group=DOT_GROUP)
        self._kernels = {name: codegen.declared(context, device, text, name, args)
                         for name, args in ARGS.items()}

    def _run(self, name, written, span, **values):
        first, stop = (0, written.size) if span is None else span
        return self._kernels[name](self.queue, global_size((stop - first,), (ITEMS,)), (ITEMS,),
                                   first=first, n=stop, **values)

    def combine(self, out, a, x, b, y, span=None):
        """out = a x + b y"""
        return self._run("combine", out, span, out=out.data, a=a, x=x.data, b=b, y=y.data)

    def fill(self, out, value, span=None):
        """out = value, on the device"""
        return self._run("fill", out, span, out=out.data, value=value)

    def invert(self, sums, weights, span=None):
        """weights = 1 / sums where sums > 0, else 0"""
        return self._run("invert_sums", sums, span, sums=sums.data, weights=weights.data)

    def residual(self, b, r, w, span=None):
        """r = (b - r) w"""
        return self._run("weighted_residual", r, span, b=b.data, r=r.data, w=w.data)

    def step(self, x, d, w, relaxation, nonnegative, span=None):
        """x = x + relaxation w d, clipped at 0 where ``nonnegative``"""
        return self._run("sirt_step", x, span, x=x.data, d=d.data, w=w.data,
                         relaxation=relaxation, nonnegative=int(nonnegative))

    def scale(self, x, w, span=None):
        """x = x w"""
        return self._run("scale", x, span, x=x.data, w=w.data)

    def combine_each(self, out, a, x, b, y, block, problems, span=None):
        """out = a[s] x + b[s] y, ``a`` and ``b`` a number for each of ``problems``
        problems (float64, sent as float32), s the problem of each element (runs of
        ``block`` elements of each in turn: :meth:`dots`)"""
        a, b = (cla.to_device(self.queue, np.asarray(v, np.float32)) for v in (a, b))
        return self._run("combine_each", out, span, out=out.data, a=a.data, x=x.data,
                         b=b.data, y=y.data, block=block, problems=problems)

    def dots(self, x, y=None, block=None, problems=1, span=None) -> np.ndarray:
        """x . y (x . x without ``y``) for each of ``problems`` independent problems
        whose elements come in runs of ``block`` (default: one problem, the whole
        vector or ``span``), float64: partial sums on the device in a fixed order that
        depends on a problem's size alone, added in float64 here; the same bits every
        run and however many problems share the vectors."""
        y = x if y is None else y
        return self._per_problem("problem_dots", x, block, problems, span,
                                 y=y.data).sum(axis=1)

    def peaks(self, x, block=None, problems=1, span=None) -> np.ndarray:
        """The largest |x| of each of ``problems`` (as :meth:`dots` counts them), float64."""
        return self._per_problem("problem_peaks", x, block, problems, span).max(axis=1)

    def _per_problem(self, name, x, block, problems, span, **values) -> np.ndarray:
        """Kernel ``name``'s partial results, ``(problems, parts)`` float64."""
        first, stop = (0, x.size) if span is None else span
        count = stop - first
        block = count if block is None else block
        size = count // problems
        parts = max(1, min(DOT_GROUPS, size // (DOT_GROUP * DOT_ITEM_FLOATS)))
        sums = cla.empty(self.queue, problems * parts, np.float32)
        self._kernels[name](self.queue, (DOT_GROUP * parts, problems), (DOT_GROUP, 1),
                            x=x.data, sums=sums.data, first=first, n=count, block=block,
                            problems=problems, **values)
        return sums.get(queue=self.queue).astype(np.float64).reshape(problems, parts)
