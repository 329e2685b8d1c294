"""Rendering kernel templates (the only module that knows where ``templates/`` lives),
and building them with errors a user can read."""

from __future__ import annotations

import functools
import os
import tempfile
import threading
from collections import OrderedDict
from importlib import resources
from pathlib import Path

import pyopencl as cl
from mako.lookup import TemplateLookup

from pybp.cl import implementations
from pybp.parallel.params import KernelParams, TextureParams

# Template of each kernel; `standard` and `locality` differ only in the index
# mapping, so they share one template (style.md: one template per near-identical pair).
KERNEL_TEMPLATES = {
    "standard": "texture.cl.mako",
    "locality": "texture.cl.mako",
    "multiproj": "multiproj.cl.mako",
    "alu": "alu.cl.mako",
}
FILTER_TILE = 64
PEAK_ITEMS = 256  # work-items of `slice_peaks` (pack.cl.mako)


def templates_dir() -> Path:
    """Installed wheels ship templates as the ``pybp.templates`` package; a source
    checkout or editable install finds them beside the package (style.md)."""
    try:
        path = Path(str(resources.files("pybp.templates")))
        if (path / "common.cl.mako").is_file():
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    path = Path(__file__).resolve().parents[2] / "templates"
    if (path / "common.cl.mako").is_file():
        return path
    raise FileNotFoundError("pybp's kernel templates were not found (broken installation?)")


@functools.lru_cache(maxsize=None)
def _lookup() -> TemplateLookup:
    return TemplateLookup(directories=[str(templates_dir())], strict_undefined=True)


def _render(template: str, **values) -> str:
    return _lookup().get_template(template).render(**values)


@functools.lru_cache(maxsize=256)
def render(params: KernelParams) -> str:
    """OpenCL source of the back-projection kernel ``backproject`` for ``params``."""
    params.validate()
    return _render(KERNEL_TEMPLATES[params.kernel], p=params, probe=False)


# What packing depends on: every parameter set with the same texel layout shares one
# packing kernel (one source, one build).
PACK_FIELDS = ("slices_per_pass", "storage", "texel_channels", "texel_rows")


def render_pack(params: KernelParams) -> str:
    """Source of ``pack``: interleave and convert sinograms into ``params``' texels."""
    return _render_pack(TextureParams(**{name: getattr(params, name) for name in PACK_FIELDS}))


@functools.lru_cache(maxsize=64)
def _render_pack(params: KernelParams) -> str:
    return _render("pack.cl.mako", p=params, fields=PACK_FIELDS, peak_items=PEAK_ITEMS)


@functools.lru_cache(maxsize=64)
def render_probe(params: TextureParams) -> str:
    """Source of ``fetch_only``: the texture-engine ceiling for ``params``' texels,
    measured with the ``multiproj`` schedule (the best fetch pattern we have)."""
    return _render("multiproj.cl.mako", p=params.with_(kernel="multiproj"), probe=True)


@functools.lru_cache(maxsize=4)
def render_filter(padding: str = "zero") -> str:
    """Source of ``filter_rows``: the FBP row filter with ``zero`` or ``edge`` padding."""
    return _render("filter.cl.mako", tile=FILTER_TILE, padding=padding)


@functools.lru_cache(maxsize=16)
def render_fft(size: int, items: int, padding: str, first: int, paired: bool) -> str:
    """Source of ``filter_rows`` by FFT: ``size`` points (a power of two) on ``items``
    work-items; rows start at padded position ``first`` (edge padding); ``paired``
    exchanges whole complex values through local memory (2 ``size`` floats)."""
    return _render("fft.cl.mako", size=size, items=items, padding=padding, first=first,
                   paired=paired)


@functools.lru_cache(maxsize=16)
def render_normalize(raw_type: str, real: str = "float") -> str:
    """Source of ``sinograms_from_projections`` for input of the
    OpenCL type ``raw_type``, with arithmetic in ``real`` (``float`` or ``double``)."""
    return _render("normalize.cl.mako", raw_type=raw_type, real=real)


KEPT_PROGRAMS = 64  # built programs kept for reuse (a few kernels per geometry)
_PROGRAMS = OrderedDict()
_PROGRAMS_LOCK = threading.Lock()


class BuildError(RuntimeError):
    """A kernel the device's compiler rejected, or cannot launch: one line for the user."""


def _title(source: str) -> str:
    """What a rendered source is, from its first comment (``/* pybp ... */``)."""
    first = source.lstrip().split("\n", 1)[0].strip("/* ")
    return first.split(":")[0] if first.startswith("pybp") else "a pybp kernel"


def first_error(exc) -> str:
    """The line of an OpenCL error or build log worth showing: the first that says error
    (pyopencl's own first line only says that the build failed)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() and "build" not in line.lower()]
    return (errors or lines or [type(exc).__name__])[0][:200]


def build(context, source: str, device):
    """Build ``source`` for ``device`` (a :class:`pybp.device.DeviceDescription`), or
    take it from the programs built in this process (:data:`KEPT_PROGRAMS` of them, so
    a one-shot ``pybp.fbp`` builds nothing the second time); a compiler failure becomes
    one line naming the device, the kernel and the first error of the log (``--debug``
    shows the whole)."""
    options = list(implementations.named(device.implementation).build_options)
    key = (context.int_ptr, source, tuple(options))
    with _PROGRAMS_LOCK:
        if key in _PROGRAMS:
            _PROGRAMS.move_to_end(key)
            return _PROGRAMS[key][1]
    try:
        program = cl.Program(context, source).build(options=options)
    except cl.Error as exc:
        raise BuildError(f"{device.label()}: the OpenCL compiler failed on the {_title(source)}"
                         f" kernel ({first_error(exc)}); choose another device (see `pybp "
                         "devices`)") from exc
    with _PROGRAMS_LOCK:
        _PROGRAMS[key] = (context, program)  # the context kept alive with its key
        while len(_PROGRAMS) > KEPT_PROGRAMS:
            _PROGRAMS.popitem(last=False)
    return program


def kernel(program, name: str, device):
    """Kernel ``name`` of ``program``, checked against what the compiled kernel may run:
    its required work-group size within the device's maximum and, where the
    implementation reports it truly (pybp.implementations), the kernel's own."""
    made = cl.Kernel(program, name)
    cl_device = program.devices[0]
    wanted = made.get_work_group_info(cl.kernel_work_group_info.COMPILE_WORK_GROUP_SIZE,
                                      cl_device)
    items = int(wanted[0] * wanted[1] * wanted[2]) if wanted else 0
    allowed = device.max_work_group_size
    if implementations.named(device.implementation).kernel_limits:
        allowed = min(allowed, int(made.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, cl_device)))
    if items > allowed:
        raise BuildError(f"{device.label()}: kernel {name} needs work-groups of {items} "
                         f"work-items; the device runs it with at most {allowed}")
    return made


def write_text_new(path, text: str, overwrite: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically, refusing to replace a file unless asked."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite to replace it")
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
