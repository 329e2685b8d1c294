"""Cone beam in the data's units beside ASTRA (issue 51): pybp's forward projection
against ASTRA's FP3D_CUDA on the same volume, in the ``cone`` and ``cone_vec``
conventions (scale: the ratio of the sums, and the relative RMS); SIRT and CGLS of
ASTRA's projections of a phantom against the phantom, beside ASTRA's SIRT3D_CUDA and
CGLS3D_CUDA; and ASTRA's FP3D, BP3D and SIRT3D times on the standard case.

On the GPU machine, with ../shared/peers copied to .peers (its README):

    source .peers/cuda_libs.sh; .peers/astra/run_astra.sh tuning/cone_units.py
    .peers/astra/run_astra.sh tuning/cone_units.py --methods-only --sirt 100 300 --cgls 30 60
    .peers/astra/run_astra.sh tuning/cone_units.py --projections-only
    .peers/astra/run_astra.sh tuning/cone_units.py --laminography
    .peers/astra/run_astra.sh tuning/cone_units.py --times

``--laminography``: pybp.ParallelVectorGeometry (parallel rays along any direction)
against FP3D_CUDA in ASTRA's ``parallel3d_vec``, and the pair's times beside FP3D and
BP3D on 512^3 from 512 projections of 768 x 768.
"""
import argparse
import statistics
import time

import astra
import cupy as cp
import pyopencl.array as cla
import numpy as np

import pybp


def say(*a):
    print(*a, flush=True)


def timed(fn, reps=3):
    fn()
    cp.cuda.Device().synchronize()
    t = []
    for _ in range(reps):
        s = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        t.append(time.perf_counter() - s)
    return statistics.median(t)


def astra_run(alg, vg, pg, volume, projections, iterations=1):
    """ASTRA's algorithm on linked arrays (host or CuPy): ``(seconds, the array out)``."""
    pid = astra.data3d.link("-proj3d", pg, projections)
    vid = astra.data3d.link("-vol", vg, volume)
    cfg = astra.astra_dict(alg)
    cfg["ProjectionDataId"] = pid
    cfg["VolumeDataId" if alg.startswith("FP") else "ReconstructionDataId"] = vid
    aid = astra.algorithm.create(cfg)
    seconds = timed(lambda: astra.algorithm.run(aid, iterations), reps=1)
    astra.algorithm.delete(aid)
    astra.data3d.delete([pid, vid])
    return seconds


def phantom(n, voxel=1.0, points=2, shape=None, sides=None):
    """Balls and an ellipsoid of attenuations 0.01 to 0.03 per unit, points^3 a voxel, on
    n^3 cubes of ``voxel`` (or a grid of ``shape`` (nz, ny, nx) and voxel ``sides`` (x, y,
    z), the objects in a cube n voxels of 1 across)."""
    o = (np.arange(points) + 0.5) / points - 0.5
    shape = (n, n, n) if shape is None else shape
    sides = (voxel,) * 3 if sides is None else sides
    out = np.zeros(shape, np.float32)
    cz, cy, cx = ((np.arange(m) - (m - 1) / 2) * side for m, side in zip(shape, sides[::-1]))
    for a in o:
        for b in o:
            for d in o:
                z, y, x = np.meshgrid(cz + a * sides[2], cy + b * sides[1], cx + d * sides[0],
                                      indexing="ij")
                r = n * voxel / 2
                for value, middle, axes in OBJECTS:
                    out += value * (((x / r - middle[0]) / axes[0]) ** 2
                                    + ((y / r - middle[1]) / axes[1]) ** 2
                                    + ((z / r - middle[2]) / axes[2]) ** 2 <= 1)
    return out / points ** 3


# the phantom's objects: (value per unit, centre, semi-axes), lengths in units of r, half
# its cube's side
OBJECTS = ((0.01, (0.0, 0.0, 0.0), (0.8, 0.65, 0.7)), (0.02, (0.3, 0.0, -0.1), (0.2,) * 3),
           (-0.005, (-0.25, 0.2, 0.0), (0.15,) * 3))


