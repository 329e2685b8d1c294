"""Where cone beam's slabs spend their time (docs/design.md, section 8, "What holds the
slabs"): a kept ConeBackprojector, float32 projections in host memory, in one piece and
under a memory limit of a quarter of the volume; then the quarter's fill and slabs apart,
the slabs' passes and ends, their window uploads alone, a linear DMA, and the kernels
alone; last, the passes' timeline from their events (the kernels' share of the span,
the gaps between them, how long after its upload each kernel is enqueued) and the
host's seconds in the executor's upload and compute calls. Each figure the median of 5
after a warm-up.

    PYBP_DEVICE=NVIDIA python tuning/slab_parts.py [SIZE PROJECTIONS IMAGES COLUMNS]

(default 512 496 960 1248, the standard case; ``MAX_SLEEP=1e-4`` sets the event polls'
longest sleep). It reads the back-projector's fill and recipe, as no public call
splits a run in its phases.
"""
import statistics, sys, threading, time
import numpy as np
import pyopencl as cl
from pybp.api.cone import ConeBackprojector
from pybp.cl.device import open_device
from pybp.cone import run
from pybp.tune.cone import geometry
from pybp.bench.cone import projections

import os
if "--help" in sys.argv or "-h" in sys.argv:
    sys.exit(print(__doc__))
if os.environ.get("MAX_SLEEP"):
    from pybp.cl import pacing
    pacing.MAX_SLEEP = float(os.environ["MAX_SLEEP"])
g = geometry(512, 496, (960, 1248)) if len(sys.argv) < 2 else geometry(int(sys.argv[1]), int(sys.argv[2]), (int(sys.argv[3]), int(sys.argv[4])))
print(g, flush=True)
dev, ctx, _ = open_device(None)
q = cl.CommandQueue(ctx)
data = projections(g, np.float32)
out = np.zeros(g.volume_shape, np.float32)

def med(fn, n=5):
    fn(); t = []
    for _ in range(n):
        s = time.perf_counter(); fn(); t.append(time.perf_counter() - s)
    return statistics.median(t), min(t)

whole = ConeBackprojector(g, filter="ramp", progress=False)
print("params", whole.params, flush=True)
print("one piece: %.4f (min %.4f)" % med(lambda: whole(data, out)), flush=True)
ref = out.copy()
limit = 4 * int(np.prod(g.volume_shape)) // 4
bp = ConeBackprojector(g, whole.params, filter="ramp", memory_limit=limit, progress=False)
print("quarter: slabs", len(bp.plan.slabs), "planes", [s.n_planes for s in bp.plan.slabs], "stride", bp.plan.row_stride, flush=True)
print("quarter: %.4f (min %.4f)" % med(lambda: bp(data, out)), flush=True)
print("same bits:", np.array_equal(out, ref), flush=True)
fill, recipe = bp._fill, bp._recipe
print("fill memory chunk", fill.memory().chunk_slices, flush=True)
def fill_only():
    for r in (recipe,):
        r.executor.release_memory()
    fill.run(data, None, threading.Event())
print("fill alone: %.4f (min %.4f)" % med(fill_only), flush=True)
def slabs_only():
    run.slabs_of([recipe], fill.store, out, False, fill.store.first_row)
print("slabs from the store: %.4f (min %.4f)" % med(slabs_only), flush=True)
print("store GB %.2f, windows rows total %d vs detector %d" % (fill.store_bytes / 1e9,
      sum(sum(w[1] for w in s.windows) for s in bp.plan.slabs), sum(w[1] for w in fill.windows)), flush=True)
# kernel-only: back-projection events over the first slab
pq = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
for r, name in ((whole._recipe, "one piece"), (recipe, "first slab")):
    ev = r.kernel_events(np.ones((min(r.params.projections_per_pass, g.n_angles), r.plan.row_stride, g.detector_shape[1]), np.float32))
    ks = sum((e.profile.end - e.profile.start) * 1e-9 for e in ev)
    print(f"kernels of {name} (all passes): {ks:.4f} s", flush=True)
# DMA alone: every slab's windows from the store, as the slabs upload them
store = fill.store
buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, recipe.plan.pass_bytes(g.detector_shape[1], recipe.params.projections_per_pass))
uq = cl.CommandQueue(ctx)
def uploads():
    for slab in recipe.plan.slabs:
        for (first, count), (row, n) in zip(recipe.plan.passes, slab.windows):
            r0 = row - store.first_row
            store.dma_upload(uq, buf, first, count, slice(r0, r0 + n))
    uq.finish()
