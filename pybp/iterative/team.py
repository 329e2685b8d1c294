"""The iterative methods of a whole volume (cone beam's pair, and any pair that takes
runs of projections and of planes) on several devices at once, with the bits of one.

Each device holds every vector whole and takes a share of each step:
- A on its run of projections (each image's bits are its own);
- A^T on its run of planes (whole voxel columns: a work-item's planes start at a
  multiple of the pair's ``column``, so a run starts at one);
- the vector steps on its runs of both;
- TV's gradient on its planes, with the plane before them from the device before.
Where an operator reads a vector, the runs that changed since it was last whole go to
every other device through page-locked host memory (:meth:`Team.gather`). Dot products
add each plane's or image's partial sums in float64 in order, so that a sum does not
depend on where the runs end. One device is a team of one, with the same arithmetic, so
that a volume has the same bits on one device and on several.

The methods (pybp/iterative/methods.py) run unchanged on a team's pair, vectors and
arrays: :class:`Shared` stands where they take a device array.
"""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from pybp import checks
from pybp.cl import pacing
from pybp.cl.device import describe, open_device
from pybp.cl.staging import Staging
from pybp.iterative import methods
from pybp.iterative.tv import Variation
from pybp.iterative.vectors import Vectors

FLOAT = np.dtype(np.float32)


def runs(count: int, members: int, align: int = 1) -> list:
    """``count`` parts (planes, or images) shared out among ``members`` devices in turn: ``(first, stop)``
    each, about equal, every ``first`` a multiple of ``align`` (some may be empty)."""
    edges = [min(count, int(round(count * d / members / align)) * align)
             for d in range(members + 1)]
    edges[-1] = count
    return [(edges[d], max(edges[d], edges[d + 1])) for d in range(members)]


def open_team(devices, make_pair, check=None) -> Team:
    """A team of ``devices`` (as :func:`pybp.cl.device.open_device` takes each), a queue
    and ``make_pair(context, queue, description)`` each, after ``check(description)``
    (which raises where the method would not fit)."""
    members, pairs = [], []
    for device in devices:
        cl_device, context, _ = open_device(device)
        description = describe(cl_device)
        if check is not None:
            check(description)
        queue = cl.CommandQueue(context)
        members.append((context, queue, description))
        pairs.append(make_pair(context, queue, description))
    return Team(members, pairs)


class Space:
    """How a vector is shared out: ``count`` parts (planes, or images) of ``part``
    elements, device ``d`` owning parts ``runs[d]``; ``repeat`` such blocks one after
    another (TV's gradient: a volume per dimension)."""

    def __init__(self, part: int, count: int, runs_: list, repeat: int = 1):
        self.part, self.count, self.runs, self.repeat = part, count, runs_, repeat

    def spans(self, d: int) -> list:
        """Device ``d``'s elements: ``(first, stop)`` in each block."""
        first, stop = self.runs[d]
        block = self.part * self.count
        return [(r * block + first * self.part, r * block + stop * self.part)
                for r in range(self.repeat) if stop > first]


class Events:
    """The last event of a step on each device, waited for as one
    (:func:`pybp.cl.pacing.wait` takes it: the queues are flushed when it is made)."""

    command_queue = None

    def __init__(self, events):
        self.events = [e for e in events if e is not None]

    @property
    def command_execution_status(self) -> int:
        statuses = [e.command_execution_status for e in self.events]
        return min(statuses) if any(s < 0 for s in statuses) else max(statuses, default=0)

    def wait(self):
        for event in self.events:  # one at a time: the devices' contexts may differ
            event.wait()


class Shared:
    """A float32 vector of ``shape`` on every device of ``team`` (``arrays``): each
    device's runs of ``space`` are current on it; ``current`` where every element is
    current on every device. ``data`` is the vector itself, as the methods pass a
    device array's ``data`` to the operators."""

    def __init__(self, team: Team, shape, space: Space, arrays=None):
        self.team, self.shape, self.space = team, tuple(shape), space
        self.size = int(np.prod(self.shape))
        # (the methods' allocator: tests count the working set through it)
        self.arrays = arrays if arrays is not None else \
            [methods.allocator(q)(self.shape) for q in team.queues]
        self.current = len(team.queues) == 1

    @property
    def data(self) -> Shared:
        return self

    def __getitem__(self, index) -> Shared:
        """A leading run ``[:n]`` of a flat vector (SART's residual of a subset)."""
        if not (isinstance(index, slice) and index.start in (None, 0) and index.step in (None, 1)
                and len(self.shape) == 1):
            raise IndexError("a shared vector gives a leading run [:n] of a flat one alone")
        n = min(self.size, index.stop)
        return Shared(self.team, (n,), self.team.space((n,)), [a[:n] for a in self.arrays])

    def set(self, values):
        """Every element on every device from the host."""
        values = np.ascontiguousarray(values, FLOAT).reshape(self.shape)
        for array in self.arrays:
            array.set(values)
        self.current = True

    def get(self, queue=None) -> np.ndarray:
        """The vector on the host, each run from the device that owns it."""
        out = np.empty(self.shape, FLOAT)
        flat = out.reshape(-1)
        copies = [cl.enqueue_copy(q, flat[first:stop], array.data, src_offset=FLOAT.itemsize
                                  * first, is_blocking=False)
                  for d, (q, array) in enumerate(zip(self.team.queues, self.arrays))
                  for first, stop in self.space.spans(d)]
        for copy in copies:
            pacing.wait(copy)
        return out


