#!/usr/bin/env python3
"""The matched pair's forward projection in the data's units (issue 51): a disc of radius
16 voxels and a Gaussian of 8 (value 1 per unit of length), projected onto bins of 0.5,
1 and 2 voxels at 0, 30 and 45 degrees, against their analytic line integrals over the
rays well inside (the disc's chords over 1.2 radii, the Gaussian's integrals over 0.6
of its peak): relative RMS and the largest error of the chord, as tests/test_units.py
checks them, and the central ray over the diameter. Where ASTRA is importable, its 2-D
``parallel`` projectors on the same volume and bins beside pybp's (``FP_CUDA`` where it
has a GPU, else the CPU ``strip`` and ``linear``), with the scale of pybp's projections
over ASTRA's (their sums' ratio).

    python tuning/units_accuracy.py                       # pybp alone (any device)
    source .peers/cuda_libs.sh; .peers/astra/run_astra.sh tuning/units_accuracy.py
"""

from __future__ import annotations


import numpy as np

import pybp

from pybp.phantoms import disc, disc_chords, gaussian, gaussian_integrals

RADIUS = 16  # the disc's radius in voxels, as tests/test_units.py takes it

try:
    import astra
except ImportError:
    astra = None


def astra_projections(volume, geometry):
    """ASTRA's projections of ``volume`` (one slice) in the same geometry: ``{name: sino}``."""
    ny, nx = volume.shape
    vg = astra.create_vol_geom(ny, nx)  # voxels of 1: the geometry's lengths in voxels
    pg = astra.create_proj_geom("parallel", geometry.pitch ** -1, geometry.n_bins,
                                geometry.angles)
    names = ["cuda"] if astra.use_cuda() else ["strip", "linear"]
    out = {}
    for name in names:
        pid = astra.create_projector(name, pg, vg)
        sid, sino = astra.create_sino(volume.astype(np.float32), pid)
        astra.data2d.delete(sid)
        astra.projector.delete(pid)
        out[name] = sino * geometry.voxel_size  # ASTRA's lengths are in voxels
    return out


def scan(voxel_size, iso, degrees=(0, 30, 45), extent=2.6):
    """Bins of ``iso`` voxels (the pixel at the isocentre) over ``extent`` disc radii,
    slices of ``voxel_size`` covering them, at ``degrees``."""
    n_bins = int(np.ceil(extent * RADIUS / iso))
    return pybp.ParallelGeometry(np.array(degrees, float), n_bins, pixel_size=iso * voxel_size,
                                 voxel_size=voxel_size, angle_unit="deg")


def chord_errors(got, want, inner):
    """(relative RMS, largest relative error) of ``got`` over the rays ``inner``."""
    error = (np.asarray(got, np.float64) - want)[:, inner]
    scale = np.broadcast_to(want[:, inner], error.shape)
    return float(np.linalg.norm(error) / np.linalg.norm(scale)), float(np.abs(error / scale).max())


def main():
    print("| voxel | bins of (voxels) | projector | disc: rel RMS | disc: largest "
          "| central ray / 2R | Gaussian: rel RMS | Gaussian: largest | scale pybp / it |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for voxel in (0.5, 2.0):
        for iso in (0.5, 1.0, 2.0):
            g = scan(voxel, iso)
            radius = RADIUS * voxel
            volume = np.stack([disc(g, radius), gaussian(g, radius / 2)]).astype(np.float32)
            chords, integrals = disc_chords(g, radius), gaussian_integrals(g, radius / 2)
            inner, central = chords[0] > 1.2 * radius, int(round(g.center[0]))
            ours = pybp.Projector(g, slices=2).forward(volume)
            rows = [("pybp", ours[:, 0], ours[:, 1])]
            if astra is not None:
                theirs = [astra_projections(volume[k], g) for k in range(2)]
                rows += [(f"ASTRA {name}", theirs[0][name], theirs[1][name]) for name in theirs[0]]
            for name, d, gs in rows:
                d_rms, d_max = chord_errors(d, chords, inner)
                g_rms, g_max = chord_errors(gs, integrals, integrals[0] > 0.6 * integrals.max())
                ray = np.asarray(d)[:, central] / (2 * radius)
                scale = "" if name == "pybp" else f"{ours[:, 0].sum() / np.sum(d):.4f}"
                print(f"| {voxel:g} | {iso:g} | {name} | {d_rms:.2e} | {d_max:.2e} | "
                      f"{ray.min():.4f}-{ray.max():.4f} | {g_rms:.2e} | {g_max:.2e} | {scale} |",
                      flush=True)


if __name__ == "__main__":
    main()
