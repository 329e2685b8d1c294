"""The reconstruction methods in one table: each method's name, ASTRA's name for it,
its options with their defaults, the device arrays it holds at its peak, its function
(one call of one shape for every method: :class:`pybp.iterative.methods.Problem`),
the pair's applications it takes before its iterations, and what it checks against a
scan's angles. The API (``pybp.sirt`` and the others, ``pybp.reconstruct(method=)``),
the stream's stage (pybp/parallel/iterate.py) and the command (``--method``) read it;
nothing else lists the methods, and none of them knows one method from another.

A method's working set is what its function in pybp/iterative/methods.py allocates
and holds at once, at its peak (temporaries freed as they go, as the allocator's
arrays are): volumes, sets of projections, and volumes per dimension of the volume
(TV's dual of the gradient). What its callers add is theirs: the API holds the start,
the mask and the data beside it (:func:`held`); the stream's chunk its data in the
pair's layout (its start is the chunk's slices). tests/test_iterative.py measures the
peak of every method through both against this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pybp.iterative import methods


@dataclass(frozen=True)
class Method:
    """A method: ``options`` (name -> default; None: no default, the caller gives
    it), ``volumes`` and ``projections`` (float32 arrays of each shape it holds at its
    peak), ``gradients`` (volumes per dimension among them), ``astra`` (ASTRA's name,
    for the docs and errors), ``summary`` (the command's help); ``solve(problem, x,
    **options)``, the method (None: FBP, which is no iteration); ``steps_before``,
    steps as long as an iteration before the first (TV's estimate of ||A||);
    ``angles(n_angles, options)``, what it checks of a scan's angles (None: nothing)."""

    name: str
    summary: str
    options: dict = field(default_factory=dict)
    volumes: int = 0
    projections: int = 0
    gradients: int = 0
    astra: str = ""
    solve: Callable | None = None
    steps_before: int = 0
    angles: Callable | None = None

    @property
    def iterative(self) -> bool:
        return self.solve is not None

    def check_angles(self, n_angles: int, options: dict):
        """``ValueError`` where ``options`` do not fit a scan of ``n_angles`` angles."""
        if self.angles is not None:
            self.angles(n_angles, options)

    def working_set(self, dims: int) -> tuple:
        """``(volumes, sets of projections)`` the method holds at its peak, for a
        volume of ``dims`` dimensions (2: parallel beam's slices, each its own
        problem; 3: a whole volume)."""
        return self.volumes + self.gradients * dims, self.projections


TABLE = {
    "fbp": Method("fbp", "filtered back-projection (FDK with --geometry)",
                  dict(filter="ramp", padding="zero", interpolation="linear", precision="float",
                       slices_per_pass="auto"), astra="FBP_CUDA, FDK_CUDA"),
    # the inverse row and column sums, the residual and the update
    "sirt": Method("sirt", "ASTRA's SIRT", dict(nonnegative=False, relaxation=1.0),
                   volumes=2, projections=2, astra="SIRT_CUDA, SIRT3D_CUDA",
                   solve=methods.solve_sirt),
    # the column sums, the update, a volume of ones; the rows' inverse sums, and a
    # subset's ones and residual (one subset: a whole set each)
    "sart": Method("sart", "ASTRA's SART in ordered subsets",
                   dict(nonnegative=False, relaxation=1.0, subsets=None),
                   volumes=3, projections=3, astra="SART_CUDA", solve=methods.solve_sart,
                   angles=lambda n, options: methods.subset_order(n, options.get("subsets"))),
    # the direction and the gradient; the residual and A p
    "cgls": Method("cgls", "ASTRA's CGLS", volumes=2, projections=2,
                   astra="CGLS_CUDA, CGLS3D_CUDA", solve=methods.solve_cgls),
    # the extrapolated x, A^T p, the gradient's transpose, the dual of the data (p) and
    # A x-bar, and the gradient's dual (a volume per dimension)
    "tv": Method("tv", "least squares with total variation (--weight)",
                 dict(nonnegative=False, weight=None), volumes=3, projections=2, gradients=1,
                 solve=methods.solve_tv, steps_before=methods.POWER_ITERATIONS),
}
ITERATIVE = tuple(name for name, method in TABLE.items() if method.iterative)
# Every option of the iterative methods
OPTION_NAMES = tuple(dict.fromkeys(name for method in ITERATIVE
                                   for name in TABLE[method].options))
# What a call of a method on one device holds beside the method's own arrays: the
# volume (the start, updated in place) and its mask; the data.
CALLER = (2, 1)


def held(name: str, dims: int) -> tuple:
    """``(volumes, sets of projections)`` a call of method ``name`` on one device
    holds at its peak: the method's working set and :data:`CALLER`'s."""
    volumes, projections = TABLE[name].working_set(dims)
    return volumes + CALLER[0], projections + CALLER[1]
