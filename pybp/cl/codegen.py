"""Rendering kernel templates (the only module that knows where ``templates/`` lives),
and building them with errors a user can read."""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from collections import OrderedDict
from importlib import resources
from pathlib import Path

import mako
import pyopencl as cl

from pybp.cl import cache, implementations
from pybp.cl.kernel import Kernel, signature

# pyopencl warns of any compiler output ("Non-empty compiler output"; Intel's runtime
# logs every build's progress): not the user's concern.
warnings.filterwarnings("ignore", message="Non-empty compiler output")


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
    path = cache.cache_dir() / "sources" / f"{key}.cl"
    if key is not None:
        try:
            return path.read_text()  # written whole or not at all (cache.write_text_new)
        except OSError:
            pass
    source = _lookup().get_template(template).render(**values)
    if key is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text_new(path, source, overwrite=True)
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
    """``source`` built for the context's device, from pybp's cache of built binaries
    where it was built before (:func:`_cached`). Built on a thread of its own
    (:func:`interruptible`); a failed build is repeated from source so that the error
    carries the build log. Built with -w: a compiler's warnings are for pybp's
    developers, and PoCL printed its "1 warning generated." to the user's terminal
    itself, where no Python filter reaches."""
    options = ["-w", *options]

    def build():
        if implementations.identify(context.devices[0].platform.name).binaries:
            try:
                return _cached(context, source, options)
            except Exception:  # a failed build, or a cache that could not be used
                pass
        return cl.Program(context, source).build(options=list(options))
    return interruptible(build, context.devices[0])


def _cached(context, source, options) -> cl.Program:
    """``source`` built from its binary, kept in ``binaries/`` of pybp's cache by a
    digest of the source, the options, the device and driver and pyopencl's version,
    or built and its binary kept (written whole: no lock, so a killed build leaves
    nothing behind; pyopencl's cache left a lock file that stopped every later build
    for a minute); on PoCL, kept from its second build (``binary_on_reuse``: the first
    is marked, :func:`_first_build`). PoCL still takes about 20 ms per program from
    source against 1 ms from the binary (2 cores, PoCL 3.0): a dozen programs were a
    third of the ``pybp reconstruct`` of a tiny scan."""
    device = context.devices[0]
    platform = device.platform
    identity = "|".join([platform.name, platform.version, device.name, device.version,
                         device.driver_version, cl.VERSION_TEXT])
    key = hashlib.sha1("\0".join([source, " ".join(options), identity]).encode()).hexdigest()
    path = cache.cache_dir() / "binaries" / f"{key}.bin"
    try:
        return cl.Program(context, [device], [path.read_bytes()]).build(options=list(options))
    except (OSError, cl.Error):
        pass  # not built before, or a binary the driver no longer takes
    program = cl.Program(context, source).build(options=list(options))
    if implementations.identify(platform.name).binary_on_reuse and _first_build(path):
        return program
    _make_binary(program)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes_new(path, program.get_info(cl.program_info.BINARIES)[0])
    except OSError:
        pass  # an unwritable cache: built again next time
    return program


def _first_build(path) -> bool:
    """Whether the program whose binary ``path`` would hold is built here for the first
    time; marked built (``KEY.built`` beside it) if so. Where the cache cannot be
    written, every build is a first: no binary, as none could be kept."""
    mark = path.with_suffix(".built")
    if mark.exists():
        return False
    try:
        mark.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes_new(mark, b"")
    except OSError:
        pass
    return True


CL_PROGRAM_BINARY_SIZES = 0x1165


@functools.lru_cache(maxsize=1)
def _opencl_library():
    """The OpenCL loader pyopencl uses, through ctypes (None where it is not found;
    ctypes is imported here, after a first build: it is not needed before)."""
    ctypes = importlib.import_module("ctypes")
    importlib.import_module("ctypes.util")
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libOpenCL" in line}
        found = next(iter(paths), None) or ctypes.util.find_library("OpenCL")
        return ctypes.CDLL(found) if found else None
    except OSError:
        return None


