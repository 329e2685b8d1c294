"""Cone-beam scans on disk: the geometry file (``cone.json``) that ``pybp reconstruct
--geometry`` reads and ``pybp demo --cone`` writes.

``cone.json`` holds one object, lengths in one unit (mm, say):

- a circular scan (ASTRA's ``cone``; the angles are the scan file's)::

      {"circular": {"source_origin": 750, "origin_detector": 450, "pixel_size": 0.3,
                    "detector_offset": [0, 0]},
       "volume_shape": [512, 512, 512], "voxel_size": 0.5, "volume_offset": [0, 0, 0]}

- any trajectory, as ASTRA ``cone_vec`` rows ``(src, d, u, v)`` or as projection
  matrices ``(n, 3, 4)`` in a ``.npy`` or text file (a path relative to the JSON)::

      {"vectors": "vectors.txt", "volume_shape": [...], "voxel_size": 0.5}
      {"matrices": "matrices.npy", "volume_shape": [...], "voxel_size": 0.5}

- parallel rays along any direction (laminography, tomosynthesis: a
  :class:`pybp.ParallelVectorGeometry`, reconstructed by an iterative ``--method``), as
  ASTRA ``parallel3d_vec`` rows ``(ray, d, u, v)``::

      {"parallel_vectors": "vectors.txt", "volume_shape": [...], "voxel_size": 0.5}

- ASTRA's own geometry dicts, as ``astra.create_proj_geom`` (``cone``, ``cone_vec``,
  ``parallel3d`` or ``parallel3d_vec``, ``Vectors`` as nested lists) and
  ``astra.create_vol_geom`` make them; the volume is the dict's, and a ``cone`` or
  ``parallel3d`` dict's angles must be the scan file's::

      {"astra": {"proj_geom": {"type": "cone", ...}, "vol_geom": {"GridRowCount": ...}}}

``pixel_size`` is a number or ``[row, column]``; ``voxel_size`` a number (cubes) or ``[x,
y, z]``; ``detector_offset`` (pixels, ``[row, column]``) and ``volume_offset`` (``[x, y,
z]``) default to zeros.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pybp.geometry.cone import ConeGeometry
from pybp.geometry.parallel_vectors import ParallelVectorGeometry
from pybp.geometry.volume import VolumeGeometry

TRAJECTORIES = ("circular", "vectors", "matrices", "parallel_vectors", "astra")
VOLUME_KEYS = ("volume_shape", "voxel_size", "volume_offset")
CIRCULAR_KEYS = ("source_origin", "origin_detector", "pixel_size", "detector_offset")


def _load_array(path: Path, name: str, columns: int) -> np.ndarray:
    if not path.exists():
        raise ValueError(f"{name} file {path} does not exist")
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        raise ValueError(f"{name} file {path} is {what}; give a .npy or text file")
    try:
        values = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {name} from {path}: {exc}") from None
    if name == "matrices" and values.ndim == 2 and values.shape[1] == columns:
        values = values.reshape(-1, 3, 4)  # rows of 12 numbers in a text file
    return values


def check_path(path) -> Path:
    """``path`` unless it is there and is not a file (the command checks this before its
    output: a folder given as the geometry was called an input holding the output)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ValueError(f"geometry: {path} is {'a folder' if path.is_dir() else 'not a regular file'}"
                         "; give a cone.json file")
    return path


