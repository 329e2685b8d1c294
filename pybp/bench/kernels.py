"""``pybp bench``: GU/s of every kernel and setting (docs/design.md, section 5).

For each setting it measures, in the same run: the texture engine's ceiling for that
texel format (a kernel that only fetches, one texel per update, in the multiproj
schedule with every fetch next to its neighbours'), each kernel variant (judged by
``pybp.parallel.verify`` on its check case first), and silx's OpenCL ``Backprojection`` as the
yardstick. Kernel time only, median of ``repeats`` runs after a warm-up.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from pybp.cl import codegen
from pybp.cl.device import describe, new_context, select_device
from pybp.cl.images import CHANNEL_ORDERS, CHANNEL_TYPES, usable_image_formats
from pybp.parallel.params import HYBRID_PERIOD, SETTINGS, TextureParams
from pybp.parallel.profiler import architecture, choose_texel
from pybp.api.sinograms import Backprojector
from pybp.parallel import kernels
from pybp.parallel.prepare import check
from pybp.tune.search import gups

VARIANTS = (  # (name, kernel, forced parameters) measured for every setting
    ("standard", "standard", {}),
    ("locality", "locality", {}),
    ("multiproj/constant", "multiproj", dict(constants="constant")),
    ("multiproj/local", "multiproj", dict(constants="local")),
    ("alu", "alu", {}),  # the profile's ALU parameters
    ("alu/plain", "alu", dict(cache="plain")),
    ("alu/native-round", "alu", dict(rounding="native")),
    ("alu/float-round", "alu", dict(rounding="float")),
    ("alu/fixed-round", "alu", dict(rounding="fixed")),
    ("alu/hx", "alu", dict(offset_cache="hx")),
    ("alu/32x32", "alu", dict(square=32, items_per_row=16)),
    ("alu/oversample", "alu", dict(cache="oversample", cached_projections=8)),  # approximate
    ("alu/hybrid-4of8", "alu", dict(texture_groups=4)),
    ("alu/half-cache", "alu", dict(cache="plain", cache_storage="half")),  # half storage only
    ("alu/half-pair", "alu", dict(cache="pair", cache_storage="half")),  # half, linear only
)


def _median_event_seconds(launch, repeats):
    launch().wait()
    times = []
    for _ in range(repeats):
        event = launch()
        event.wait()
        times.append((event.profile.end - event.profile.start) * 1e-9)
    return float(np.median(times))


def texture_ceiling(cl_device, params: TextureParams, size, n_angles, repeats):
    """Fetches per second of the texture engine for ``params``' texel format."""
    context = new_context(cl_device)
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    fmt = cl.ImageFormat(CHANNEL_ORDERS[params.texel_channels], CHANNEL_TYPES[params.storage])
    texels = np.random.default_rng(0).random((n_angles, size, params.texel_channels))
    image = cl.create_image(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, fmt,
                     shape=(size, n_angles), hostbuf=texels.astype(params.texel_dtype))
    out = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, params.slices_per_pass * size * size * 4)
    kernel = codegen.compiled(context, kernels.probe_source(params)).fetch_only
    seconds = _median_event_seconds(
        lambda: kernel(queue, params.global_size((size, size)), params.local_size, image,
                       np.float32(0.0),  # row_slope
                       np.int32(n_angles), np.int32(size), np.int32(size), np.int32(size),
                       np.int32(0),  # accumulate
                       np.int32(0),  # first_plane
                       np.int32(0), np.int32(0),  # first_column, first_row
                       out),
        repeats)
    return size * size * n_angles / seconds


LOCAL_PROBE_ROUNDS = 512  # rounds of the local-memory probe: a few ms on a GPU


def local_ceiling(cl_device, width, repeats, groups=None):
    """Loads per second that local memory serves for loads of ``width`` bytes (4, 8
    or 16; narrower loads count as 4: one load instruction per work-item either way),
    from :func:`pybp.parallel.kernels.local_probe_source`: enough work-groups to fill
    every compute unit many times over."""
    width = max(width, 4)
    context = new_context(cl_device)
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    groups = groups or 64 * cl_device.max_compute_units
    items = kernels.LOCAL_PROBE_ITEMS
    rounds = LOCAL_PROBE_ROUNDS if describe(cl_device).type == "gpu" else 8
    out = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, groups * items * 4)
    kernel = codegen.compiled(context, kernels.local_probe_source(width)).local_loads
    seconds = _median_event_seconds(
        lambda: kernel(queue, (groups * items,), (items,), np.int32(rounds), out), repeats)
    return groups * items * rounds * kernels.LOCAL_PROBE_LOADS / seconds


