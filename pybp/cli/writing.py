"""What every reconstruction command does around its writing (pybp/cli/files.py for
parallel beam, pybp/cli/cone.py for cone beam): Ctrl-C and write errors end in one line,
and an output that holds nothing of this run is removed."""

from __future__ import annotations

import hashlib
import signal
import sys
import threading

import numpy as np

from pybp.io.writers import STORAGE_ERRORS, WriteError

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process it ended


def sha1(values) -> str:
    """The SHA-1 of ``values`` as float64: what an output stores of its angles or
    matrices, so that ``--resume`` refuses others."""
    return hashlib.sha1(np.ascontiguousarray(values, np.float64).tobytes()).hexdigest()


def _noted(signum, frame):
    """SIGINT while a command stops: counted, not raised."""
    _noted.count += 1


_noted.count = 0


def hold_interrupts():
    """From now on (a Ctrl-C or SIGTERM is being handled), further ones are counted, not
    raised: the command finishes its writes in flight, says what is on the disk and
    ends, with no traceback from a second interrupt in the middle of that (the command's
    :func:`pybp.cli.commands.main` puts its handlers back when it returns)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _noted)
        signal.signal(signal.SIGTERM, _noted)


def into(output, total, what, work, kept=None):
    """``(work(), None)``, or ``(None, EXIT_INTERRUPTED)`` after Ctrl-C, said in one line
    (``what``: what ``output`` holds ``total`` of, "slice" or "plane"): the writes in
    flight end first, so the count is what is on the disk. A write error names the
    output and how many are complete; an output that holds nothing of this run is
    removed, unless ``kept()`` says what else of the run is kept for ``--resume`` (an
    iterative method's state); ``output`` is closed in every case."""
    try:
        return work(), None
    except KeyboardInterrupt:
        hold_interrupts()
        output.settle()
        done = int(output.scan_done().sum())
        state = kept() if kept is not None and not done else None
        if state:  # the output stays: --resume reads what it was made with
            print(f"pybp reconstruct: interrupted before the first {what}; {state}: the "
                  "same command with --resume continues from it", file=sys.stderr)
        elif not done and output.made:
            output.discard()
            print(f"pybp reconstruct: interrupted before the first {what}; nothing was "
                  "written", file=sys.stderr)
        else:
            print(f"pybp reconstruct: interrupted after {done} of {total} {what}s; the same "
                  "command with --resume finishes the job", file=sys.stderr)
        return None, EXIT_INTERRUPTED
    except OSError as exc:
        if isinstance(exc, WriteError) or exc.errno in STORAGE_ERRORS:
            raise OSError(exc.errno, output.failure(exc)) from exc
        output.discard()
        raise
    except ValueError as exc:  # the data refused part way (a NaN with --no-log): say what is kept
        output.discard()
        done = int(output.scan_done().sum())
        if not done:
            raise ValueError(f"{exc}; nothing was written") from exc
        raise ValueError(f"{exc}; {done} of {total} {what}s are written in {output.path} "
                         "(each whole): mend the input and run again with --overwrite") \
            from exc
    except BaseException:
        output.discard()
        raise
    finally:
        output.close()
