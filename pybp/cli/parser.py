"""What every ``pybp`` command shares: its parser (help that says each default), option
types (byte sizes), and the error policy (which errors are the user's to act on, said in
one line with no traceback, and how)."""

from __future__ import annotations

import argparse

BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; "(default: X)" after an option's help where the text
    does not say its default already (options whose default is None say it in words)."""

    def _get_help_string(self, action):
        text = action.help or ""
        value = action.default
        if ("default" in text or not action.option_strings or value is None
                or isinstance(value, bool) or value is argparse.SUPPRESS):
            return text
        if isinstance(value, (list, tuple)):
            value = " ".join(map(str, value))
        return f"{text} (default: {value})"


class Parser(argparse.ArgumentParser):
    """Every ``pybp`` parser: :class:`HelpFormatter` unless told otherwise."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def byte_size(text):
    """``BYTES`` as the options take it: a number, with K, M, G or T (powers of 1024)."""
    number, unit = text.strip().rstrip("bB"), ""
    if number and number[-1].lower() in BYTE_UNITS:
        number, unit = number[:-1], number[-1].lower()
    try:
        value = float(number) * BYTE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected bytes, such as 2G or 512M, got {text!r}") \
            from None
    if not 1 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return int(value)


def is_expected(exc) -> bool:
    """Mistakes a user can act on, and what an OpenCL implementation refused: one line,
    no traceback (``--debug`` shows it)."""
    import pyopencl as cl

    return isinstance(exc, (ValueError, TypeError, OSError, RuntimeError, cl.Error)) and \
        not isinstance(exc, (NotImplementedError, RecursionError))


def one_line(exc) -> str:
    """An error as one line: an OpenCL error's first (a build log follows it); a system
    error's reason and file, without Python's "[Errno 30]"."""
    text = str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
