"""Cone-beam back-projection and FDK (``pybp.ConeBackprojector``,
``pybp.cone_backproject``, ``pybp.fdk``) in the geometry of :class:`pybp.ConeGeometry`
(ASTRA's conventions)."""

from __future__ import annotations

import threading

import numpy as np

from pybp import checks
from pybp.cone import run, volumes
from pybp.cone import store as stores
from pybp.cone.backproject import SlabRecipe
from pybp.geometry.cone import ConeGeometry
from pybp.parallel import speed
from pybp.stages.normalize import warn_replaced


class ConeBackprojector:
    """The voxel-driven cone-beam back-projection of ``geometry`` on one device, kept
    for any number of calls (kernels, device buffers and page-locked staging made
    once; calls from several threads take turns): the sum over projections of the
    bilinear sample where each voxel centre
    projects, zero outside the detector, no weights (the adjoint-like operator
    iterative methods need).

    ``filter`` (``"ramp"``, ``"shepp-logan"``, ``"cosine"``, ``"hamming"``, ``"hann"``):
    FDK instead (:func:`fdk`), with ``padding`` and ``short_scan`` as there.
    ``params``: a :class:`pybp.cone.params.ConeParams` (None: the device's);
    ``memory_limit``: bytes of device memory for the volume and the projections in
    flight (None: 75% of the device's, as for parallel beam): a larger volume is
    reconstructed in slabs of z planes, each from the window of detector rows it
    projects onto, with the same result bit for bit. The projections are then
    pre-weighted and filtered once into page-locked host memory (``store_bytes`` of
    it, pinned on the first call and kept until :meth:`close`), from which each slab
    takes its windows by DMA; where that store would take over half the host's
    memory, or with ``store=False``, each slab reads and filters its windows again.
    The store pays from the second call on: pinning it takes longer than the slabs'
    reading again (2048^3 at a quarter limit: 16 s to pin 32 GiB, 1.1x the rows read;
    docs/benchmarks.md's history), so a single call (``pybp reconstruct``'s) goes without.
    ``planes``: ``(first, stop)``, the z planes to
    reconstruct (None: all; from a multiple of 16 they equal the whole volume's bit for
    bit). ``flats`` and ``darks`` (frames or their means), with a filter: the
    projections are detector counts, normalised and ``-log`` taken on the device
    (counts of 8 or 16 bits go up as they are, read straight from an HDF5 dataset or
    TIFF files into the staging).
    ``device``, ``context`` or ``queue`` as for :class:`pybp.Backprojector`.
    ``progress``: a progress line (projections done, GUPS, time left) on standard error for
    calls longer than 2 s.

    Line integrals with NaN or Inf are refused (``ValueError``, before the slab they would
    spread into is written; with a store, before any slab); counts with no transmission are
    floored and counted in one warning: the rule of every pybp call (docs/design.md, section
    1)."""

    def __init__(self, geometry: ConeGeometry, params=None, filter=None, padding="zero",
                 short_scan=None, memory_limit=None, planes=None, flats=None, darks=None,
                 device=None, context=None, queue=None, progress=False, store=True):
        volumes.check_geometry(geometry)
        store = checks.flag(store, "store")
        self.geometry, self.progress = geometry, checks.flag(progress, "progress")
        if device is None and context is None and queue is None:
            speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
        self._recipe = SlabRecipe(
            geometry, params, device=device, context=context, queue=queue, filter=filter,
            padding=padding, short_scan=short_scan, memory_limit=memory_limit, planes=planes,
            flats=flats, darks=darks)
        self._fill = None  # in several slabs: the filtered projections kept between them
        kept = stores.stored(self._recipe, padding, short_scan, flats, darks, queue) \
            if store else None
        if kept is not None:
            self._recipe.close()
            self._fill, self._recipe = kept
        self._lock = threading.Lock()  # one call at a time: they share the device buffers
        recipe = self._recipe
        self.shape = (len(recipe.planes),) + geometry.volume_shape[1:]
        self.params, self.device, self.plan = recipe.params, recipe.device, recipe.plan
        # Page-locked host memory the filtered projections take between slabs (pinned
        # on the first call; 0: none, each slab filters its windows of rows).
        self.store_bytes = self._fill.store_bytes if self._fill is not None else 0

    def __call__(self, projections, out=None, progress=None):
        """The volume ``(nz, ny, nx)`` (or its ``planes``) of ``projections`` ``(n_angles,
        n_rows, n_cols)`` (any real dtype; an array, a memmap, an h5py dataset or
        anything sliced ``[projections, rows]`` that gives arrays); ``out``: an array, a
        memmap or a dataset for it (default: a new float32 array, if this machine's
        memory holds it); ``progress``: whether this call shows the progress line (None:
        where the ConeBackprojector was made with one)."""
        with self._lock:
            return self._call(projections, out, progress)

    def _call(self, projections, out, progress):
        if self._recipe is None:
            raise RuntimeError("ConeBackprojector: closed; make a new one")
        out = volumes.checked_volume(projections, self.geometry, self.shape, out)
        replaced = run.slabs_of([self._recipe], projections, out,
                                self.progress if progress is None else checks.flag(progress, "progress"),
                                fill=self._fill)
        # Counts only: line integrals with NaN or Inf were refused.
        warn_replaced(replaced, int(np.prod(np.shape(projections))), stacklevel=2)
        return out

    def close(self):
        """Free device memory now (also on leaving a ``with`` block)."""
        with self._lock:
            if self._recipe is not None:
                self._recipe.close()
                self._recipe = None
            if self._fill is not None:
                self._fill.close()
                self._fill = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def cone_backproject(projections, geometry: ConeGeometry, out=None, progress=True, **options):
    """One-shot back-projection, no weights and no filter (options as for
    :class:`ConeBackprojector`; giving a filter is an error: use :func:`fdk`); the
    progress line shows on calls longer than 2 s unless ``progress=False``."""
    if options.get("filter") is not None:
        raise ValueError("filter: pybp.cone_backproject does not filter; use pybp.fdk")
    with ConeBackprojector(geometry, progress=progress, **options) as bp:
        return bp(projections, out)


