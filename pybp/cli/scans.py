"""What ``pybp reconstruct`` checks and starts the same way for both geometries, before
any output is made: raw counts taken for normalised data, the devices asked for, and
what ``--scheduler`` needs and starts (a Dask client). pybp/cli/files.py (parallel
beam) and pybp/cli/cone.py (``--geometry``) both call these."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import numpy as np

from pybp import distributed
from pybp.cl.device import default_devices, device_list, select_device
from pybp.cli.preview import write_preview
from pybp.io.writers import output_kind
from pybp.parallel import speed

# Data with no flats and darks whose sampled values are all at least 1 with a median
# above this look like raw counts, not transmissions or line integrals.
RAW_COUNTS_MEDIAN = 100


def say(args, text):
    """A line on standard output, unless ``--quiet``."""
    if not args.quiet:
        print(text, flush=True)


def report(args, todo, total, what, done):
    """The command's last lines: ``todo`` of ``total`` ``what`` made (``done``: what,
    and how fast), or nothing to do; then the preview."""
    if not todo:
        say(args, f"nothing to reconstruct: all {total} {what} are in {args.output}")
    else:
        say(args, f"reconstructed {done} into {args.output} ({output_kind(args.output)}, "
                  f"{args.dtype})")
    if args.preview:
        say(args, f"preview: {write_preview(args.output, args.preview, args.overwrite)}")


def check_counts(args, scan):
    """Refuse raw counts taken for normalised data: with no flats and darks, values
    are taken as transmissions (``-log``) or, with ``--no-log``, line integrals."""
    if scan.flats is not None or args.no_log or args.normalised:
        return
    n_angles, n_rows, _ = scan.shape
    middle = slice(n_rows // 2, n_rows // 2 + 1)  # one frame at a time: every reader takes it
    sample = np.concatenate([np.asarray(scan.projections[i, middle], np.float64).ravel()
                             for i in range(0, n_angles, max(1, n_angles // 16))])
    median = float(np.median(sample))
    if np.all(sample >= 1) and median > RAW_COUNTS_MEDIAN:
        raise ValueError(f"input: {scan.source['projections']} has no flats or darks and its "
                         f"values look like raw counts (all >= 1, median {median:.6g}); give "
                         "--flats and --darks, or --normalised if they are flat-field "
                         "corrected transmissions (-log is taken), or --no-log if they are "
                         "line integrals")


def check_cluster(args):
    """Before any work: what ``--scheduler`` needs (Dask, a folder of TIFF slices)."""
    if not args.scheduler:
        return
    if output_kind(args.output) != "tiff":
        raise ValueError(f"output: with --scheduler, workers write slices in parallel to a "
                         f"folder of TIFF files; {args.output} is one file: give a folder name")
    distributed.need_dask()


def cluster(args):
    """A Dask client for ``--scheduler`` (None without it): ``local`` starts a cluster of
    one worker process per device of ``--devices`` (default: those ``PYBP_DEVICES`` or
    ``PYBP_DEVICE`` name, else all)."""
    if not args.scheduler:
        return None
    dask = distributed.need_dask()
    if args.scheduler == "local":
        return dask.Client(distributed.local_cluster(args.devices or default_devices(),
                                                     processes=True))
    try:
        refused(args.scheduler)
        return dask.Client(args.scheduler, timeout=30)
    except (OSError, TimeoutError, ValueError) as exc:
        raise OSError(f"scheduler: cannot reach {args.scheduler}: {exc}") from None


def refused(address):
    """``ConnectionRefusedError`` at once where nothing listens at a ``tcp://`` scheduler's
    port (Dask's client would try again and again for its 30 s); any other address, or
    a host that does not answer within 2 s, is left to Dask."""
    parts = urlsplit(address if "://" in address else "tcp://" + address)
    try:
        port = parts.port
    except ValueError:
        return  # Dask says what is wrong with it
    if parts.scheme != "tcp" or not parts.hostname or port is None:
        return
    try:
        socket.create_connection((parts.hostname, port), timeout=2).close()
    except ConnectionRefusedError:
        raise ConnectionRefusedError(f"nothing listens at port {port} of "
                                     f"{parts.hostname}") from None
    except OSError:
        return


def close_cluster(args, client):
    """Close ``client`` and the local cluster :func:`cluster` started for it."""
    if client is None:
        return
    started = client.cluster if args.scheduler == "local" else None
    client.close()
    if started is not None:
        started.close()


def devices(args) -> list:
    """The devices asked for (``--devices``, else ``--device``, else the fastest), found
    and able to build kernels, before any file is made; none with ``--scheduler`` (the
    workers choose theirs)."""
    if args.scheduler:
        return []
    if args.device is None and not args.devices:
        speed.choose_cpu_runtime()  # where several CPU runtimes work: the fastest here
    if args.devices:
        found = device_list(args.devices)
        say(args, f"devices: {len(found)} ({', '.join(d.name for d in found)})")
        return found
    return [select_device(args.device)]