def read_geometry(path, angles, detector_shape) -> VolumeGeometry:
    """The geometry of ``path`` (a :class:`ConeGeometry`, or a
    :class:`ParallelVectorGeometry`) for a scan with ``angles`` (radians; used by a
    circular scan) and ``detector_shape`` ``(n_rows, n_cols)``. Errors name the file and
    the key."""
    path = check_path(path)
    try:
        spec = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"geometry: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"geometry: {path} is not JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"geometry: {path} nests its values too deeply to be a cone.json") \
            from None
    if not isinstance(spec, dict):
        raise ValueError(f"geometry: {path} must hold one JSON object")
    given = [k for k in TRAJECTORIES if k in spec]
    if len(given) != 1:
        raise ValueError(f"geometry: {path} must give exactly one of {', '.join(TRAJECTORIES)}")
    unknown = sorted(set(spec) - set(TRAJECTORIES) - set(VOLUME_KEYS))
    if unknown:
        raise ValueError(f"geometry: {path}: unknown key {unknown[0]!r} (expected "
                         f"{', '.join(TRAJECTORIES + VOLUME_KEYS)})")
    if given == ["astra"]:
        try:
            return _astra(spec, angles, detector_shape)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"geometry: {path}: {exc}") from None
    for key in ("volume_shape", "voxel_size"):
        if key not in spec:
            raise ValueError(f"geometry: {path} needs {key!r}")
    volume = dict(volume_shape=spec["volume_shape"], voxel_size=spec["voxel_size"],
                  volume_offset=spec.get("volume_offset", (0, 0, 0)))
    kind = given[0]
    try:
        if kind == "circular":
            circular = spec["circular"]
            if not isinstance(circular, dict):
                raise ValueError("circular: expected an object of "
                                 f"{', '.join(CIRCULAR_KEYS)}")
            unknown = sorted(set(circular) - set(CIRCULAR_KEYS))
            missing = [k for k in CIRCULAR_KEYS[:3] if k not in circular]
            if unknown or missing:
                raise ValueError(f"circular: unknown key {unknown[0]!r}" if unknown
                                 else f"circular: needs {missing[0]!r}")
            return ConeGeometry.circular(angles, detector_shape, **circular, **volume,
                                         angle_unit="rad")
        if not isinstance(spec[kind], str):
            raise ValueError(f"{kind}: expected the name of a .npy or text file (relative to "
                             f"the JSON), got {spec[kind]!r}")
        values = _load_array(path.parent / spec[kind], kind, 12)
        if len(values) != len(angles):
            raise ValueError(f"{kind}: {len(values)} rows in {spec[kind]}, but the scan has "
                             f"{len(angles)} projections")
        if kind == "vectors":
            return ConeGeometry.from_astra(values, detector_shape, **volume)
        if kind == "parallel_vectors":
            return ParallelVectorGeometry.from_astra(values, detector_shape, **volume)
        return ConeGeometry.from_matrices(values, detector_shape, **volume)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"geometry: {path}: {exc}") from None


def _astra(spec, angles, detector_shape) -> VolumeGeometry:
    """The geometry of ``{"astra": {"proj_geom": ..., "vol_geom": ...}}`` (cone beam, or
    parallel rays along any direction), checked against the scan's ``angles`` and
    ``detector_shape``."""
    extra = [key for key in VOLUME_KEYS if key in spec]
    if extra:
        raise ValueError(f"{extra[0]}: the volume is the astra vol_geom's; give it there")
    dicts = spec["astra"]
    if not isinstance(dicts, dict) or set(dicts) != {"proj_geom", "vol_geom"}:
        raise ValueError("astra: expected an object of proj_geom and vol_geom (ASTRA's "
                         "dicts)")
    parallel = isinstance(dicts["proj_geom"], dict) and \
        str(dicts["proj_geom"].get("type")).startswith("parallel3d")
    kind = ParallelVectorGeometry if parallel else ConeGeometry
    geometry = kind.from_astra(dicts["proj_geom"], dicts["vol_geom"])
    if geometry.detector_shape != tuple(detector_shape):
        raise ValueError(f"astra: a detector of {geometry.detector_shape[0]} x "
                         f"{geometry.detector_shape[1]} pixels; the scan's is "
                         f"{detector_shape[0]} x {detector_shape[1]}")
    if geometry.n_angles != len(angles):
        raise ValueError(f"astra: {geometry.n_angles} projections; the scan has {len(angles)}")
    if dicts["proj_geom"].get("type") in ("cone", "parallel3d"):
        theirs = np.asarray(dicts["proj_geom"]["ProjectionAngles"], np.float64)
        turn = np.angle(np.exp(1j * (theirs - np.asarray(angles, np.float64))))
        if np.abs(turn).max() > 1e-6:
            raise ValueError(f"astra: its ProjectionAngles differ from the scan's by up to "
                             f"{np.degrees(np.abs(turn).max()):.3g} degrees")
    return geometry


def write_circular(path, source_origin, origin_detector, pixel_size, volume_shape, voxel_size,
                   detector_offset=(0, 0), volume_offset=(0, 0, 0)):
    """A ``cone.json`` for a circular scan (not replacing a file: the caller checks)."""
    spec = {"circular": {"source_origin": source_origin, "origin_detector": origin_detector,
                         "pixel_size": pixel_size, "detector_offset": list(detector_offset)},
            "volume_shape": list(volume_shape), "voxel_size": voxel_size,
            "volume_offset": list(volume_offset)}
    Path(path).write_text(json.dumps(spec, indent=2) + "\n")
