"""``python -m pybp`` and the ``pybp`` command: Ctrl-C while the modules load (a second
or more on a cold start) ends with one line too."""

import importlib
import signal
import sys


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


def run():
    try:
        _import_pyopencl()
        from pybp.cli.commands import main
    except KeyboardInterrupt:  # main notes Ctrl-C from its first line
        print("pybp: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())


if __name__ == "__main__":
    run()