print("all slabs' uploads alone: %.4f (min %.4f)" % med(uploads, 3), flush=True)
total = sum(sum(n for _, n in s.windows) for s in recipe.plan.slabs) * recipe.params.projections_per_pass * g.detector_shape[1] * 4
print("bytes %.2f GB" % (total / 1e9), flush=True)
linear_bytes = min(1 << 30, store.array.nbytes)
big = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, linear_bytes)
def linear():
    cl.enqueue_copy(uq, big, store.array.reshape(-1)[: linear_bytes // 4], is_blocking=False); uq.finish()
t = med(linear, 3)[0]
print("one linear DMA of %.2f GiB from the store: %.4f s, %.1f GB/s" % (linear_bytes / 2**30, t, linear_bytes / t / 1e9), flush=True)
# per-slab: end-to-end of one slab through the stream
from pybp.stream.slabs import Parts, accumulate
from pybp.cone.backproject import SlabRun
def one_slab():
    stop = threading.Event()
    accumulate([SlabRun(recipe, store, out, store.first_row, 1)], Parts(recipe.plan.slabs[:1], stop), None, stop)
print("one slab through the stream: %.4f (min %.4f)" % med(one_slab, 5), flush=True)
# each slab's parts: its passes (the stream) and its end (read back, copied into out)
import pybp.stream.pipeline as pl
spent = {"stream": 0.0, "end": 0.0}
orig_stream, orig_end = pl.stream, SlabRun.end
def timed_stream(*a, **k):
    s = time.perf_counter(); r = orig_stream(*a, **k); spent["stream"] += time.perf_counter() - s; return r
def timed_end(self, *a, **k):
    s = time.perf_counter(); r = orig_end(self, *a, **k); spent["end"] += time.perf_counter() - s; return r
pl.stream, SlabRun.end = timed_stream, timed_end
slabs_only(); spent.update(stream=0.0, end=0.0)
slabs_only()
print("slabs from the store, split: passes %.4f, ends %.4f" % (spent["stream"], spent["end"]), flush=True)
pl.stream, SlabRun.end = orig_stream, orig_end
# the passes' timeline, from their events' device timestamps: the kernels' share of the
# span, the gaps between kernels, and how long after its upload ends each pass's kernel
# is enqueued (the host's part); then the host's seconds in the executor's two calls
from pybp.stream.executor import Executor
from pybp.cone.backproject import SlabBackproject
events = {"upload": [], "kernel": []}
host = {"upload": 0.0, "compute": 0.0}
orig_upload, orig_compute, orig_launch = Executor.upload, Executor.compute, SlabBackproject.launch
def upload(self, *a, **k):
    s = time.perf_counter(); r = orig_upload(self, *a, **k); host["upload"] += time.perf_counter() - s
    events["upload"].append(r[1][0][1]); return r
def compute(self, *a, **k):
    s = time.perf_counter(); r = orig_compute(self, *a, **k); host["compute"] += time.perf_counter() - s
    return r
def launch(self, *a, **k):
    r = orig_launch(self, *a, **k); events["kernel"].append(r[-1][1]); return r
Executor.upload, Executor.compute, SlabBackproject.launch = upload, compute, launch
try:
    slabs_only()
finally:
    Executor.upload, Executor.compute, SlabBackproject.launch = orig_upload, orig_compute, orig_launch
ups = [(e.profile.queued, e.profile.start, e.profile.end) for e in events["upload"]]
ks = [(e.profile.queued, e.profile.start, e.profile.end) for e in events["kernel"]]
span = (ks[-1][2] - ups[0][1]) * 1e-9
busy = sum(e - s for _, s, e in ks) * 1e-9
gaps = [(ks[i][1] - ks[i - 1][2]) * 1e-9 for i in range(1, len(ks))]
late = [(k[0] - u[2]) * 1e-6 for k, u in zip(ks, ups)] if len(ks) == len(ups) else []
print("passes %d: span %.4f s, kernels %.4f s (%.0f%%), gaps between kernels %.4f s; "
      "a kernel enqueued %.3f ms (median) after its upload ended; host in upload %.4f s, "
      "in compute %.4f s" % (len(ks), span, busy, 100 * busy / span, sum(gaps),
                             statistics.median(late) if late else float("nan"),
                             host["upload"], host["compute"]), flush=True)