class Team:
    """Devices ``members`` (``(context, queue, description)`` each) that run one method
    on a whole volume: ``pairs`` (one operator pair each, of the same geometry),
    :attr:`vectors`, :meth:`allocate`, :meth:`upload`; :meth:`variation` for TV."""

    def __init__(self, members, pairs):
        self.members = list(members)
        self.queues = [queue for _, queue, _ in self.members]
        first = pairs[0]
        self.volume_shape = tuple(first.volume_shape)
        self.projection_shape = tuple(first.projection_shape)
        nz = self.volume_shape[0]
        # runs of planes start at a multiple of every pair's column (A^T's bits)
        self.column = math.lcm(*(pair.column for pair in pairs))
        self.plane = int(np.prod(self.volume_shape[1:]))
        self.image = int(np.prod(self.projection_shape[1:]))
        largest = FLOAT.itemsize * max(int(np.prod(self.volume_shape)),
                                       int(np.prod(self.projection_shape)))
        if len(pairs) > 1 and not checks.within_host_share(largest):
            raise ValueError(f"devices: sharing the iterations out takes "
                             f"{largest / 2 ** 30:.3g} GiB of page-locked host memory (a volume "
                             f"or the projections), more than this machine's share of "
                             f"{checks.host_memory() / 2 ** 30:.3g} GiB; give one device")
        self._planes = runs(nz, len(pairs), self.column)
        self._spaces = {}
        self.pair = TeamPair(self, pairs)
        self.vectors = TeamVectors(self)
        self._staging, self._host, self._uploads = None, None, []

    def space(self, shape) -> Space:
        """The space of a vector of ``shape``: the volume's (or several volumes', one
        after another), else projections, whole images of the detector."""
        shape = tuple(shape)
        if shape[-3:] == self.volume_shape and len(shape) <= 4:
            repeat = shape[0] if len(shape) == 4 else 1
            return Space(self.plane, self.volume_shape[0], self._planes, repeat)
        size = int(np.prod(shape))
        if size % self.image:
            raise ValueError(f"a shared vector of {shape} holds no whole projections")
        count = size // self.image
        if count not in self._spaces:
            self._spaces[count] = Space(self.image, count, runs(count, len(self.queues)))
        return self._spaces[count]

    def allocate(self, shape) -> Shared:
        """A vector of ``shape`` on every device (the methods' ``allocate``)."""
        shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
        return Shared(self, shape, self.space(shape))

    def upload(self, values) -> Shared:
        """``values`` (a host array) on every device, whole."""
        values = np.ascontiguousarray(values, FLOAT)
        shared = Shared(self, values.shape, self.space(values.shape),
                        [cla.to_device(q, values) for q in self.queues])
        shared.current = True
        return shared

    def variation(self, dims) -> TeamVariation:
        """TV's kernels on every device, for the volume's gradient along ``dims`` axes."""
        return TeamVariation(self, dims)

    def events(self, events) -> Events:
        for queue in self.queues:
            queue.flush()
        return Events(events)

    def _host_memory(self, size) -> np.ndarray:
        """Page-locked host memory of at least ``size`` floats, kept (made on the first
        device's context: the others read and write it as well)."""
        if self._host is None or self._host.size < size:
            self._wait_uploads()
            if self._staging is not None:
                self._staging.release()
            self._staging = Staging(self.queues[0])
            self._host = self._staging.array(size, FLOAT)
        return self._host

    def _wait_uploads(self):
        for upload in self._uploads:
            pacing.wait(upload)
        self._uploads = []

    def gather(self, shared: Shared):
        """Make ``shared`` whole on every device: each device's runs down into host
        memory, then up to every other device."""
        if shared.current:
            return
        others = lambda d: [e for e in range(len(self.queues)) if e != d]  # noqa: E731
        self._exchange(shared, [(d, others(d), span) for d in range(len(self.queues))
                                for span in shared.space.spans(d)])
        shared.current = True

    def halo(self, shared: Shared, block: int):
        """The plane before each device's run of planes, in volume ``block`` of
        ``shared`` (TV's gradient along z: its transpose reads it), from the device
        that owns it."""
        if shared.current:
            return
        space, moves = shared.space, []
        for e, (first, stop) in enumerate(space.runs):
            if stop > first and first > 0:
                owner = next(d for d, (a, b) in enumerate(space.runs) if a < first <= b)
                start = (block * space.count + first - 1) * space.part
                moves.append((owner, [e], (start, start + space.part)))
        self._exchange(shared, moves)

    def _exchange(self, shared: Shared, moves):
        """Each ``(owner, targets, (first, stop))`` of ``moves``: those elements of
        ``shared`` down from the owner into host memory, then up to the targets (the
        uploads queued ahead of what each device does next)."""
        host = self._host_memory(shared.size)
        self._wait_uploads()  # the host memory's last contents are on their way up
        downs = [cl.enqueue_copy(self.queues[owner], host[first:stop],
                                 shared.arrays[owner].data, src_offset=FLOAT.itemsize * first,
                                 is_blocking=False)
                 for owner, _, (first, stop) in moves]
        for down in downs:
            pacing.wait(down)
        self._uploads = [cl.enqueue_copy(self.queues[e], shared.arrays[e].data,
                                         host[first:stop], dst_offset=FLOAT.itemsize * first,
                                         is_blocking=False)
                         for _, targets, (first, stop) in moves for e in targets]
        for queue in self.queues:
            queue.flush()

    @property
    def descriptions(self) -> list:
        return [description for _, _, description in self.members]

    def fetch(self, shared: Shared) -> np.ndarray:
        return shared.get()

    def close(self):
        """Wait for the transfers and release the host memory."""
        self._wait_uploads()
        if self._staging is not None:
            self._staging.release()
            self._staging, self._host = None, None


