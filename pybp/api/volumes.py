"""``pybp.reconstruct`` (this module is named for what it makes, so that the function
is ``pybp.reconstruct``): a volume from detector projections in any registered geometry.
The geometry's kind (pybp/registry.py) does the work: parallel beam streams chunks of
detector rows through one device or several (pybp/parallel/volumes.py), a whole volume
is FDK's or an iterative method's (pybp/cone/volumes.py); this module chooses no
geometry itself (docs/architecture.md).
"""

from __future__ import annotations

from pybp import registry
from pybp.api.iterative import by_method
from pybp.parallel import speed
from pybp.parallel.volumes import Reconstructor

__all__ = ["Reconstructor", "reconstruct"]


def reconstruct(projections, geometry=None, flats=None, darks=None, center=None, rows=None,
                out=None, *, filter="ramp", padding="zero", log=True, progress=True,
                chunk_slices=None, device=None, devices=None, client=None, context=None,
                queue=None, stats=None, angle_unit=None, **options):
    """Reconstruct a scan in ``geometry``: a :class:`pybp.ParallelGeometry`, a
    :class:`pybp.ConeGeometry` (ASTRA's dicts: ``from_astra`` of either), a
    :class:`pybp.ParallelVectorGeometry` (any rays: laminography; iterative methods
    only, as cone beam's), or the angles of a parallel-beam scan. By filtered
    back-projection (FDK for cone beam), or an iterative ``method``; return the volume.

    Parallel beam: detector rows ``rows=(first, stop)`` (default all), the volume
    ``(stop - first, ny, nx)``. Cone beam: the geometry's volume ``(nz, ny, nx)``
    (:func:`pybp.fdk`, or the iterative method of the line integrals; ``rows``,
    ``center`` and ``chunk_slices`` are parallel beam's; ``short_scan``, ``params``,
    ``planes`` in ``options`` as :func:`pybp.fdk` takes them). The options below mean
    the same in both.

    - ``projections``: ``(n_angles, n_rows, n_bins)``, any integer or float dtype; NumPy
      arrays, memmaps, h5py datasets, or anything with ``shape``, ``dtype`` and slicing.
      Read a chunk of rows at a time, never whole.
    - ``geometry``: a geometry, or the angles, radians, one per projection
      (``angle_unit="deg"``: degrees; radians spanning more than one turn are refused
      unless ``angle_unit="rad"`` says so). A geometry holds the angles, the axis and
      the sizes: ``center`` (but ``"auto"``), ``angle_unit`` and the geometry's own
      options are refused beside it.
    - ``flats``, ``darks``: ``(n_frames, n_rows, n_bins)`` (or one 2-D frame) each, or
      both None for data already normalised. Values are normalised as
      ``(p - mean dark) / (mean flat - mean dark)``; with ``log`` (default) the FBP is of
      ``-log`` of that: values that are not positive become 1e-6 first, not-a-number
      ones 1 (counted in one warning). ``log=False`` back-projects the values as they are
      (e.g. sinograms already taken the log of, as ``(n_angles, n_rows, n_bins)``).
    - ``center``: the axis' detector column (default ``(n_bins - 1) / 2``), or
      ``"auto"``: found from the data by :func:`pybp.find_center` (Vo's method refined
      by the least negative slice), also with a ParallelGeometry, in place of its own.
    - ``out``: where slices go (NumPy array, memmap, h5py dataset), of shape
      ``(stop - first, ny, nx)``, or ``(n_rows, ny, nx)`` for slices to land at their own
      row; float dtype. Nothing is written before every argument has been checked; the
      values are checked as their chunk is read: with ``log=False`` a NaN or Inf stops
      the call with a ValueError naming its projection, row and bin, the chunks before
      it in ``out`` already.
    - ``filter`` (default ``"ramp"``), ``padding``, and ``options`` as for
      :class:`pybp.Backprojector` (``interpolation``, ``precision``, ``slices_per_pass``,
      ``slice_shape``, ``kernel``, ...); ``device``, ``context`` or ``queue`` pick the device.
    - ``devices``: several devices, ``"all"`` (every GPU, else every device of the
      fastest kind) or a list of indices, names or ``pyopencl.Device``; each runs its
      own pipeline and takes the next chunk of rows when it has room (a slower device
      takes fewer). Every slice is written once, with the values one device gives.
    - ``client``: a ``dask.distributed.Client``: its workers reconstruct slabs of rows
      on their own devices (:mod:`pybp.distributed`); arrays are shared with workers
      in this process only (``LocalCluster(processes=False)``, or
      :func:`pybp.distributed.local_cluster`); workers in other processes or on other
      hosts read files: ``pybp reconstruct --scheduler``.
    - ``chunk_slices``: the most rows per chunk (default: 4 from arrays, 16 from files;
      fewer where the device's memory, or ``memory_limit``, asks).
    - ``memory_limit`` (in ``options``): the most bytes of each device's memory a call
      keeps (default: 75% of the device's; the same rule as cone beam's).
    - ``method``: ``"fbp"`` (default), or an iterative method, ``"sirt"``, ``"sart"``,
      ``"cgls"`` or ``"tv"``, run on each chunk of slices in place of the filter and the
      back-projection, with ``iterations`` and its options in ``options``
      (``nonnegative``, ``relaxation``, ``subsets``, ``weight``: as :func:`pybp.sirt`
      and the others take them); ``filter``, FBP's, is then left at its default. Each
      slice is its own problem: any chunks, devices or workers give the same bits.
    - ``progress``: rows done, GU/s and time left on standard error for work longer
      than 2 s.
    - ``stats``: a dict to fill with timings (wall, device time per stage, host copies;
      with several devices, ``devices``: the slices and time of each).

    Each call makes the devices' kernels, memory and page-locked staging, and frees
    them after; to reconstruct several volumes of one geometry, a
    :class:`Reconstructor` keeps them between calls.
    """
    if geometry is None:  # the name before geometries, reconstruct(p, angles=...)
        geometry = options.pop("angles", None)
        if geometry is None:
            raise TypeError(f"geometry: give the scan's geometry ({registry.names()}) or its "
                            "angles")
    if isinstance(geometry, (str, bytes, dict)):
        astra = (f" (ASTRA's dicts: from_astra(proj_geom, vol_geom) of {registry.names()})"
                 if isinstance(geometry, dict) else "")
        raise TypeError(f"geometry: expected a pybp geometry ({registry.names()}) or the "
                        f"angles, got a {type(geometry).__name__}{astra}")
    kind = registry.taking(geometry)
    if not any(value is not None for value in (device, devices, client, context, queue)):
        speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
    return kind.reconstruct(projections, geometry, flats, darks, center, rows, out,
                            filter=filter, padding=padding, log=log, progress=progress,
                            chunk_slices=chunk_slices, device=device, devices=devices,
                            client=client, context=context, queue=queue, stats=stats,
                            angle_unit=angle_unit, solve=by_method, **options)
