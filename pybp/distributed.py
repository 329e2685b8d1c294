"""Several devices of a host, and Dask workers, each running a geometry's task on parts
of the output (docs/architecture.md).

On one host, :func:`pybp.cl.device.device_list` names the devices and
:class:`pybp.stream.jobs.Pipelines` runs one pipeline per device from one shared source
of rows. On a cluster, Dask distributed schedules the work (:func:`on_cluster`): the
output is cut into parts (parallel beam's rows, cone beam's runs of planes), one Dask
task per part, each run by the geometry's task (:class:`pybp.parallel.prepare.RowsTask`,
:class:`pybp.cone.run.PlanesTask`: this module imports no geometry) on the worker's own
devices, which may keep what it made between tasks; the worker writes the output itself,
so only small messages go through Dask. A lost worker's parts are run again elsewhere by
Dask, and each slice is written whole (a TIFF file under a temporary name, then
renamed), so a part done twice leaves each slice once. Arrays are shared only with
workers in this process (threads); workers in other processes or on other hosts read the
scan from its files (``scan``: the arguments of :func:`pybp.io.readers.open_scan`) and
write a folder of TIFF slices.

Which devices a worker uses: those :func:`local_cluster` gave it, else the
``PYBP_DEVICES`` variable of its environment (``all``, or indices ``0,1``), else
``PYBP_DEVICE``, else all its GPUs. Dask is an optional dependency:
``pip install distributed`` (pybp's ``dask`` extra).
"""

from __future__ import annotations

import threading
import uuid

from pybp.cl.device import all_devices, default_devices, device_list, keep_ctrl_c
from pybp.io.readers import open_scan
from pybp.stream.progress import Progress

SLABS_PER_WORKER = 4  # tasks per worker: few enough that set-up stays small, enough to balance

_SHARED = {}          # token -> arrays of one run, for workers in this process
_WORKER_LOCK = threading.Lock()


def need_dask():
    try:
        import distributed
    except ImportError:
        raise RuntimeError("clusters need Dask distributed (pybp's dask extra): "
                           "pip install distributed") \
            from None
    return distributed


def local_cluster(devices="all", processes=False, **kwargs):
    """A Dask ``LocalCluster`` with one worker per device (one thread each, resource
    ``GPU=1``); :func:`on_cluster` tells each worker its device.
    ``processes=False`` (default) runs the workers as threads of this process, where
    they share its arrays; ``processes=True`` as processes of their own, which read
    files. Extra ``kwargs`` go to ``LocalCluster``. Use as ``Client(local_cluster())``,
    and close both after."""
    distributed = need_dask()
    chosen = device_list(devices)
    everything = all_devices()
    options = dict(n_workers=len(chosen), threads_per_worker=1, processes=processes,
                   resources={"GPU": 1}, dashboard_address=None)
    cluster = distributed.LocalCluster(**{**options, **kwargs})
    cluster.pybp_devices = {name: everything.index(d)
                            for name, d in zip(sorted(cluster.worker_spec), chosen)}
    return cluster


def _device_plugin(by_name):
    """A Dask worker plugin that tells each worker of a :func:`local_cluster` its device
    (run again on a worker that replaces a lost one)."""
    from distributed import WorkerPlugin

    class DevicePlugin(WorkerPlugin):
        name = "pybp-devices"

        def __init__(self, by_name):
            self.by_name = by_name

        def setup(self, worker):
            if worker.name in self.by_name:
                worker.pybp_devices = [self.by_name[worker.name]]

    return DevicePlugin(by_name)


def _worker_devices(worker):
    """The devices ``worker`` runs on (see the module docstring)."""
    assigned = getattr(worker, "pybp_devices", None)
    return device_list(assigned if assigned is not None else default_devices())


