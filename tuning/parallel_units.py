"""Parallel beam in the data's units beside ASTRA (issue 51): pybp's forward projection
of ``ParallelGeometry.from_astra(proj_geom, vol_geom)`` against ASTRA's FP3D_CUDA on the
same volume, in the ``parallel3d`` and ``parallel3d_vec`` conventions (scale: the ratio
of the sums, and the relative RMS), with detector columns of 0.5, 1 and 2 voxels, a
window off the origin and a shifted detector; then SIRT and CGLS of ASTRA's projections
of a phantom against the phantom, beside ASTRA's SIRT3D_CUDA and CGLS3D_CUDA.

On the GPU machine, with ../shared/peers copied to .peers (its README):

    source .peers/cuda_libs.sh; .peers/astra/run_astra.sh tuning/parallel_units.py
"""
import astra
import numpy as np
from cone_units import astra_run, beside_astra, say  # (tuning/: this script's folder)

import pybp


def phantom(nz, n, points=2):
    """An ellipse cylinder with an off-centre ball and a hole, 0.01 to 0.03 per voxel,
    points^2 a voxel across each slice (no symmetry that would hide a mirrored axis)."""
    o = (np.arange(points) + 0.5) / points - 0.5
    c = np.arange(n) - (n - 1) / 2
    z = (np.arange(nz) - (nz - 1) / 2)[:, None, None]
    out = np.zeros((nz, n, n), np.float32)
    r = n / 2
    for a in o:
        for b in o:
            y, x = np.meshgrid(c + a, c + b, indexing="ij")
            out += 0.01 * ((x / (0.8 * r)) ** 2 + (y / (0.6 * r)) ** 2 <= 1)
            ball = (x - 0.35 * r) ** 2 + (y + 0.2 * r) ** 2 + (z * 4) ** 2
            out += 0.02 * (ball <= (0.2 * r) ** 2)
            out -= 0.005 * ((x + 0.3 * r) ** 2 + (y - 0.25 * r) ** 2 <= (0.12 * r) ** 2)
    return out / points ** 2


def compare(name, pg, vg, volume):
    g = pybp.ParallelGeometry.from_astra(pg, vg)
    theirs = np.zeros((pg["DetectorRowCount"], g.n_angles, pg["DetectorColCount"]), np.float32)
    astra_run("FP3D_CUDA", vg, pg, volume, theirs)
    theirs = theirs.transpose(1, 0, 2)
    ours = pybp.Projector(g, slices=len(volume)).forward(volume)
    scale = ours.sum(dtype=np.float64) / theirs.sum(dtype=np.float64)
    rms = np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)
    mirrored = np.linalg.norm(ours[:, :, ::-1] - theirs) / np.linalg.norm(theirs)
    say(f"| {name} | {scale:.4f} | {rms:.2e} | {mirrored:.2f} |")


def main():
    say("## pybp's forward projection beside ASTRA's FP3D_CUDA (same volume)")
    say("ParallelGeometry.from_astra of ASTRA's dicts; 16 slices of 256^2, 180 angles")
    say("| case | sum pybp / ASTRA | relative RMS | mirrored |")
    say("| --- | --- | --- | --- |")
    n, nz = 256, 16
    angles = np.linspace(0, np.pi, 180, endpoint=False)
    volume = phantom(nz, n)
    for spacing in (1.0, 0.5, 2.0):
        vg = astra.create_vol_geom(n, n, nz)
        pg = astra.create_proj_geom("parallel3d", spacing, 1.0, nz, int(1.2 * n / spacing),
                                    angles)
        compare(f"parallel3d, columns of {spacing:g} voxels", pg, vg, volume)
    vg = astra.create_vol_geom(n, n, nz, -n / 2 + 9, n / 2 + 9, -n / 2 - 13, n / 2 - 13,
                               -nz / 2, nz / 2)
    pg = astra.create_proj_geom("parallel3d", 1.0, 1.0, nz, 320, angles)
    compare("parallel3d, the window off the origin (9, -13)", pg, vg, volume)
    pgv = astra.geom_2vec(pg)
    pgv["Vectors"][:, 3:6] += 6.5 * pgv["Vectors"][:, 6:9]
    compare("parallel3d_vec, the same, the detector shifted 6.5 columns", pgv, vg, volume)

    say("\n## SIRT and CGLS of ASTRA's projections of a phantom: relative RMS to the phantom")
    say("16 slices of 256^2 from 90 parallel3d projections of 320 columns of 1")
    vg = astra.create_vol_geom(n, n, nz)
    a = np.linspace(0, np.pi, 90, endpoint=False)
    pg = astra.create_proj_geom("parallel3d", 1.0, 1.0, nz, 320, a)
    g = pybp.ParallelGeometry.from_astra(pg, vg)
    data = np.zeros((nz, 90, 320), np.float32)
    astra_run("FP3D_CUDA", vg, pg, volume, data)
    beside_astra(vg, pg, g, volume, data, (("SIRT3D_CUDA", 100), ("CGLS3D_CUDA", 30)))


if __name__ == "__main__":
    main()