def phantom_integrals(vectors, shape, r, supersample=3):
    """The phantom's exact line integrals along ASTRA ``cone_vec`` rows, each pixel the
    mean of ``supersample``^2 rays over its area: ASTRA's ``(rows, angles, columns)``."""
    n_rows, n_cols = shape
    o = (np.arange(supersample) + 0.5) / supersample - 0.5
    oc, orow = (a.ravel() for a in np.meshgrid(o, o))
    c = np.arange(n_cols)[None, :, None] - (n_cols - 1) / 2 + oc[None, None, :]
    rr = np.arange(n_rows)[:, None, None] - (n_rows - 1) / 2 + orow[None, None, :]
    out = np.zeros((n_rows, len(vectors), n_cols), np.float32)
    for p, (source, centre, u, v) in enumerate(vectors.reshape(-1, 4, 3)):
        d = centre + c[..., None] * u + rr[..., None] * v - source
        d /= np.linalg.norm(d, axis=-1, keepdims=True)
        total = np.zeros(d.shape[:-1])
        for value, middle, axes in OBJECTS:
            scale = r * np.asarray(axes)
            start = (source - r * np.asarray(middle)) / scale
            direction = d / scale
            qa = (direction ** 2).sum(-1)
            qb = direction @ start
            disc = np.maximum(qb ** 2 - qa * (start @ start - 1), 0)
            total += value * 2 * np.sqrt(disc) / qa
        out[:, p] = total.mean(-1)
    return out


def compare(name, geometry, vg, pg, volume):
    ours = pybp.Projector(geometry).forward(volume)
    theirs = np.zeros((geometry.detector_shape[0], geometry.n_angles, geometry.detector_shape[1]),
                      np.float32)
    astra_run("FP3D_CUDA", vg, pg, volume, theirs)
    theirs = theirs.transpose(1, 0, 2)
    scale = ours.sum(dtype=np.float64) / theirs.sum(dtype=np.float64)
    rms = np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)
    say(f"| {name} | {scale:.4f} | {rms:.2e} |")
    return theirs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods-only", action="store_true",
                        help="only SIRT and CGLS against the phantom")
    parser.add_argument("--sirt", type=int, nargs="+", default=[100], help="iterations")
    parser.add_argument("--cgls", type=int, nargs="+", default=[30], help="iterations")
    parser.add_argument("--projections-only", action="store_true",
                        help="only the forward projections beside FP3D_CUDA")
    parser.add_argument("--laminography", action="store_true",
                        help="only parallel rays along any direction (parallel3d_vec)")
    parser.add_argument("--times", action="store_true",
                        help="only ASTRA's times on the standard case")
    args = parser.parse_args()
    if args.laminography:
        laminography()
        return
    if args.times:
        astra_times()
        return
    if not args.methods_only:
        projections()
    if args.projections_only:
        return
    methods(args.sirt, args.cgls)
    if not args.methods_only:
        astra_times()


def projections():
    say("## pybp's forward projection beside ASTRA's FP3D_CUDA (same volume)")
    say("| case | sum pybp / ASTRA | relative RMS |")
    say("| --- | --- | --- |")
    vg, pg, volume = standard_case()
    g = pybp.ConeGeometry.from_astra(pg, vg)
    compare("cone, 512^3 from 496 x 960 x 1248 (a voxel 2.67 pixels at the isocentre)", g, vg,
            pg, volume)
    # voxels of 0.5 and 2 pixels at the isocentre, and cone_vec with a tilted detector
    small = phantom(128)
    for spacing in (1.6, 0.4):
        a = np.linspace(0, 2 * np.pi, 90, endpoint=False)
        vg2 = astra.create_vol_geom(128, 128, 128)
        pg2 = astra.create_proj_geom("cone", spacing, spacing, int(300 / spacing),
                                     int(360 / spacing), a, 500.0, 300.0)
        g2 = pybp.ConeGeometry.circular(a, (int(300 / spacing), int(360 / spacing)), spacing,
                                        500.0, 300.0, (128,) * 3, 1.0)
        compare(f"cone, 128^3, a voxel {1 / (spacing * 500 / 800):.2f} pixels at the isocentre",
                g2, vg2, pg2, small)
    vectors = astra.geom_2vec(astra.create_proj_geom("cone", 1.0, 1.0, 200, 240, a, 500.0, 300.0))
    vectors = vectors["Vectors"].copy()
    tilt = 0.02
    u, v = vectors[:, 6:9].copy(), vectors[:, 9:12].copy()
    vectors[:, 6:9] = np.cos(tilt) * u + np.sin(tilt) * v
    vectors[:, 9:12] = np.cos(tilt) * v - np.sin(tilt) * u
    pgv = astra.create_proj_geom("cone_vec", 200, 240, vectors)
    gv = pybp.ConeGeometry.from_astra(vectors, (200, 240), (128,) * 3, 1.0)
    compare("cone_vec, 128^3, the detector tilted 0.02 rad", gv, vg2, pgv, small)
    # voxels of other sides: ASTRA's window 128 x 128 x 128 units over 96 x 160 x 86
    # voxels (x, y, z): 1.333 x 0.8 x 1.488
    shape, window = (86, 160, 96), 64.0
    sides = tuple(2 * window / m for m in shape[::-1])
    vgb = astra.create_vol_geom(shape[1], shape[2], shape[0], -window, window, -window, window,
                                -window, window)
    boxes = phantom(128, shape=shape, sides=sides)
    compare(f"cone, voxels of {sides[0]:.3f} x {sides[1]:.3f} x {sides[2]:.3f} (x, y, z)",
            pybp.ConeGeometry.from_astra(pg2, vgb), vgb, pg2, boxes)