def local_row_ceiling(params, load_rates):
    """GU/s an ALU parameter set reaches where local-memory loads bound it: the rate
    of its loads' width over its loads per update, times its slices."""
    width, loads = params.local_loads
    return load_rates[max(width, 4)] / loads * params.slices_per_pass * 1e-9


def silx_platform_device(cl_device):
    """silx's (platform id, device id) of ``cl_device``."""
    platforms = cl.get_platforms()
    pid = next(i for i, p in enumerate(platforms) if p.int_ptr == cl_device.platform.int_ptr)
    did = next(i for i, d in enumerate(platforms[pid].get_devices()) if d.int_ptr == cl_device.int_ptr)
    return pid, did


def silx_seconds(cl_device, angles, data, repeats):
    """Kernel time of silx's OpenCL back-projection on the same device, or None."""
    try:
        from silx.opencl.backprojection import Backprojection
    except Exception:  # not installed, or broken
        return None
    pid, did = silx_platform_device(cl_device)
    silx = Backprojection(data.shape, angles=angles, platformid=pid, deviceid=did, profile=True)
    silx._transfer_to_texture(data)
    kernel = silx.kernels.backproj_kernel if silx._use_textures else silx.kernels.backproj_cpu_kernel
    return _median_event_seconds(
        lambda: kernel(silx.queue, silx.ndrange, silx.wg, *silx._backproj_kernel_args), repeats)


def run(device=None, size=2048, n_angles=None, repeats=5, settings=SETTINGS, variants=VARIANTS,
        with_silx=True, log=print):
    """Measure; return the rows of the table (dicts) and print them as they come."""
    n_angles = n_angles or size
    cl_device = select_device(device)
    description = describe(cl_device)
    formats = usable_image_formats(new_context(cl_device))
    angles = np.linspace(0, np.pi, n_angles, endpoint=False)
    data = np.random.default_rng(2).random((4, n_angles, size)).astype(np.float32)
    updates = size * size * n_angles
    log(f"pybp bench on {description.name} ({description.platform}, driver {description.driver}): "
        f"{n_angles} angles x {size} bins -> {size}x{size}, median of {repeats} after a warm-up")
    rows = []
    load_rates = {}
    if any(kernel == "alu" for _, kernel, _ in variants):
        load_rates = {width: local_ceiling(cl_device, width, repeats) for width in (4, 8, 16)}
        log("local memory: " + ", ".join(f"{8 * w}-bit loads {rate(r * 1e-9)} G/s"
                                          for w, r in load_rates.items()))
    silx = silx_seconds(cl_device, angles, data[0], repeats) if with_silx else None
    if silx is not None:
        rows.append(dict(kernel="silx Backprojection", slices=1, interpolation="linear",
                         storage="float", texel="1ch float image", gups=updates / silx * 1e-9,
                         ceiling=None, error=None))
        log(f"silx: {rate(rows[-1]['gups'])} GU/s")
    for slices, interpolation, storage in settings:
        row = architecture(description)
        source, channels, texel_rows = choose_texel(formats, slices, storage, row.max_texel_bytes)
        ceiling = None
        if source == "image":
            # Two texel rows of 2 slices: the 2-slice texel's rate, two fetches per update.
            probe = TextureParams(slices_per_pass=slices // texel_rows, interpolation=interpolation,
                                  storage=storage, texel_channels=channels)
            fetches = texture_ceiling(cl_device, probe, size, n_angles, repeats)
            ceiling = fetches * slices / texel_rows * 1e-9
            rows.append(dict(kernel="fetch-only ceiling", slices=slices, interpolation=interpolation,
                             storage=storage, texel=texel_name(probe, texel_rows), gups=ceiling,
                             ceiling=ceiling, error=None))
            log(f"ceiling v{slices} {interpolation} {storage}: {rate(ceiling)} GU/s")
        for name, kernel, forced in variants:
            options = dict(device=cl_device, interpolation=interpolation, slices_per_pass=slices,
                           precision=storage, kernel=kernel, overrides=forced,
                           verify=False)  # judged on the check case below
            try:
                verdict, _ = check(options)
            except ValueError as exc:  # a combination this setting cannot take
                log(f"  {name} v{slices} {interpolation} {storage}: skipped ({exc})")
                continue
            big = Backprojector(size, angles, **options)
            speed = gups(big, data[:slices], repeats)
            texel = texel_name(big.params, big.params.texel_rows)
            # The ALU path's bound is local memory; the hybrid mode's is both.
            local = (local_row_ceiling(big.params, load_rates)
                     if big.params.family == "alu" and load_rates else None)
            rows.append(dict(kernel=name, slices=slices, interpolation=interpolation,
                             storage=storage, texel=texel, gups=speed, ceiling=ceiling,
                             local_ceiling=local, error=verdict.error, rule=verdict.rule,
                             verified=verdict.passed, approximate=verdict.rule == "oversample"))
            limit = f", local-memory ceiling {rate(local)} ({100 * speed / local:.0f}%)" if local else ""
            log(f"  {name} v{slices} {interpolation} {storage}: {rate(speed)} GU/s{limit} "
                f"(check {verdict})")
            del big
    return rows, silx and updates / silx * 1e-9