class _Worker:
    """What a geometry's task sees of the Dask worker it runs on: its ``devices``, and
    ``kept(key, make)``, the one thing it keeps between tasks (made by
    ``make(devices)``, and closed for another ``key``: a parallel beam setup's
    pipelines; freed by :func:`release_workers`)."""

    def __init__(self, worker):
        self.worker, self.devices = worker, _worker_devices(worker)

    def kept(self, key, make):
        cached = getattr(self.worker, "pybp_kept", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        if cached is not None:
            self.worker.pybp_kept = None
            cached[1].close()
        made = make(self.devices)
        self.worker.pybp_kept = (key, made)
        return made


def _worker_lock(worker):
    with _WORKER_LOCK:
        lock = getattr(worker, "pybp_lock", None) or threading.Lock()
        worker.pybp_lock = lock
    return lock


def _release(dask_worker, background=False):
    """Close the worker's pipelines (device memory, page-locked staging) once its slab
    in progress, if any, ends; ``background``: on a thread of the worker's, the call
    returning at once."""
    with _worker_lock(dask_worker):
        cached = getattr(dask_worker, "pybp_kept", None)
        dask_worker.pybp_kept = None
        if cached is not None:
            cached[1].close(wait=not background)


def _task_data(source):
    """What a task reads and writes, ``(projections, flats, darks, out, scan)``: arrays
    shared in this process (``scan`` None), or the scan opened from its files (to
    close) and the picklable writer."""
    if source[0] == "shared":
        arrays = _SHARED[source[1]]
        return (*(arrays[k] for k in ("projections", "flats", "darks", "out")), None)
    scan = open_scan(**source[1])
    return scan.projections, scan.flats, scan.darks, source[2], scan


def _run_part(source, task, first, stop):
    """A Dask task: part ``[first, stop)`` of the output by ``task`` on this worker's
    devices, the output written by the worker; returns what it did."""
    from distributed import get_worker

    worker = get_worker()
    with _worker_lock(worker):  # one task at a time uses the worker's devices
        projections, flats, darks, out, scan = _task_data(source)
        try:
            done = task(_Worker(worker), projections, flats, darks, out, first, stop)
        finally:
            if scan is not None:
                scan.close()
    return dict(first=first, stop=stop, worker=worker.name, **done)


def slabs(first, stop, n_workers, align):
    """Row (or plane) ranges of about equal size, ``SLABS_PER_WORKER`` per worker, edges
    at multiples of ``align`` from ``first``."""
    n = stop - first
    count = max(1, min(-(-n // align), SLABS_PER_WORKER * max(1, n_workers)))
    size = -(-(-(-n // count)) // align) * align
    return [(a, min(stop, a + size)) for a in range(first, stop, size)]


def in_process(client) -> bool:
    """Whether every worker of ``client`` is a thread of this process."""
    workers = client.scheduler_info()["workers"]
    return bool(workers) and all(a.startswith("inproc://") for a in workers)


def release_workers(client, background=False):
    """Free the pipelines the workers of ``client`` keep (device memory, page-locked
    staging), each once its slab in progress, if any, ends; ``background``: each on a
    thread of its own, after this returns (unpinning took 0.1 s per device)."""
    client.run(_release, background=background)


def _prepared(client, scan, arrays):
    """The workers of ``client`` waited for and told their devices; the source tasks
    read (``("scan", scan, out)``: the scan's files and ``arrays["out"]``, a picklable
    writer; or ``arrays`` shared in this process under a token) and the resources each
    task takes."""
    need_dask()
    if not client.scheduler_info()["workers"]:
        client.wait_for_workers(1, timeout=60)
    workers = client.scheduler_info()["workers"]
    assigned = getattr(getattr(client, "cluster", None), "pybp_devices", None)
    if assigned:
        client.register_plugin(_device_plugin(assigned))
    token = None
    if scan is None:
        if not in_process(client):
            raise ValueError("client: its workers run in other processes, which cannot see "
                             "this process's arrays; give them files (`pybp reconstruct INPUT "
                             "-o FOLDER --scheduler ADDRESS`), or use workers in this process "
                             "(pybp.distributed.local_cluster())")
        token = uuid.uuid4().hex
        _SHARED[token] = arrays
        source = ("shared", token)
    else:
        source = ("scan", scan, arrays["out"])
    resources = {"GPU": 1} if all("GPU" in w.get("resources", {}) for w in workers.values()) \
        else None
    return source, token, resources, len(workers)


def _gather(client, futures, bar, token, release):
    """The results of ``futures`` as they complete, the progress ``bar`` moved by each
    task's ``stop - first``; Ctrl-C cancels the tasks not started (those running go on
    to their end), any other error all of them and frees the workers' devices."""
    distributed = need_dask()
    done = []
    try:
        keep_ctrl_c()
        for future in distributed.as_completed(futures):
            keep_ctrl_c()  # workers in this process make contexts (Intel's runtime takes it)
            result = future.result()
            done.append(result)
            bar.update(result["stop"] - result["first"])
    except KeyboardInterrupt:  # slabs running go on to their end; the rest are dropped
        client.cancel(futures)
        bar.close()
        raise
    except BaseException:
        client.cancel(futures)
        bar.close()
        release_workers(client)
        raise
    finally:
        if token is not None:
            _SHARED.pop(token, None)
    if release:
        release_workers(client, background=True)
    return sorted(done, key=lambda r: r["first"])


def on_cluster(client, task, first, stop, arrays, scan=None, progress=True, release=True,
               stats=None) -> int:
    """Run ``task`` (a geometry's: :class:`pybp.parallel.prepare.RowsTask`,
    :class:`pybp.cone.run.PlanesTask`) on the workers of ``client``, one Dask task per
    part of ``[first, stop)`` (rows or planes, from multiples of ``task.align``:
    ``SLABS_PER_WORKER`` parts a worker); return how many values normalisation
    replaced. ``arrays``: ``projections``, ``flats``, ``darks`` and ``out``, shared with
    workers in this process; or with ``scan`` (the arguments of ``open_scan``) the
    workers read the projections themselves and ``arrays["out"]`` is a picklable
    writer. ``progress``: a progress line (``task.what``, ``task.rate``); ``release``:
    the workers free what they keep when the last part is done (False: they keep it
    for the next call with the same task, until :func:`release_workers`); ``stats`` (a
    dict) gets each part's result (``slabs``)."""
    source, token, resources, n_workers = _prepared(client, scan, arrays)
    bar = Progress(stop - first, task.updates, progress, what=task.what, rate=task.rate)
    futures = [client.submit(_run_part, source, task, a, b, pure=False, resources=resources,
                             key=f"pybp-{task.what}-{a}-{b}-{uuid.uuid4().hex[:8]}")
               for a, b in slabs(first, stop, n_workers, task.align)]
    done = _gather(client, futures, bar, token, release)
    if stats is not None:
        stats.update(slabs=done)
    return sum(result["clipped"] for result in done)
