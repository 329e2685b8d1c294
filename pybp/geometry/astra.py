"""ASTRA's geometry dicts read (``astra.create_vol_geom``, ``astra.create_proj_geom``,
``astra.geom_2vec``): the volume's grid and window, a projection geometry's fields and
its vector rows. :class:`pybp.ConeGeometry` and :class:`pybp.ParallelGeometry` make
themselves from what this module reads; nothing here imports ASTRA.

ASTRA's volumes (the conventions pybp's geometries meet): a 2-D volume ``(rows,
columns)`` has x along the columns and y *down* its rows (row 0 at ``WindowMaxY``); a
3-D volume ``(slices, rows, columns)`` has x, y and z growing with the column, row and
slice (row 0 at ``WindowMinY``). A window's default is the grid centred on the origin
with voxels of 1.
"""

from __future__ import annotations

import numpy as np

from pybp.geometry.angles import in_radians

GRID_KEYS = {2: ("GridRowCount", "GridColCount"),
             3: ("GridSliceCount", "GridRowCount", "GridColCount")}


def volume_window(vol_geom, dims: int):
    """``(shape, sizes, centre)`` of ASTRA's ``dims``-D volume geometry: its grid
    (``(nz,) ny, nx``), each voxel's side along x, y (, z) and the window's centre
    (x, y (, z)), or an error naming ``vol_geom``."""
    keys = GRID_KEYS[dims]
    if (not isinstance(vol_geom, dict) or not set(keys) <= set(vol_geom)
            or (dims == 2 and "GridSliceCount" in vol_geom)):
        made = "rows, columns" + (", slices" if dims == 3 else "")
        raise ValueError(f"vol_geom: expected ASTRA's {dims}-D volume geometry "
                         f"(astra.create_vol_geom({made})) with the proj_geom")
    shape = tuple(count(vol_geom, key, "vol_geom") for key in keys)
    window = vol_geom.get("option", {})
    sizes, centre = [], []
    for axis, n in zip("XYZ", shape[::-1]):
        low = float(window.get(f"WindowMin{axis}", -n / 2))
        high = float(window.get(f"WindowMax{axis}", n / 2))
        if not high > low:
            raise ValueError(f"vol_geom: WindowMax{axis} {high:g} is not above "
                             f"WindowMin{axis} {low:g}")
        sizes.append((high - low) / n)
        centre.append((high + low) / 2)
    return shape, np.array(sizes), np.array(centre)


def voxel_size(sides):
    """A 3-D window's voxel as a ``voxel_size``: a cube's side where the sides are equal to
    the rounding the window's arithmetic makes, else the sides ``(x, y, z)``."""
    if np.allclose(sides, sides[0], rtol=1e-12, atol=0):
        return float(sides[0])
    return tuple(float(side) for side in sides)


def field(proj_geom, key):
    """``proj_geom[key]``, or an error naming the geometry's type and the key."""
    try:
        return proj_geom[key]
    except KeyError:
        raise ValueError(f"proj_geom: ASTRA's {proj_geom.get('type')!r} geometry lacks "
                         f"{key!r}") from None


def count(geom, key, name="proj_geom") -> int:
    """``geom[key]``, a count of pixels or voxels: a positive whole number (30.7 is
    not 30), or an error naming it."""
    value = field(geom, key)
    number = float(value) if isinstance(value, (int, float, np.integer, np.floating)) else 0.0
    if isinstance(value, (bool, np.bool_)) or not (1 <= number < 2 ** 31 and
                                                   number == int(number)):
        raise ValueError(f"{name}: {key}: expected a positive whole number, got {value!r}")
    return int(number)


def angles(proj_geom, angle_unit=None) -> np.ndarray:
    """A ``cone``, ``parallel`` or ``parallel3d`` geometry's ``ProjectionAngles`` as
    radians, by pybp's one rule (:func:`pybp.geometry.angles.in_radians`): ASTRA's are
    radians, and a span of more than one turn is refused as degrees unless
    ``angle_unit`` says (``"deg"`` converts them, ``"rad"`` takes several turns)."""
    return in_radians(np.ravel(field(proj_geom, "ProjectionAngles")), angle_unit,
                      "proj_geom: ProjectionAngles")


def kind(proj_geom) -> str | None:
    """The ``type`` of an ASTRA projection geometry dict (None for anything else)."""
    return proj_geom.get("type") if isinstance(proj_geom, dict) else None


def parallel_vectors(proj_geom, angle_unit=None):
    """``(rows (n_angles, 12): ray, d, u, v, n_rows, n_bins)`` of ASTRA's ``parallel``,
    ``parallel_vec``, ``parallel3d`` or ``parallel3d_vec``, as ``astra.geom_2vec``
    writes them (2-D rows in the plane z = 0, ``v`` a unit step up, one row); the
    angles as :func:`angles` takes them."""
    name = kind(proj_geom)
    if name in ("parallel", "parallel_vec"):
        n_rows, n_bins = 1, count(proj_geom, "DetectorCount")
        if name == "parallel":
            t = angles(proj_geom, angle_unit)
            flat = _rows_2d(np.stack([np.sin(t), -np.cos(t), 0 * t, 0 * t,
                                      np.cos(t), np.sin(t)], 1))
            flat[:, 6:8] *= float(field(proj_geom, "DetectorWidth"))
            return flat, n_rows, n_bins
        return _rows_2d(_table(field(proj_geom, "Vectors"), 6)), n_rows, n_bins
    n_rows = count(proj_geom, "DetectorRowCount")
    n_bins = count(proj_geom, "DetectorColCount")
    if name == "parallel3d":
        t = angles(proj_geom, angle_unit)
        zero, one = 0 * t, 0 * t + 1
        rows = np.stack([np.sin(t), -np.cos(t), zero, zero, zero, zero,
                         np.cos(t), np.sin(t), zero, zero, zero, one], 1)
        rows[:, 6:9] *= float(field(proj_geom, "DetectorSpacingX"))
        rows[:, 9:12] *= float(field(proj_geom, "DetectorSpacingY"))
        return rows, n_rows, n_bins
    return _table(field(proj_geom, "Vectors"), 12), n_rows, n_bins


def _table(vectors, width):
    """ASTRA's ``Vectors``: ``(n_angles, width)`` numbers, or an error naming them."""
    table = np.asarray(vectors, np.float64)
    if table.ndim != 2 or table.shape[1] != width or len(table) == 0:
        raise ValueError(f"proj_geom: Vectors: expected (n_angles, {width}) rows, got shape "
                         f"{table.shape}")
    if not np.isfinite(table).all():
        raise ValueError("proj_geom: Vectors: contain NaN or Inf")
    return table


def _rows_2d(rows):
    """2-D ``(ray, d, u)`` rows as 3-D ``(ray, d, u, v)`` in the plane z = 0."""
    zero = np.zeros(len(rows))
    return np.stack([rows[:, 0], rows[:, 1], zero, rows[:, 2], rows[:, 3], zero,
                     rows[:, 4], rows[:, 5], zero, zero, zero, zero + 1], 1)
