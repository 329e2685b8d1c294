"""ASTRA beside pybp: parallel3d 64 x 2048^2 (FP3D, BP3D, SIRT3D, CGLS3D: ../shared/peers/
astra_iter.py's case with fewer repeats), and the agreement of the two on one 256^2
slice of the Shepp-Logan phantom (forward projections, 50 SIRT iterations), the same
geometry numbers given to both.

On the GPU machine, with ../shared/peers copied to .peers (its README):

    source .peers/cuda_libs.sh; .peers/astra/run_astra.sh tuning/astra_iterative.py
"""
import statistics
import time
import numpy as np
import astra
import cupy as cp
import pybp
from pybp import phantoms

def say(*a): print(*a, flush=True)
def sync(): cp.cuda.Device().synchronize()

def timed(fn, reps=2):
    fn(); sync(); t = []
    for _ in range(reps):
        s = time.perf_counter(); fn(); sync(); t.append(time.perf_counter() - s)
    return statistics.median(t), min(t), max(t)

def run3d(alg, vg, pg, V, P, iters=1):
    pid = astra.data3d.link("-proj3d", pg, P); vid = astra.data3d.link("-vol", vg, V)
    cfg = astra.astra_dict(alg)
    if alg.startswith("FP"):
        cfg["ProjectionDataId"], cfg["VolumeDataId"] = pid, vid
    else:
        cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = pid, vid
    aid = astra.algorithm.create(cfg)
    r = timed(lambda: astra.algorithm.run(aid, iters))
    astra.algorithm.delete(aid); astra.data3d.delete([pid, vid])
    return r

S, B, A = 64, 2048, 2048
ang = np.linspace(0, np.pi, A, endpoint=False)
vg = astra.create_vol_geom(B, B, S); pg = astra.create_proj_geom("parallel3d", 1.0, 1.0, S, B, ang)
updates = S * B * B * A
rng = np.random.default_rng(1)
V = cp.asarray(rng.random((S, B, B), np.float32)); P = cp.asarray(rng.random((S, A, B), np.float32))
say("| ASTRA 2.5.0, parallel3d 64 x 2048^2 | s (median) | spread | G updates/s |")
say("| --- | --- | --- | --- |")
for alg in ("FP3D_CUDA", "BP3D_CUDA"):
    m, lo, hi = run3d(alg, vg, pg, V, P)
    say(f"| {alg} | {m:.4f} | {lo:.4f}-{hi:.4f} | {updates / m / 1e9:.0f} |")
Vh, Ph = cp.asnumpy(V), cp.asnumpy(P)
del V, P; cp.get_default_memory_pool().free_all_blocks()
for alg in ("SIRT3D_CUDA", "CGLS3D_CUDA"):
    m, lo, hi = run3d(alg, vg, pg, Vh, Ph, iters=3)
    say(f"| {alg}, 3 iterations per run (host arrays), per iteration | {m / 3:.4f} | "
        f"{lo / 3:.4f}-{hi / 3:.4f} | {2 * updates / (m / 3) / 1e9:.0f} (FP+BP) |")

# Agreement on one slice: the same geometry numbers in both.
n, na = 256, 180
angles = np.linspace(0, np.pi, na, endpoint=False)
g = pybp.ParallelGeometry(angles, n)
image = phantoms.shepp_logan_image(g).astype(np.float32)
sino = phantoms.shepp_logan_radon(g).astype(np.float32)
vg2 = astra.create_vol_geom(n, n); pg2 = astra.create_proj_geom("parallel", 1.0, n, angles)
pid = astra.create_projector("cuda", pg2, vg2)
sid, theirs_fp = astra.create_sino(image, pid); astra.data2d.delete(sid)
ours_fp = pybp.Projector(g).forward(image)
rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))
say(f"forward projection of the 256^2 phantom: pybp against ASTRA FP_CUDA {rel(ours_fp, theirs_fp):.4f} "
    f"relative RMS; pybp against the exact line integrals {rel(ours_fp, sino):.4f}, ASTRA {rel(theirs_fp, sino):.4f}; "
    f"with the detector reversed {rel(ours_fp[:, ::-1], theirs_fp):.4f}")
sid = astra.data2d.create("-sino", pg2, sino); rid = astra.data2d.create("-vol", vg2)
cfg = astra.astra_dict("SIRT_CUDA"); cfg["ProjectionDataId"], cfg["ReconstructionDataId"] = sid, rid
aid = astra.algorithm.create(cfg); astra.algorithm.run(aid, 50); theirs = astra.data2d.get(rid)
astra.algorithm.delete(aid); astra.data2d.delete([sid, rid])
ours = pybp.sirt(sino, g, 50)
say(f"SIRT, 50 iterations, the phantom's exact line integrals: pybp against ASTRA SIRT_CUDA {rel(ours, theirs):.4f}; "
    f"against the phantom pybp {rel(ours, image):.4f}, ASTRA {rel(theirs, image):.4f}")