def laminography():
    from pybp.geometry.parallel_vectors import laminography_vectors
    say("## pybp.ParallelVectorGeometry beside ASTRA's FP3D_CUDA (parallel3d_vec, same volume)")
    say("| case | sum pybp / ASTRA | relative RMS |")
    say("| --- | --- | --- |")
    small = phantom(128)
    vg = astra.create_vol_geom(128, 128, 128)
    a = np.linspace(0, 2 * np.pi, 90, endpoint=False)
    for tilt, pixel, turn in ((0.0, 1.0, 0.0), (0.35, 1.0, 0.0), (-0.6, 0.5, 0.0),
                              (0.35, 2.0, 0.0), (0.35, 1.0, 0.03)):
        rows = laminography_vectors(a, tilt, (pixel, pixel))
        u, v = rows[:, 6:9].copy(), rows[:, 9:12].copy()
        rows[:, 6:9] = np.cos(turn) * u + np.sin(turn) * v
        rows[:, 9:12] = np.cos(turn) * v - np.sin(turn) * u
        n = int(np.ceil(128 * 1.8 / pixel))
        pg = astra.create_proj_geom("parallel3d_vec", n, n, rows)
        compare(f"tilt {tilt} rad, pixels of {pixel} voxels" + (f", turned {turn} rad" if turn
                                                                 else ""),
                pybp.ParallelVectorGeometry.from_astra(pg, vg), vg, pg, small)
    say("\n## The pair on 512^3 from 512 projections of 768 x 768, tilt 0.35 rad (median of 3)")
    a = np.linspace(0, 2 * np.pi, 512, endpoint=False)
    rows = laminography_vectors(a, 0.35, (1.0, 1.0))
    vg = astra.create_vol_geom(512, 512, 512)
    pg = astra.create_proj_geom("parallel3d_vec", 768, 768, rows)
    g = pybp.ParallelVectorGeometry.from_astra(pg, vg)
    projector = pybp.Projector(g)
    queue = projector.queue
    x = cla.to_device(queue, phantom(512, points=1))
    y = cla.zeros(queue, projector.projection_shape, np.float32)
    ours = []
    for apply in (lambda: projector.pair.forward(x.data, y.data),
                  lambda: projector.pair.backward(y.data, x.data)):
        apply()
        queue.finish()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            apply()
            queue.finish()
            times.append(time.perf_counter() - start)
        ours.append(statistics.median(times))
    V = cp.asarray(phantom(512, points=1))
    P = cp.zeros((768, 512, 768), cp.float32)
    fp = timed(lambda: astra_run("FP3D_CUDA", vg, pg, V, P))
    bp = timed(lambda: astra_run("BP3D_CUDA", vg, pg, V, P))
    say(f"pybp ({projector.pair.method}) A {ours[0]:.4f} s, A^T {ours[1]:.4f} s; "
        f"FP3D_CUDA {fp:.4f} s, BP3D_CUDA {bp:.4f} s")