def _make_binary(program):
    """Ask the runtime for the program's binary size through ctypes, which lets go of
    Python's lock meanwhile: PoCL generates the binary there (1.2 s of a first build,
    pyopencl holding the lock all along, so that Ctrl-C waited on a build's thread)."""
    library = _opencl_library()
    if library is None:
        return
    ctypes = sys.modules["ctypes"]
    size = ctypes.c_size_t(0)
    library.clGetProgramInfo(ctypes.c_void_p(program.int_ptr),
                             ctypes.c_uint(CL_PROGRAM_BINARY_SIZES),
                             ctypes.c_size_t(ctypes.sizeof(size)), ctypes.byref(size), None)


# A build longer than this is said on standard error, once per process, terminal or log
# alike (on a terminal only, a log piped from a first run had 12.6 s of silence);
# PYBP_BUILD_NOTICE=0 leaves it out
BUILD_NOTICE_SECONDS = 1.0
NOTICE_VARIABLE = "PYBP_BUILD_NOTICE"
_NOTICED = threading.Event()
_BUILDING = set()  # threads of builds under way (see building())


def building() -> bool:
    """Whether a build left behind by an interrupt is still under way. An OpenCL
    runtime's C++ destructors must not run beside it: PoCL's and Intel's aborted the
    process ("terminate called without an active exception"), or held its exit until
    the build ended. The command then ends with ``os._exit`` (pybp/__main__.py), and an
    interpreter that ends otherwise waits for it first (:func:`_wait_for_builds`)."""
    return any(thread.is_alive() for thread in list(_BUILDING))


@atexit.register
def _wait_for_builds():
    # (a thread Ctrl-C stopped between its registration and its start never runs, and
    # joining it would raise: only those alive are waited for)
    alive = [thread for thread in list(_BUILDING) if thread.is_alive()]
    if alive and isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):
        _end_interrupted()
    for thread in alive:
        thread.join()


def _end_interrupted():
    """A program Ctrl-C ended during a kernel build (its ``KeyboardInterrupt`` uncaught:
    ``sys.last_value``) ends at once, killed by SIGINT as Python ends such a program
    anyway (the command ends so too, with status 130: pybp/__main__.py): waiting for the
    build held a script's exit 2.2 to 7.4 s, and the runtime's destructors must not run
    beside it. Its output is flushed and logging shut down first: the exit handlers
    registered before pybp's do not run."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)  # where the signal did not end it


def interruptible(work, cl_device):
    """``work()`` (a kernel build) on a daemon thread, waited for in short steps from
    the main thread, so that Ctrl-C acts at once: a build cannot be stopped, and the
    first builds of a fresh environment took 2.4-6.2 s each on 2 cores (35 s in all for
    a first call), while the thread that waits in ``clBuildProgram`` sees no signal.
    An interrupted build ends on its own thread and is dropped. The first build that
    runs longer than :data:`BUILD_NOTICE_SECONDS` is said, once."""
    if threading.current_thread() is not threading.main_thread():
        return work()  # only the main thread gets Ctrl-C: nothing to gain
    done, outcome = threading.Event(), {}

    def run():
        if hasattr(signal, "pthread_sigmask"):  # Ctrl-C goes to the waiting thread, not here
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()
            _BUILDING.discard(threading.current_thread())

    thread = threading.Thread(target=run, name="pybp-build", daemon=True)
    _BUILDING.add(thread)
    thread.start()
    start = time.perf_counter()
    while not done.wait(0.05):
        if not _NOTICED.is_set() and time.perf_counter() - start > BUILD_NOTICE_SECONDS:
            _NOTICED.set()
            if sys.stderr is not None and os.environ.get(NOTICE_VARIABLE) != "0":
                print(f"pybp: building the OpenCL kernels for {cl_device.name.strip()} "
                      f"(kept in {cache.cache_dir()} for later runs)",
                      file=sys.stderr, flush=True)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


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
