"""Searching kernel parameters per device (``pybp tune``): parallel beam in
:mod:`pybp.tune.search`, cone beam in :mod:`pybp.tune.cone`.

The defaults below live here, not in the search, so that the command line can show them
without importing the search."""

# Defaults that suit the device: a CPU back-projects about 1 GU/s, so the paper's 2048
# case would take seconds per call and hours per search (measured: 5 of 648 candidates
# in 600 s); a GPU runs a candidate in about a second.
SIZES = {"cpu": 256}
BUDGETS = {"cpu": 180.0}
SIZE, BUDGET = 2048, 900.0
