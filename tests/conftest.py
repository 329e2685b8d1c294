"""One fixture picks the device: ``PYBP_DEVICE`` when set (the GPU machine), else the
default (PoCL on a machine with no GPU). Tolerances are named constants per mode."""

import zlib

import numpy as np
import pytest

from pybp import reference
from pybp.device import describe, select_device


@pytest.fixture(scope="session")
def cl_device():
    return select_device()


@pytest.fixture(scope="session")
def exact_images(cl_device):
    """CPU runtimes interpolate images in float arithmetic; GPUs use 8-bit weights."""
    return describe(cl_device).type == "cpu"


@pytest.fixture(scope="session")
def linear_tolerance(exact_images):
    """Relative RMS allowed for a linear-interpolation result (design section 6)."""

    def tolerance(params):
        if params.source == "buffer" or exact_images:
            return reference.RTOL_EXACT
        return reference.RTOL_TEXTURE

    return tolerance


@pytest.fixture
def rng(request):
    # Fresh data per test, the same in every run (str hash() is salted per process).
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))
