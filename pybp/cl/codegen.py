"""Rendering kernel templates (the only module that knows where ``templates/`` lives),
and building them with errors a user can read."""

from __future__ import annotations

import functools
import hashlib
import importlib
import pickle
import sys
import threading
from collections import OrderedDict
from importlib import resources
from pathlib import Path

import mako
import pyopencl as cl
from pyopencl.cache import create_built_program_from_source_cached

from pybp.cl import implementations, store
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
def _lookup():
    # Mako is imported here, on the first source not in the cache: with its Pygments
    # plug-in it is 23 ms of start-up.
    lookup = importlib.import_module("mako.lookup")
    return lookup.TemplateLookup(directories=[str(templates_dir())], strict_undefined=True)


@functools.lru_cache(maxsize=None)
def _fingerprint() -> bytes:
    """What a rendered source depends on besides its values: the templates, and the
    code of the parameter sets whose properties the templates read (all of pybp's
    modules, by name, size and modification time, as Python's own bytecode cache
    judges them), and Mako's version. Stat calls only: under a millisecond."""
    digest = hashlib.sha1(f"{mako.__version__}|{sys.version}".encode())
    for root in (templates_dir(), Path(__file__).resolve().parents[1]):
        for path in sorted(root.rglob("*")):
            if path.suffix in (".mako", ".py"):
                stat = path.stat()
                digest.update(f"{path}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.digest()


def render(template: str, kernels=None, **values) -> str:
    """OpenCL source of ``template`` (a path under ``templates/``) with ``values``.
    ``kernels`` maps each kernel's name to its arguments (tuples of
    :class:`pybp.cl.kernel.Arg`); the template writes ``${args[name]}`` as the
    kernel's parameter list, and :func:`declared` binds the same tuple at launch.

    Sources are kept in the user's cache, named by a digest of the template, the
    values (pickled: every byte of them) and :func:`_fingerprint`, so that a command
    that builds what it built before renders nothing and does not import Mako."""
    values["args"] = {name: signature(args) for name, args in (kernels or {}).items()}
    try:
        key = hashlib.sha1(pickle.dumps((template, sorted(values.items())), protocol=4)
                           + _fingerprint()).hexdigest()
    except (pickle.PicklingError, TypeError, AttributeError):
        key = None  # a value that cannot be pickled: rendered each time
    path = store.cache_dir() / "sources" / f"{key}.cl"
    if key is not None:
        try:
            return path.read_text()  # written whole or not at all (store.write_text_new)
        except OSError:
            pass
    source = _lookup().get_template(template).render(**values)
    if key is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            store.write_text_new(path, source, overwrite=True)
        except OSError:
            pass  # an unwritable cache: rendered again next time
    return source


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
        program = compiled(context, source, options)
    except cl.Error as exc:
        raise BuildError(f"{device.label()}: the OpenCL compiler failed on the {_title(source)}"
                         f" kernel ({first_error(exc)}); choose another device (see `pybp "
                         "devices`)") from exc
    with _PROGRAMS_LOCK:
        _PROGRAMS[key] = (context, program)  # the context kept alive with its key
        while len(_PROGRAMS) > KEPT_PROGRAMS:
            _PROGRAMS.popitem(last=False)
    return program


def compiled(context, source: str, options=()) -> cl.Program:
    """``source`` built for the context's devices, from pyopencl's binary cache where it
    was built before. pyopencl skips that cache on PoCL and NVIDIA, trusting the
    runtime's own, but PoCL still takes about 20 ms per program from source against
    1 ms from the binary (2 cores, PoCL 3.0): a dozen programs were a third of the
    ``pybp reconstruct`` of a tiny scan. A failed build is repeated from source so that
    the error carries pyopencl's build log."""
    if implementations.identify(context.devices[0].platform.name).binaries:
        try:
            program, _ = create_built_program_from_source_cached(
                context, source, " ".join(options).encode())
            return cl.Program(program)
        except cl.Error:
            pass
    return cl.Program(context, source).build(options=list(options))


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