class TeamPair:
    """A and A^T on a team (``pairs``: one a device), as one pair to the methods: A on
    each device's run of the projections, A^T on its run of the planes, each reading its
    input whole (:meth:`Team.gather`)."""

    def __init__(self, team: Team, pairs):
        self.team, self.pairs = team, list(pairs)
        first = self.pairs[0]
        self.volume_shape = tuple(first.volume_shape)
        self.projection_shape = tuple(first.projection_shape)
        self.problems = 1
        self.volume_block = int(np.prod(self.volume_shape))
        self.projection_block = int(np.prod(self.projection_shape))

    def updates(self) -> int:
        return self.pairs[0].updates()

    def restricted(self, angles) -> TeamPair:
        """The pair of the projections at indices ``angles`` alone (SART's subsets)."""
        return TeamPair(self.team, [pair.restricted(angles) for pair in self.pairs])

    def forward(self, volume: Shared, projections: Shared, wait_for=None):
        return self._apply(volume, projections,
                           lambda pair, v, p, run: pair.forward(v, p, angles=run))

    def backward(self, projections: Shared, volume: Shared, wait_for=None):
        return self._apply(projections, volume,
                           lambda pair, p, v, run: pair.backward(p, v, planes=run))

    def _apply(self, given: Shared, made: Shared, operator) -> Events:
        """``operator(pair, given, made, run)`` on each device: ``given`` made whole
        first, ``made`` then current on each device's run of its space alone."""
        self.team.gather(given)
        events = [operator(pair, g.data, m.data, made.space.runs[d])
                  for d, (pair, g, m) in enumerate(zip(self.pairs, given.arrays, made.arrays))]
        made.current = len(self.pairs) == 1
        return self.team.events(events)


def _on_runs(team: Team, each, out: Shared, step) -> Events:
    """``step(kernels, d, span)`` with each device's kernels (``each``) on its runs of
    ``out``'s space; ``out`` is then current on each device's runs alone."""
    events = [step(kernels, d, span) for d, kernels in enumerate(each)
              for span in out.space.spans(d)]
    out.current = len(each) == 1
    return team.events(events)


