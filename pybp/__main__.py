"""``python -m pybp`` and the ``pybp`` command: Ctrl-C while the modules load (a second
or more on a cold start) ends with one line too."""

import sys


def run():
    try:
        from pybp.cli.commands import main
    except KeyboardInterrupt:  # main notes Ctrl-C from its first line
        print("pybp: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())


if __name__ == "__main__":
    run()
