"""Architecture detection and defaults, on described devices (AMD and Intel simulated:
the profiler reads only the plain description)."""

from dataclasses import replace

import pytest

from pybp.parallel import profiler
from pybp.cl.device import DeviceDescription, describe

BASE = DeviceDescription(
    index=0, platform="P", platform_version="OpenCL 3.0", vendor="V", name="N",
    version="OpenCL 3.0", driver="1", type="gpu", compute_units=64, clock_mhz=1500,
    global_memory=2**34, max_allocation=2**32, local_memory=65536, constant_memory=65536,
    image_support=True, image2d_max_width=16384, image2d_max_height=16384,
    compute_capability=None, gfx_target=None, extensions=())
ALL_FORMATS = frozenset((c, s) for c in (1, 2, 4) for s in ("float", "half"))


@pytest.mark.parametrize("description,row", [
    (replace(BASE, vendor="NVIDIA Corporation", name="NVIDIA H100 80GB HBM3",
             compute_capability=(9, 0)), "nvidia-hopper"),
    (replace(BASE, vendor="NVIDIA Corporation", name="GeForce GTX TITAN X",
             compute_capability=(5, 2)), "nvidia-maxwell+"),
    (replace(BASE, vendor="NVIDIA Corporation", name="GeForce GTX 680",
             compute_capability=(3, 0)), "nvidia-kepler"),
    (replace(BASE, vendor="Advanced Micro Devices, Inc.", name="gfx90a:sramecc+:xnack-",
             gfx_target="gfx90a"), "amd"),
    (replace(BASE, vendor="Intel(R) Corporation", name="Intel(R) Arc(TM) A770 Graphics"), "intel-gpu"),
    (replace(BASE, vendor="AuthenticAMD", platform="Portable Computing Language",
             type="cpu", name="pthread-AMD EPYC"), "cpu"),
    (replace(BASE, vendor="Acme", name="Mystery"), "generic"),
])
def test_architecture_rows(description, row):
    assert profiler.architecture(description).name == row
    for slices in (1, 2, 4):
        params = profiler.kernel_params(description, ALL_FORMATS, slices, "linear", "float")
        assert params.validate() is params


def test_alu_defaults_per_setting_and_local_memory_fit():
    h100 = replace(BASE, vendor="NVIDIA Corporation", compute_capability=(9, 0), local_memory=49152)
    one = profiler.kernel_params(h100, ALL_FORMATS, 1, "linear", "float")
    assert (one.kernel, one.square, one.cache, one.rounding) == ("alu", 64, "pair", "fixed")
    near = profiler.kernel_params(h100, ALL_FORMATS, 1, "nearest", "float")
    assert (near.cache, near.rounding, near.cached_projections) == ("plain", "float", 64)
    # Two slices of 64 cached projections need 49 KB: the fit loop halves them.
    near2 = profiler.kernel_params(h100, ALL_FORMATS, 2, "nearest", "float")
    assert near2.cached_projections == 32 and near2.local_memory_bytes <= 49152
    four = profiler.kernel_params(h100, ALL_FORMATS, 4, "linear", "float", square=64,
                                  items_per_row=32, cache="pair")
    assert four.local_memory_bytes <= 49152 < four.with_(cached_projections=16).local_memory_bytes
    with pytest.raises(ValueError, match="local memory"):
        profiler.kernel_params(h100, ALL_FORMATS, 4, "linear", "float", square=64,
                               items_per_row=32, cache="pair", cached_projections=32)


def test_amd_caches_constants_in_local_memory():
    amd = replace(BASE, vendor="Advanced Micro Devices, Inc.", gfx_target="gfx1030")
    params = profiler.kernel_params(amd, ALL_FORMATS, 2, "linear", "float")
    assert params.kernel == "multiproj" and params.constants == "local"


def test_texel_fallbacks():
    assert profiler.choose_texel(ALL_FORMATS, 2, "float") == ("image", 2, 1)
    no_rg = ALL_FORMATS - {(2, "float"), (2, "half")}
    assert profiler.choose_texel(no_rg, 2, "float") == ("image", 4, 1)
    assert profiler.choose_texel(frozenset({(1, "float")}), 1, "half") == ("buffer", 1, 1)
    # 128-bit texels filter slower on NVIDIA: 4 float slices in two RG texel rows there.
    assert profiler.choose_texel(ALL_FORMATS, 4, "float", max_texel_bytes=8) == ("image", 2, 2)
    assert profiler.choose_texel(ALL_FORMATS, 4, "half", max_texel_bytes=8) == ("image", 4, 1)
    assert profiler.choose_texel(no_rg, 4, "float", max_texel_bytes=8) == ("image", 4, 1)
    params = profiler.kernel_params(replace(BASE, image_support=False), frozenset(), 4,
                                     "nearest", "half")
    assert params.source == "buffer" and params.texel_channels == 4


def test_overrides_and_tuned_profiles_take_precedence():
    nvidia = replace(BASE, vendor="NVIDIA Corporation", compute_capability=(9, 0))
    tuned = {"kernel": "locality", "unroll": 2}
    params = profiler.kernel_params(nvidia, ALL_FORMATS, 1, "linear", "float", tuned=tuned)
    assert (params.kernel, params.unroll) == ("locality", 2)
    params = profiler.kernel_params(nvidia, ALL_FORMATS, 1, "linear", "float", kernel="standard",
                                     tuned=tuned, unroll=1)
    assert (params.kernel, params.unroll) == ("standard", 1)


def test_real_device_is_described(cl_device):
    description = describe(cl_device)
    assert description.compute_units >= 1 and description.name
    assert profiler.architecture(description).name