class TeamVectors:
    """The vector steps (:class:`pybp.iterative.vectors.Vectors`) on a team: each device
    on its runs of the vector written."""

    def __init__(self, team: Team):
        self.team = team
        self.each = [Vectors(context, queue, device) for context, queue, device in team.members]
        self.queue = None

    def _steps(self, out: Shared, step) -> Events:
        return _on_runs(self.team, self.each, out, step)

    def fill(self, out: Shared, value) -> Events:
        """Every element on every device: the vector is then whole."""
        events = [vectors.fill(array, value) for vectors, array in zip(self.each, out.arrays)]
        out.current = True
        return self.team.events(events)

    def combine(self, out, a, x, b, y):
        return self._steps(out, lambda v, d, span: v.combine(
            out.arrays[d], a, x.arrays[d], b, y.arrays[d], span=span))

    def invert(self, sums, weights):
        return self._steps(weights, lambda v, d, span: v.invert(
            sums.arrays[d], weights.arrays[d], span=span))

    def residual(self, b, r, w):
        return self._steps(r, lambda v, d, span: v.residual(
            b.arrays[d], r.arrays[d], w.arrays[d], span=span))

    def step(self, x, d_, w, relaxation, nonnegative):
        return self._steps(x, lambda v, d, span: v.step(
            x.arrays[d], d_.arrays[d], w.arrays[d], relaxation, nonnegative, span=span))

    def scale(self, x, w):
        return self._steps(x, lambda v, d, span: v.scale(x.arrays[d], w.arrays[d], span=span))

    def combine_each(self, out, a, x, b, y, block, problems):
        if problems != 1:
            raise ValueError("a team's vectors hold one problem")
        return self._steps(out, lambda v, d, span: v.combine_each(
            out.arrays[d], a, x.arrays[d], b, y.arrays[d], block, 1, span=span))

    def _per_part(self, x: Shared, reduce, take) -> np.ndarray:
        """``reduce`` of each plane's or image's value (``take(vectors, d, parts,
        span)``, float64), over all of them in order: one problem."""
        space = x.space
        parts = [take(vectors, d, stop - first, (first * space.part, stop * space.part))
                 for d, vectors in enumerate(self.each) for first, stop in [space.runs[d]]
                 if stop > first]
        return np.array([reduce(np.concatenate(parts))])

    def dots(self, x, y=None, block=None, problems=1) -> np.ndarray:
        """x . y (x . x without ``y``): each plane's or image's sum on its device (in the
        order :meth:`Vectors.dots` adds one problem), then theirs in float64 in order."""
        y = x if y is None else y
        return self._per_part(x, np.sum, lambda v, d, parts, span: v.dots(
            x.arrays[d], y.arrays[d], block=x.space.part, problems=parts, span=span))

    def peaks(self, x, block=None, problems=1) -> np.ndarray:
        return self._per_part(x, np.max, lambda v, d, parts, span: v.peaks(
            x.arrays[d], block=x.space.part, problems=parts, span=span))


class TeamVariation:
    """TV's kernels (:class:`pybp.iterative.tv.Variation`) on a team: the gradient's
    steps on each device's planes, the flat steps on its runs."""

    def __init__(self, team: Team, dims: int):
        self.team, self.dims = team, dims
        self.each = [Variation(context, queue, device, team.volume_shape, dims)
                     for context, queue, device in team.members]
        self._planes = team.space(team.volume_shape).runs

    def _planewise(self, out: Shared, step) -> Events:
        events = [step(variation, d, self._planes[d]) for d, variation in enumerate(self.each)
                  if self._planes[d][1] > self._planes[d][0]]
        out.current = len(self.each) == 1
        return self.team.events(events)

    def dual(self, q, xbar, sigma, weight):
        self.team.gather(xbar)  # the plane after each run's last
        return self._planewise(q, lambda v, d, planes: v.dual(
            q.arrays[d], xbar.arrays[d], sigma, weight, planes=planes))

    def transpose(self, q, out):
        self.team.halo(q, self.dims - 1)  # the gradient along z reads the plane before
        return self._planewise(out, lambda v, d, planes: v.transpose(
            q.arrays[d], out.arrays[d], planes=planes))

    def data_dual(self, p, ax, b, sigma):
        return _on_runs(self.team, self.each, p, lambda v, d, span: v.data_dual(
            p.arrays[d], ax.arrays[d], b.arrays[d], sigma, span=span))

    def primal(self, x, xbar, atp, gtq, tau, tau_gradient, nonnegative):
        xbar.current = len(self.each) == 1
        return _on_runs(self.team, self.each, x, lambda v, d, span: v.primal(
            x.arrays[d], xbar.arrays[d], atp.arrays[d], gtq.arrays[d], tau, tau_gradient,
            nonnegative, span=span))
