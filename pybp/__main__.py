"""``python -m pybp`` and the ``pybp`` command: Ctrl-C while the modules load (a second
or more on a cold start) ends with one line too."""

import _thread
import importlib
import os
import signal
import sys
import threading


def _import_pyopencl():
    """pyopencl with SIGINT held back: an interrupt inside its extension's start-up
    (nanobind creating its types) aborts the interpreter with a traceback, not a
    ``KeyboardInterrupt``. A Ctrl-C meanwhile is delivered when it returns (a fraction
    of a second)."""
    hold = hasattr(signal, "pthread_sigmask")
    if hold:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        importlib.import_module("pyopencl")
    finally:
        if hold:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _exit_now(code):
    """A SIGINT handler for the interpreter's shut-down, once the command has ended and
    closed its outputs: joining idle worker threads there, a Ctrl-C would print a
    ``KeyboardInterrupt`` traceback; instead the process ends at once."""
    def handle(signum, frame):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return handle


def _interrupted(exc) -> bool:
    """Whether ``exc`` is a Ctrl-C or came of one: Python before 3.12 wraps an exception
    raised in ``__set_name__`` (a dataclass's field, while a module loads) in a
    ``RuntimeError`` whose cause is the ``KeyboardInterrupt`` (a CI run met it)."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _resending(previous):
    """A ``sys.unraisablehook`` that sends a Ctrl-C again where Python could only print it
    and go on: raised inside a weakref callback or a destructor (importlib's module-lock
    callback while modules load; a CI run met it), the ``KeyboardInterrupt`` was a
    traceback and the command ran to its end. It is sent again 10 ms later, from a thread,
    so that it lands in the command's own code; other errors go to ``previous``."""
    def hook(unraisable):
        if not _interrupted(unraisable.exc_value):
            return previous(unraisable)
        later = threading.Timer(0.01, _thread.interrupt_main)
        later.daemon = True
        later.start()
    return hook


def run():
    previous = sys.unraisablehook
    sys.unraisablehook = _resending(previous)
    try:
        _import_pyopencl()
        from pybp.cli.commands import main
        code = main()
    except BaseException as exc:  # main notes Ctrl-C from its first line
        if not _interrupted(exc):
            raise
        print("pybp: interrupted", file=sys.stderr)
        code = 130
    finally:
        sys.unraisablehook = previous
    signal.signal(signal.SIGINT, _exit_now(code or 0))
    codegen = sys.modules.get("pybp.cl.codegen")
    if codegen is not None and codegen.building():  # an interrupted kernel build: see there
        _exit_now(code or 0)(signal.SIGINT, None)
    sys.exit(code)


if __name__ == "__main__":
    run()
