"""Bad input gets a ValueError or TypeError that names the argument."""

import numpy as np
import pytest

import pybp

ANGLES = np.linspace(0, np.pi, 10, endpoint=False)


@pytest.fixture(scope="module")
def bp(cl_device):
    return pybp.Backprojector(16, ANGLES, device=cl_device)


@pytest.mark.parametrize("data,error,word", [
    (np.zeros(16, np.float32), ValueError, "sinograms"),
    (np.zeros((2, 2, 10, 16, 1), np.float32), ValueError, "sinograms"),
    (np.zeros((9, 16), np.float32), ValueError, "angles"),
    (np.zeros((10, 15), np.float32), ValueError, "bins"),
    (np.zeros((0, 10, 16), np.float32), ValueError, "empty"),
    (np.full((10, 16), np.nan, np.float32), ValueError, "NaN"),
    (np.full((10, 16), np.inf, np.float32), ValueError, "NaN or Inf"),
    (np.zeros((10, 16), complex), TypeError, "sinograms"),
    (np.zeros((10, 16), "U1"), TypeError, "sinograms"),
    ([[0.0] * 16] * 10, TypeError, "sinograms"),
])
def test_bad_sinograms(bp, data, error, word):
    with pytest.raises(error, match=word):
        bp(data)


def test_bad_out(bp):
    with pytest.raises(ValueError, match="out"):
        bp(np.zeros((10, 16), np.float32), out=np.zeros((15, 16), np.float32))
    with pytest.raises(TypeError, match="out"):
        bp(np.zeros((10, 16), np.float32), out=np.zeros((16, 16), np.int32))


@pytest.mark.parametrize("kwargs,error,word", [
    (dict(angles=[]), ValueError, "angles"),
    (dict(angles=[0.0, np.nan]), ValueError, "angles"),
    (dict(angles=np.zeros((2, 2))), ValueError, "angles"),
    (dict(angles=["a", "b"]), TypeError, "angles"),
    (dict(center=40.0), ValueError, "center"),
    (dict(center=-3.0), ValueError, "center"),
    (dict(center=np.full(3, 8.0)), ValueError, "center"),
    (dict(center=np.nan), ValueError, "center"),
    (dict(n_bins=0), ValueError, "n_bins"),
    (dict(n_bins=16.5), TypeError, "n_bins"),
    (dict(slice_shape=(0, 4)), ValueError, "slice_shape"),
    (dict(slice_shape=(4, 4, 4)), ValueError, "slice_shape"),
    (dict(interpolation="cubic"), ValueError, "interpolation"),
    (dict(precision="double"), ValueError, "precision"),
    (dict(slices_per_pass=3), ValueError, "slices_per_pass"),
    (dict(kernel="fastest"), ValueError, "kernel"),
    (dict(filter="ramlak"), ValueError, "filter"),
    (dict(device="no such device"), ValueError, "device"),
    (dict(device=99), ValueError, "device"),
    (dict(overrides=dict(squares=64)), ValueError, "overrides"),
    (dict(kernel="alu", overrides=dict(square=48)), ValueError, "square"),
    (dict(kernel="alu", interpolation="nearest", overrides=dict(cache="pair")), ValueError, "cache"),
    (dict(kernel="alu", overrides=dict(rounding="round")), ValueError, "rounding"),
    (dict(kernel="alu", overrides=dict(offset_cache="hy")), ValueError, "offset_cache"),
    (dict(piece_shape=(0, 10)), ValueError, "piece_shape"),
])
def test_bad_arguments(cl_device, kwargs, error, word):
    options = dict(n_bins=16, angles=ANGLES)
    if "device" not in kwargs:
        options["device"] = cl_device
    options.update(kwargs)
    with pytest.raises(error, match=word):
        pybp.Backprojector(**options)


def test_bad_one_shot_calls(cl_device):
    with pytest.raises(ValueError, match="sinograms"):
        pybp.backproject(np.zeros(5, np.float32), ANGLES, device=cl_device)
    with pytest.raises(ValueError, match="filter"):
        pybp.fbp(np.zeros((10, 16), np.float32), ANGLES, filter=None, device=cl_device)


def test_pybp_device_variable_is_checked(monkeypatch):
    monkeypatch.setenv("PYBP_DEVICE", "no such device")
    with pytest.raises(ValueError, match="PYBP_DEVICE"):
        pybp.Backprojector(16, ANGLES)
