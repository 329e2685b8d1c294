"""Fan beam on the GPU: pybp beside ASTRA's fanflat CUDA algorithms (FBP_CUDA, SIRT_CUDA,
FP_CUDA, BP_CUDA), 1024^2 from 1440 projections over 2 pi of 2048 pixels of 1.0, source
1000 and detector 500 from the origin, a disc of 0.02 per unit. Two processes, pybp's
first (ASTRA's CUDA libraries stay out of its environment), on the GPU machine with
../shared/peers copied to .peers:

  PYBP_DEVICE=NVIDIA python tuning/fan_astra.py pybp
  source .peers/cuda_libs.sh; .peers/astra/run_astra.sh tuning/fan_astra.py astra

``--size N`` scales the case (N^2 from 1.40625 N projections of 2 N pixels, the distances
and the disc by N / 1024); ``--folder`` holds pybp's volumes for ASTRA's half (default
/tmp).
"""
import argparse, os, statistics, time
import numpy as np
import pybp

parser = argparse.ArgumentParser(description="fan beam: pybp beside ASTRA's fanflat")
parser.add_argument("side", choices=("pybp", "astra"))
parser.add_argument("--size", type=int, default=1024)
parser.add_argument("--folder", default="/tmp")
args = parser.parse_args()
N, D, A = args.size, 2 * args.size, round(1.40625 * args.size)
k = args.size / 1024
angles = np.linspace(0, 2 * np.pi, A, endpoint=False)
g = pybp.FanGeometry.circular(angles, D, 1.0, 1000.0 * k, 500.0 * k, N, 1.0)
print(g, flush=True)

def timed(fn, reps=5):
    fn()
    t = []
    for _ in range(reps):
        s = time.perf_counter(); fn(); t.append(time.perf_counter() - s)
    return statistics.median(t), min(t), max(t)

src, d, u = g.vectors[:, None, 0:2], g.vectors[:, None, 2:4], g.vectors[:, None, 4:6]
pix = d + (np.arange(D) - (D - 1) / 2)[None, :, None] * u
ray = pix - src; ray /= np.linalg.norm(ray, axis=-1, keepdims=True)
c = np.array([30.0, -20.0]) * k; r = 300.0 * k
w = c - src; along = (w * ray).sum(-1); miss = (w ** 2).sum(-1) - along ** 2
sino = (0.02 * 2 * np.sqrt(np.maximum(r * r - miss, 0))).astype(np.float32)
rows, cols = np.mgrid[:N, :N]; x = cols - (N - 1) / 2; y = (N - 1) / 2 - rows
dist = np.hypot(x - c[0], y - c[1])

saved = [os.path.join(args.folder, f"fan_{name}.npy") for name in ("rec", "sirt")]
if args.side == "pybp":
    import pyopencl.array as cla
    rec = pybp.reconstruct(sino, g, log=False, progress=False)
    print(f"pybp FBP: disc middle {rec[dist < 0.7 * r].mean():.6f} (0.02), outside {np.abs(rec[dist > 1.3 * r]).mean():.2e}")
    m, lo, hi = timed(lambda: pybp.reconstruct(sino, g, log=False, progress=False))
    print(f"pybp FBP host to host: {m:.4f} s ({lo:.4f}-{hi:.4f})")
    P = pybp.Projector(g)
    xv = cla.to_device(P.queue, np.ones((N, N), np.float32)); yv = cla.to_device(P.queue, sino)
    def fwd(): P.forward(xv); P.queue.finish()
    def bwd(): P.backward(yv); P.queue.finish()
    for name, fn in (("A", fwd), ("A^T", bwd)):
        m, lo, hi = timed(fn)
        print(f"pybp {name} on the device: {m:.4f} s ({lo:.4f}-{hi:.4f}), {N * N * A / m * 1e-9:.1f} G updates/s")
    m, lo, hi = timed(lambda: pybp.sirt(sino, g, 10, progress=False), reps=3)
    print(f"pybp SIRT x 10 host to host: {m:.4f} s ({m / 10:.4f} an iteration)")
    ours_sirt = pybp.sirt(sino, g, 10, progress=False)
    np.save(saved[0], rec); np.save(saved[1], ours_sirt)
    print("device:", P.device.name, flush=True)
else:
    import astra
    rec, ours_sirt = np.load(saved[0]), np.load(saved[1])
    pg = astra.create_proj_geom("fanflat", 1.0, D, angles, 1000.0 * k, 500.0 * k)
    vg = astra.create_vol_geom(N, N)
    def astra_alg(name, iterations=1, out=False):
        sid = astra.data2d.create("-sino", pg, sino); rid = astra.data2d.create("-vol", vg)
        cfg = astra.astra_dict(name); cfg["ProjectionDataId"] = sid; cfg["ReconstructionDataId"] = rid
        aid = astra.algorithm.create(cfg); astra.algorithm.run(aid, iterations)
        result = astra.data2d.get(rid) if out else None
        astra.algorithm.delete(aid); astra.data2d.delete([sid, rid])
        return result
    theirs = astra_alg("FBP_CUDA", out=True)
    print(f"ASTRA FBP_CUDA: disc middle {theirs[dist < 0.7 * r].mean():.6f}; pybp vs ASTRA rel RMS {np.linalg.norm(rec - theirs) / np.linalg.norm(theirs):.2e}")
    m, lo, hi = timed(lambda: astra_alg("FBP_CUDA"))
    print(f"ASTRA FBP_CUDA host to host (data2d create, run, get): {m:.4f} s ({lo:.4f}-{hi:.4f})")
    m, lo, hi = timed(lambda: astra_alg("SIRT_CUDA", 10), reps=3)
    print(f"ASTRA SIRT_CUDA x 10 host to host: {m:.4f} s ({m / 10:.4f} an iteration)")
    theirs_sirt = astra_alg("SIRT_CUDA", 10, out=True)
    print(f"SIRT x 10 pybp vs ASTRA rel RMS {np.linalg.norm(ours_sirt - theirs_sirt) / np.linalg.norm(theirs_sirt):.2e}")
    for name in ("FP_CUDA", "BP_CUDA"):
        def run(name=name):
            vid = astra.data2d.create("-vol", vg, 1.0); sid = astra.data2d.create("-sino", pg, sino)
            cfg = astra.astra_dict(name)
            if name == "FP_CUDA": cfg["VolumeDataId"], cfg["ProjectionDataId"] = vid, sid
            else: cfg["ReconstructionDataId"], cfg["ProjectionDataId"] = vid, sid
            aid = astra.algorithm.create(cfg); s = time.perf_counter(); astra.algorithm.run(aid); t = time.perf_counter() - s
            astra.algorithm.delete(aid); astra.data2d.delete([vid, sid]); return t
        run(); ts = [run() for _ in range(5)]
        print(f"ASTRA {name} (algorithm run only, host data): {statistics.median(ts):.4f} s")