def methods(sirt_iterations, cgls_iterations):
    say("\n## SIRT and CGLS of ASTRA's projections of a phantom: relative RMS to the phantom")
    say("256^3 from 90 projections of 480 x 624 (pixels of 1, source 500, detector 250)")
    n2 = 256
    a = np.linspace(0, 2 * np.pi, 90, endpoint=False)
    vg3 = astra.create_vol_geom(n2, n2, n2)
    pg3 = astra.create_proj_geom("cone", 1.0, 1.0, 480, 624, a, 500.0, 250.0)
    g3 = pybp.ConeGeometry.circular(a, (480, 624), 1.0, 500.0, 250.0, (n2,) * 3, 1.0)
    truth = phantom(n2)
    data = np.zeros((480, 90, 624), np.float32)
    astra_run("FP3D_CUDA", vg3, pg3, truth, data)
    runs = ([("SIRT3D_CUDA", n) for n in sirt_iterations]
            + [("CGLS3D_CUDA", n) for n in cgls_iterations])
    beside_astra(vg3, pg3, g3, truth, data, runs)
    say("\nThe same of the phantom's exact line integrals (each pixel the mean of 3 x 3 "
        "rays), which favour neither model")
    exact = phantom_integrals(astra.geom_2vec(pg3)["Vectors"], (480, 624), n2 / 2)
    say(f"(ASTRA's FP3D_CUDA of the voxelised phantom against them: relative RMS "
        f"{np.linalg.norm(data - exact) / np.linalg.norm(exact):.2e})")
    beside_astra(vg3, pg3, g3, truth, exact, runs)


def beside_astra(vg, pg, geometry, truth, data, runs):
    """A table of ASTRA's and pybp's SIRT or CGLS (``runs``: ASTRA's algorithm and the
    iterations) of ASTRA's projections ``data`` ``(rows, angles, columns)``: the relative
    RMS of each to ``truth``."""
    ours_data = np.ascontiguousarray(data.transpose(1, 0, 2))
    say("| method | ASTRA | pybp | pybp / ASTRA |")
    say("| --- | --- | --- | --- |")
    for alg, iterations in runs:
        theirs = np.zeros_like(truth)
        astra_run(alg, vg, pg, theirs, data.copy(), iterations)
        method = pybp.sirt if alg.startswith("SIRT") else pybp.cgls
        ours = method(ours_data, geometry, iterations, progress=False)
        e_t = np.linalg.norm(theirs - truth) / np.linalg.norm(truth)
        e_o = np.linalg.norm(ours - truth) / np.linalg.norm(truth)
        say(f"| {alg} x {iterations} | {e_t:.4f} | {e_o:.4f} | {e_o / e_t:.3f} |")


def standard_case():
    """``(vol_geom, proj_geom, phantom)`` of the standard case: 512^3 voxels of 1, 496
    projections of 960 x 1248 pixels of 0.6, source 1500 and detector 900 from the
    axis."""
    angles = np.linspace(0, 2 * np.pi, 496, endpoint=False)
    return (astra.create_vol_geom(512, 512, 512),
            astra.create_proj_geom("cone", 0.6, 0.6, 960, 1248, angles, 1500.0, 900.0),
            phantom(512, points=1))


def astra_times():
    vg, pg, volume = standard_case()
    rows, na, cols = 960, 496, 1248
    say("\n## ASTRA on the standard case, GPU arrays (median of 3)")
    V = cp.asarray(volume)
    P = cp.zeros((rows, na, cols), cp.float32)
    fp = timed(lambda: astra_run("FP3D_CUDA", vg, pg, V, P))
    bp = timed(lambda: astra_run("BP3D_CUDA", vg, pg, V, P))
    Vh, Ph = cp.asnumpy(V), cp.asnumpy(P)
    sirt = timed(lambda: astra_run("SIRT3D_CUDA", vg, pg, Vh, Ph, 10)) / 10
    say(f"FP3D_CUDA {fp:.4f} s, BP3D_CUDA {bp:.4f} s, SIRT3D_CUDA {sirt:.4f} s an iteration "
        f"(10 a run, host arrays)")


if __name__ == "__main__":
    main()
