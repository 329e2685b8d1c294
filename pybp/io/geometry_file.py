"""The geometry file (``cone.json``, say) that ``pybp reconstruct --geometry`` reads and
``pybp demo --cone`` writes: one JSON object, lengths in one unit (mm, say). Which keys
a kind reads, and how, is the kind's (``file_keys``, ``astra_types`` and ``reader`` of
pybp/registry.py's protocol); this module reads the JSON, checks what every kind's file
shares (one trajectory, the volume's keys, ASTRA's dicts against the scan) and asks the
kind for the geometry. The keys of today's kinds:

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

- a fan-beam scan of one detector row (a :class:`pybp.FanGeometry`: its slice ``[ny, nx]``
  and offset ``[x, y]``), circular (ASTRA's ``fanflat``; the angles the scan file's) or
  as ``fanflat_vec`` rows ``(src, d, u)``::

      {"fan": {"source_origin": 200, "origin_detector": 100, "pixel_size": 1.0},
       "volume_shape": [64, 64], "voxel_size": 1.0, "volume_offset": [0, 0]}
      {"fan_vectors": "vectors.txt", "volume_shape": [64, 64], "voxel_size": 1.0}

- ASTRA's own geometry dicts, as ``astra.create_proj_geom`` (``cone``, ``cone_vec``,
  ``parallel3d``, ``parallel3d_vec``, ``fanflat`` or ``fanflat_vec``, ``Vectors`` as
  nested lists) and ``astra.create_vol_geom`` make them; the volume is the dict's, and a
  ``cone``, ``parallel3d`` or ``fanflat`` dict's angles must be the scan file's::

      {"astra": {"proj_geom": {"type": "cone", ...}, "vol_geom": {"GridRowCount": ...}}}

``pixel_size`` is a number or ``[row, column]``; ``voxel_size`` a number (cubes) or ``[x,
y, z]``; ``detector_offset`` (pixels, ``[row, column]``) and ``volume_offset`` (``[x, y,
z]``) default to zeros.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

VOLUME_KEYS = ("volume_shape", "voxel_size", "volume_offset")


def load_array(path: Path, name: str) -> np.ndarray:
    """The rows of ``path`` (a ``.npy`` or text file) named by the key ``name``."""
    if not path.exists():
        raise ValueError(f"{name} file {path} does not exist")
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        raise ValueError(f"{name} file {path} is {what}; give a .npy or text file")
    try:
        values = np.load(path) if path.suffix == ".npy" else np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {name} from {path}: {exc}") from None
    return values


def check_path(path) -> Path:
    """``path`` unless it is there and is not a file (the command checks this before its
    output: a folder given as the geometry was called an input holding the output)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ValueError(f"geometry: {path} is {'a folder' if path.is_dir() else 'not a regular file'}"
                         "; give a cone.json file")
    return path


def load(path) -> dict:
    """The JSON object of ``path``; errors name the file."""
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
    return spec


def read(path, angles, detector_shape, kinds):
    """The geometry of ``path`` for a scan with ``angles`` (radians; used by a circular
    scan) and ``detector_shape`` ``(n_rows, n_cols)``, made by the one of ``kinds`` whose
    key the file gives. Errors name the file and the key."""
    path = check_path(path)
    spec = load(path)
    owners = {key: kind for kind in kinds for key in kind.file_keys}
    trajectories = tuple(owners) + ("astra",)
    given = [k for k in trajectories if k in spec]
    if len(given) != 1:
        raise ValueError(f"geometry: {path} must give exactly one of {', '.join(trajectories)}")
    unknown = sorted(set(spec) - set(trajectories) - set(VOLUME_KEYS))
    if unknown:
        raise ValueError(f"geometry: {path}: unknown key {unknown[0]!r} (expected "
                         f"{', '.join(trajectories + VOLUME_KEYS)})")
    key = given[0]
    try:
        if key == "astra":
            return _astra(spec, angles, detector_shape, kinds)
        for name in ("volume_shape", "voxel_size"):
            if name not in spec:
                raise ValueError(f"needs {name!r}")
        volume = {name: spec[name] for name in VOLUME_KEYS if name in spec}  # offset: the kind's default
        return owners[key].reader(key)(spec[key], path.parent, angles, detector_shape, volume)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"geometry: {path}: {exc}") from None


def keyed(value, key, keys, required) -> dict:
    """``value``, an object of some of ``keys`` with the first ``required`` of them."""
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected an object of {', '.join(keys)}")
    unknown = sorted(set(value) - set(keys))
    missing = [k for k in keys[:required] if k not in value]
    if unknown or missing:
        raise ValueError(f"{key}: unknown key {unknown[0]!r}" if unknown
                         else f"{key}: needs {missing[0]!r}")
    return value


def rows_of(value, key, folder, angles) -> np.ndarray:
    """The rows of the file that ``value`` names (relative to the JSON's ``folder``), one
    per projection."""
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected the name of a .npy or text file (relative to "
                         f"the JSON), got {value!r}")
    values = load_array(Path(folder) / value, key)
    if len(values) != len(angles):
        raise ValueError(f"{key}: {len(values)} rows in {value}, but the scan has "
                         f"{len(angles)} projections")
    return values


def _astra(spec, angles, detector_shape, kinds):
    """The geometry of ``{"astra": {"proj_geom": ..., "vol_geom": ...}}``, made by the
    kind whose ``astra_types`` holds its type, checked against the scan's ``angles`` and
    ``detector_shape``."""
    extra = [key for key in VOLUME_KEYS if key in spec]
    if extra:
        raise ValueError(f"{extra[0]}: the volume is the astra vol_geom's; give it there")
    dicts = spec["astra"]
    if not isinstance(dicts, dict) or set(dicts) != {"proj_geom", "vol_geom"} or \
            not isinstance(dicts["proj_geom"], dict):
        raise ValueError("astra: expected an object of proj_geom and vol_geom (ASTRA's "
                         "dicts)")
    owners = {t: kind for kind in kinds for t in kind.astra_types}
    kind = owners.get(dicts["proj_geom"].get("type"))
    if kind is None:
        raise ValueError(f"astra: proj_geom's type {dicts['proj_geom'].get('type')!r} is "
                         f"none of {', '.join(owners)}")
    geometry = kind.geometry.from_astra(dicts["proj_geom"], dicts["vol_geom"])
    if geometry.detector_shape != tuple(detector_shape):
        raise ValueError(f"astra: a detector of {geometry.detector_shape[0]} x "
                         f"{geometry.detector_shape[1]} pixels; the scan's is "
                         f"{detector_shape[0]} x {detector_shape[1]}")
    if geometry.n_angles != len(angles):
        raise ValueError(f"astra: {geometry.n_angles} projections; the scan has {len(angles)}")
    if "ProjectionAngles" in dicts["proj_geom"]:  # the scan file's angles must be these
        theirs = np.asarray(dicts["proj_geom"]["ProjectionAngles"], np.float64)
        turn = np.angle(np.exp(1j * (theirs - np.asarray(angles, np.float64))))
        if np.abs(turn).max() > 1e-6:
            raise ValueError(f"astra: its ProjectionAngles differ from the scan's by up to "
                             f"{np.degrees(np.abs(turn).max()):.3g} degrees")
    return geometry


def write(path, spec):
    """``spec`` as a geometry file (not replacing a file: the caller checks)."""
    Path(path).write_text(json.dumps(spec, indent=2) + "\n")