def fdk(projections, geometry: ConeGeometry, filter="ramp", padding="zero", short_scan=None,
        out=None, flats=None, darks=None, progress=True, rings=None, ring_options=None,
        phase=None, devices=None, client=None, log=None, **options):
    """Feldkamp-Davis-Kress reconstruction of line integrals ``projections`` ``(n_angles,
    n_rows, n_cols)`` (``-log`` of normalised counts) in ``geometry``: the volume
    ``(nz, ny, nx)`` in attenuation per unit of the geometry's lengths. With ``flats``
    (and ``darks``; frames ``(n, n_rows, n_cols)`` or their means) the projections are
    detector counts instead, made ``-log((p - dark) / (flat - dark))`` on the device
    (values that are not positive become 1e-6, counted in one warning).

    Each projection is multiplied by the cosine of its rays to the detector's normal,
    filtered along its rows by ``filter`` (one of
    :data:`pybp.stages.filters.FILTERS`; ``padding`` ``"zero"`` or ``"edge"`` for
    truncated projections) at the pitch its columns have at the isocentre, weighted by
    the angle it stands for (half the gaps to its neighbours, gaps of missing data
    capped, as in :func:`pybp.fbp`), and back-projected with the weight ``1 / w^2``
    (``w``: the voxel's depth over the isocentre's). A short scan (180 degrees plus the
    fan angle; found from the angles with ``short_scan=None``, or forced with True or
    False) is weighted by Parker's weights instead of one half.

    FDK is exact in the orbit's plane and approximate away from it (the cone angle);
    for trajectories that are not a circle about z (helical, tilted, C-arm: made with
    :meth:`ConeGeometry.from_astra` or :meth:`~ConeGeometry.from_matrices`) the same
    weights are applied per projection, and FDK is a further approximation. A progress
    line shows on calls longer than 2 s (``progress=False``: none). Other options as for
    :class:`ConeBackprojector`.

    Through the stream of parallel beam (pybp/cone/run.py): ``rings`` (``"sort"`` or
    ``"fw"``, with ``ring_options``) removes rings from each detector row's sinogram,
    ``phase`` (a dict of ``delta_beta``, ``energy`` in keV, ``distance`` and
    ``pixel_size`` in metres, as :func:`pybp.reconstruct` takes it) retrieves the phase
    of each projection by Paganin's method before ``-log``; in cone beam ``distance``
    is the effective propagation distance (source to sample times sample to detector
    over source to detector) and ``pixel_size`` the detector's pixel at the sample
    (over the magnification). ``devices`` (``"all"``, or a list as for
    :func:`pybp.reconstruct`) share the rows and the slabs out, and the workers of a
    Dask ``client`` (in this process: :func:`pybp.distributed.local_cluster`) runs of
    planes; the volume is the same bit for bit on one device or several. The filtered
    projections are then kept in host memory, 4 bytes a detector pixel of the rows the
    planes project onto (on each worker: those of its planes).

    ``log``: whether ``-log`` is taken (default: where ``flats`` are given; True without
    flats: the projections are normalised transmissions, as :func:`pybp.reconstruct`
    takes them; False with flats: the normalised values as they are)."""
    if filter is None:
        raise ValueError("filter: FDK needs a filter; use pybp.cone_backproject for none")
    if "method" in options:
        raise TypeError("method: pybp.fdk is FDK; cone beam's iterative methods are "
                        "pybp.reconstruct(projections, geometry, method='sirt', iterations=...) "
                        "and pybp.sirt(projections, geometry, iterations), pybp.sart, "
                        "pybp.cgls and pybp.tv")
    log = checks.log_option(log, flats)
    volumes.check_geometry(geometry)
    if not any(options.get(name) is not None for name in ("device", "context", "queue")) \
            and devices is None and client is None:
        speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
    return volumes.fdk(projections, geometry, filter, padding, short_scan, out, flats, darks,
                       progress, dict(rings=rings, ring_options=ring_options, phase=phase),
                       devices, client, options, log)