# Where the hybrid mode's split is swept: one slice (the ALU path much the faster) and
# four half slices (the two paths about even on the H100).
HYBRID_SETTINGS = ((1, "linear", "float"), (1, "nearest", "float"), (4, "linear", "half"))


def hybrid_sweep(device=None, size=2048, settings=HYBRID_SETTINGS, repeats=5, log=print):
    """GU/s of the profile's ALU kernel with 0..8 of every 8 work-groups on the texture
    path (Sect. 7.1), per setting: where the best mix lies, and whether it beats both
    pure paths (0: ALU only; 8: texture path only)."""
    cl_device = select_device(device)
    angles = np.linspace(0, np.pi, size, endpoint=False)
    data = np.random.default_rng(3).random((4, size, size)).astype(np.float32)
    silx = silx_seconds(cl_device, angles, data[0], repeats)
    if silx is not None:
        log(f"silx Backprojection (1 slice, linear, float), same run: "
            f"{rate(size * size * size / silx * 1e-9)} GU/s")
    results = {}
    for slices, interpolation, storage in settings:
        row = []
        for groups in range(HYBRID_PERIOD + 1):
            options = dict(device=cl_device, interpolation=interpolation, slices_per_pass=slices,
                           precision=storage, kernel="alu", overrides=dict(texture_groups=groups),
                           verify=False)  # judged on the check case below
            verdict, _ = check(options)
            big = Backprojector(size, angles, **options)
            speed = gups(big, data[:slices], repeats)
            row.append(speed)
            log(f"hybrid v{slices} {interpolation} {storage}: {groups}/{HYBRID_PERIOD} texture "
                f"groups {rate(speed)} GU/s (check {verdict}) {big.params.key()}")
        best = int(np.argmax(row))
        gain = row[best] / max(row[0], row[-1]) - 1
        log(f"hybrid v{slices} {interpolation} {storage}: best {best}/{HYBRID_PERIOD} at {rate(row[best])} GU/s, "
            f"{100 * gain:+.0f}% over the faster pure path (ALU {rate(row[0])}, texture {rate(row[-1])})")
        results[(slices, interpolation, storage)] = row
    return results


def texel_name(params, texel_rows):
    rows = f", {texel_rows} rows" if texel_rows > 1 else ""
    return f"{params.texel_channels}ch {params.storage} {params.source}{rows}"


def rate(gups) -> str:
    return f"{gups:.0f}" if gups >= 100 else f"{gups:.3g}"


def format_table(rows, silx_gups=None) -> str:
    """A markdown table: GU/s, share of the measured ceiling, and speed against silx.

    GU/s counts every slice, so its ratio to silx's is how much sooner each slice is
    done."""
    head = ("| kernel | slices | interpolation | storage | texel | GU/s "
            "| % of texture ceiling | local-memory ceiling | % of it | vs silx | check |")
    lines = [head, "|" + " --- |" * 11]
    for r in rows:
        share = f"{100 * r['gups'] / r['ceiling']:.0f}%" if r.get("ceiling") else ""
        local = r.get("local_ceiling")
        local_cells = f"{rate(local)} | {100 * r['gups'] / local:.0f}%" if local else " | "
        versus = f"{r['gups'] / silx_gups:.2f}x" if silx_gups else ""
        if r.get("error") is None:
            verdict = ""
        else:
            verdict = f"{r['rule']} {r['error']:.1e}" + ("" if r.get("verified") else " FAILED")
        lines.append(f"| {r['kernel']} | {r['slices']} | {r['interpolation']} | {r['storage']} "
                     f"| {r['texel']} | {rate(r['gups'])} | {share} | {local_cells} "
                     f"| {versus} | {verdict} |")
    return "\n".join(lines)


def best_per_setting(rows):
    """The fastest verified pybp kernel for each setting, beside its ceiling; not
    approximations (oversampling), which the table lists on their own rows."""
    best = {}
    for r in rows:
        if r.get("error") is None or not r.get("verified") or r.get("approximate"):
            continue
        key = (r["slices"], r["interpolation"], r["storage"])
        if key not in best or r["gups"] > best[key]["gups"]:
            best[key] = r
    return best
