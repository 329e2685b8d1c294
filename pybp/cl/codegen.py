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
from pybp.cl.kernel import Kernel, signature


def templates_dir() -> Path:
    """Installed wheels ship templates as the ``pybp.templates`` package; a source
    checkout or editable install finds them beside the package (the two-step lookup of
    pyopencl's ``_find_pyopencl_include_path``; setup.cfg maps the package)."""
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


def render(template: str, kernels=None, **values) -> str:
    """OpenCL source of ``template`` (a path under ``templates/``) with ``values``.
    ``kernels`` maps each kernel's name to its arguments (tuples of
    :class:`pybp.cl.kernel.Arg`); the template writes ``${args[name]}`` as the
    kernel's parameter list, and :func:`declared` binds the same tuple at launch."""
    values["args"] = {name: signature(args) for name, args in (kernels or {}).items()}
    return _lookup().get_template(template).render(**values)


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
    """Build ``source`` for ``device`` (a :class:`pybp.cl.device.DeviceDescription`), or
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


def declared(context, device, source: str, name: str, args) -> Kernel:
    """Kernel ``name`` of ``source``, built for ``device``, launched with ``args``."""
    return Kernel(kernel(build(context, source, device), name, device), args)


def kernel(program, name: str, device):
    """Kernel ``name`` of ``program``, checked against what the compiled kernel may run:
    its required work-group size within the device's maximum and, where the
    implementation reports it truly (pybp.cl.implementations), the kernel's own."""
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
