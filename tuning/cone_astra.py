"""Issue 69's cases of the cone-beam pair, pybp beside ASTRA: the standard cone case
(512^3 from 496 projections of 960 x 1248, a voxel 2.67 pixels wide at the isocentre),
the same at voxels of 1 and 0.5 pixels, and laminography (512^3 from 512 x 768 x 768,
the rays 30 degrees from a right angle to the axis): A and A^T on the device, and a SIRT
iteration. Two processes, pybp's first, on the GPU machine with ../shared/peers copied
to .peers:

  PYBP_DEVICE=NVIDIA python tuning/cone_astra.py pybp
  source .peers/cuda_libs.sh; .peers/astra/run_astra.sh tuning/cone_astra.py astra

pybp's half is ``pybp bench --iterative --cone [--pitch P | --laminography]`` of each
case. ASTRA's half times FP3D_CUDA and BP3D_CUDA on linked CuPy arrays and SIRT3D_CUDA
(4 iterations a run, host arrays) as ../shared/peers/astra_iter.py does (its timed()
and run3d(), copied: on the standard case within 0.04%, 1% and 8.5% of its figures in
the same call; its CGLS3D_CUDA, amortised over 4 iterations, was 20% off, so it is not
timed), on pybp's scan at twice its lengths (the distances and pixels of astra_iter.py,
voxels of 0.375 pitch). ``--size N`` scales the volume, the projections and the
detector by N / 512 (the voxels' pitch kept).
"""
import argparse, statistics, time
import numpy as np

parser = argparse.ArgumentParser(description="the cone pair's cases: pybp beside ASTRA")
parser.add_argument("side", choices=("pybp", "astra"))
parser.add_argument("--size", type=int, default=512)
args = parser.parse_args()
N = args.size
PITCHES = (8 / 3, 1.0, 0.5)
N_ANGLES, DETECTOR = round(496 * N / 512), (round(960 * N / 512), round(1248 * N / 512))
LAMINO_ANGLES, LAMINO_DETECTOR = round(512 * N / 512), (round(768 * N / 512),) * 2

if args.side == "pybp":
    from pybp.bench import iterative
    from pybp.tune import cone
    scans = [(f"cone, pitch {p:.3g}", cone.geometry(N, N_ANGLES, DETECTOR, pitch=p))
             for p in PITCHES]
    scans.append(("laminography", cone.laminography(N, LAMINO_ANGLES, LAMINO_DETECTOR)))
    for name, geometry in scans:
        print(f"== {name}", flush=True)
        iterative.run(geometry, None, repeats=3, iterations=3)
    raise SystemExit

import astra
import cupy as cp

def sync(): cp.cuda.Device().synchronize()

def timed(fn, reps=2):
    fn(); sync()
    t = []
    for _ in range(reps):
        s = time.perf_counter(); fn(); sync(); t.append(time.perf_counter() - s)
    return statistics.median(t), min(t), max(t)

def run3d(alg, vg, pg, V, P, iters=1):
    pid = astra.data3d.link("-proj3d", pg, P); vid = astra.data3d.link("-vol", vg, V)
    cfg = astra.astra_dict(alg)
    cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = pid, vid
    if alg.startswith("FP"): cfg = astra.astra_dict(alg); cfg["ProjectionDataId"], cfg["VolumeDataId"] = pid, vid
    aid = astra.algorithm.create(cfg)
    r = timed(lambda: astra.algorithm.run(aid, iters))
    astra.algorithm.delete(aid); astra.data3d.delete([pid, vid])
    return r

def case(name, vg, pg, vshape, pshape):
    rng = np.random.default_rng(1)
    V = cp.asarray(rng.random(vshape, np.float32)); P = cp.asarray(rng.random(pshape, np.float32))
    fp, bp = (run3d(alg, vg, pg, V, P)[0] for alg in ("FP3D_CUDA", "BP3D_CUDA"))
    sirt = run3d("SIRT3D_CUDA", vg, pg, cp.asnumpy(V), cp.asnumpy(P), iters=4)[0] / 4
    print(f"| {name} | {fp:.4f} | {bp:.4f} | {sirt:.4f} |", flush=True)
    del V, P; cp.get_default_memory_pool().free_all_blocks()

def laminography_vectors(angles, tilt):
    """pybp.geometry.parallel_vectors.laminography_vectors of pixels of 1, copied."""
    s, c, zero = np.sin(angles), np.cos(angles), np.zeros_like(angles)
    ct, st = np.cos(tilt), np.sin(tilt)
    ray = np.stack([s * ct, -c * ct, zero + st], 1)
    u = np.stack([c, s, zero], 1)
    v = np.stack([-s * st, c * st, zero + ct], 1)
    return np.concatenate([ray, 0 * u, u, v], 1)

print("| case | FP3D_CUDA s | BP3D_CUDA s | SIRT3D_CUDA s an iteration |")
print("| --- | --- | --- | --- |")
angles = np.linspace(0, 2 * np.pi, N_ANGLES, endpoint=False)
pg = astra.create_proj_geom("cone", 0.6, 0.6, *DETECTOR, angles, 1500.0, 900.0)
for pitch in PITCHES:
    h = N * 0.375 * pitch / 2
    vg = astra.create_vol_geom(N, N, N, -h, h, -h, h, -h, h)
    case(f"cone, pitch {pitch:.3g}", vg, pg, (N,) * 3, (DETECTOR[0], N_ANGLES, DETECTOR[1]))
vectors = laminography_vectors(np.linspace(0, 2 * np.pi, LAMINO_ANGLES, endpoint=False),
                               np.radians(30.0))
pg = astra.create_proj_geom("parallel3d_vec", *LAMINO_DETECTOR, vectors)
case("laminography", astra.create_vol_geom(N, N, N), pg, (N,) * 3,
     (LAMINO_DETECTOR[0], LAMINO_ANGLES, LAMINO_DETECTOR[1]))
