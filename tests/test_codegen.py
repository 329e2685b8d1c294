"""Templates: found installed or in a checkout; every parameter set renders and builds."""

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import pybp
from pybp.cl import codegen
from pybp.parallel import kernels
from pybp.cli.commands import main
from pybp.cl.kernel import signature
from pybp.parallel.params import TextureParams


def test_templates_found_where_pybp_is():
    where = codegen.templates_dir()
    for template in ("common.cl.mako", "parallel/texture.cl.mako", "stages/fft.cl.mako"):
        assert (where / template).is_file(), template
    package = Path(pybp.__file__).resolve().parent
    if "site-packages" in str(package):  # an installed copy: the wheel's templates
        assert where.resolve() == (package / "templates").resolve()


def test_checkout_finds_its_templates():
    """A plain source checkout (no install) renders from its own templates/ folder."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "pybp" / "cl" / "codegen.py").is_file():
        pytest.skip("not a source checkout")
    code = "import pybp.cl.codegen as c; print(c.templates_dir()); print(c.__file__)"
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr
    where, module = done.stdout.split()
    assert Path(module).resolve().parent == root / "pybp" / "cl"  # the checkout's copy ran
    assert Path(where).resolve() == root / "templates"


ALL = [TextureParams(kernel=k, slices_per_pass=n, interpolation=i, storage=s,
                     texel_channels=n // rows, texel_rows=rows, source=src,
                     constants=c, unroll=u)
       for k, n, i, s, src, c, u, rows in itertools.product(
           ("standard", "locality", "multiproj"), (1, 2, 4), ("nearest", "linear"),
           ("float", "half"), ("image", "buffer"), ("constant", "local"), (1, 8), (1, 2))
       if (c == "constant" or k == "multiproj")
       and (rows == 1 or (n == 4 and src == "image"))]


def test_every_parameter_set_renders_with_its_parameters():
    for params in ALL:
        source = kernels.backproject_source(params)
        assert "__kernel" in source and "backproject" in source
        for name, value in params.as_dict().items():  # the header lists them
            assert f"{name} = {value}" in source


@pytest.mark.parametrize("kernel", ["standard", "locality", "multiproj"])
def test_sources_build(cl_device, kernel):
    context = cl.Context([cl_device])
    for params in ALL:
        if params.kernel == kernel and params.unroll == 8 and params.interpolation == "linear":
            cl.Program(context, kernels.backproject_source(params)).build()


def test_invalid_parameter_sets_are_refused():
    with pytest.raises(ValueError, match="texel_channels"):
        TextureParams(slices_per_pass=4, texel_channels=2).validate()
    with pytest.raises(ValueError, match="constants"):
        TextureParams(kernel="standard", constants="local").validate()
    with pytest.raises(ValueError, match="unroll"):
        TextureParams(unroll=0).validate()


def test_render_command_writes_and_never_overwrites(tmp_path, capsys):
    target = tmp_path / "k.cl"
    args = ["render", "--kernel", "multiproj", "--slices", "2", "--storage", "half",
            "-o", str(target)]
    assert main(args) == 0
    text = target.read_text()
    assert "kernel = multiproj" in text and "storage = half" in text
    target.write_text("my edits")
    assert main(args) == 2
    assert target.read_text() == "my edits"
    assert main(args + ["--overwrite"]) == 0
    assert target.read_text() == text
    assert main(["render", "--slices", "4", "--texel-channels", "2"]) == 2
    alu = tmp_path / "alu.cl"
    assert main(["render", "--kernel", "alu", "--square", "32", "--items-per-row", "16",
                 "-o", str(alu)]) == 0
    assert "square = 32" in alu.read_text() and "cache = pair" in alu.read_text()
    assert main(["render", "--kernel", "alu", "--interpolation", "nearest"]) == 2  # pair


def test_render_offers_every_field_of_the_parameter_sets(capsys):
    """`pybp render` derives its options from the dataclasses: nothing to keep in step."""
    from dataclasses import fields

    from pybp.parallel.params import AluParams

    with pytest.raises(SystemExit):
        main(["render", "--help"])
    text = capsys.readouterr().out
    for f in fields(AluParams):
        assert "--" + f.name.replace("_", "-") in text, f.name
    assert main(["render", "--kernel", "alu", "--texture-groups", "2", "--cache-storage",
                 "float", "--launch-texel-bytes", "1048576"]) == 0
    source = capsys.readouterr().out
    assert "texture_groups = 2" in source and "launch_texel_bytes = 1048576" in source
    assert main(["render", "--kernel", "standard", "--square", "32"]) == 2  # an ALU field


def test_rendered_sources_are_kept_and_match_a_fresh_render(tmp_path, monkeypatch):
    """A source rendered before comes from the cache without Mako, equal to a fresh
    render; other values, or a changed template, render anew (issue 24: start-up)."""
    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path))
    params = TextureParams(slices_per_pass=2, texel_channels=2)
    args = {"backproject": kernels.backproject_args(params)}

    def render(p):
        return codegen.render(kernels.TEMPLATES[p.kernel], args, p=p, probe=False)

    first = render(params)
    assert len(list((tmp_path / "sources").glob("*.cl"))) == 1
    fresh = codegen._lookup().get_template(kernels.TEMPLATES[params.kernel]).render(
        p=params, probe=False, args={"backproject": signature(args["backproject"])})
    assert first == fresh

    def no_mako():
        raise AssertionError("rendered again")

    with monkeypatch.context() as patched:
        patched.setattr(codegen, "_lookup", no_mako)
        assert render(params) == first  # from the cache
        with pytest.raises(AssertionError, match="rendered again"):
            render(params.with_(interpolation="nearest"))
        # A template or module edited since: its size or time differs, so the
        # fingerprint does.
        patched.setattr(codegen, "_fingerprint", lambda: b"another checkout")
        with pytest.raises(AssertionError, match="rendered again"):
            render(params)


def test_binaries_are_kept_from_the_build_their_implementation_says(cl_device, tmp_path,
                                                                      monkeypatch):
    """A program is built from source, then from the binary kept in pybp's cache: at
    once, or on PoCL from its second build (a binary there compiles every kernel once
    more: ``binary_on_reuse``). Each build runs the kernel right."""
    from pybp.cl import implementations
    if not implementations.identify(cl_device.platform.name).binaries:
        pytest.skip("this implementation keeps no binaries")
    monkeypatch.setenv("PYBP_CACHE_DIR", str(tmp_path))
    made, loaded = [], []
    real_make, real_program = codegen._make_binary, codegen.cl.Program
    monkeypatch.setattr(codegen, "_make_binary", lambda program: made.append(program) or
                        real_make(program))

    def program(*args):
        loaded.append(len(args) == 3)  # (context, devices, binaries)
        return real_program(*args)
    monkeypatch.setattr(codegen.cl, "Program", program)
    source = "__kernel void thrice(__global float *a) { a[get_global_id(0)] *= 3.0f; }"
    context = cl.Context([cl_device])
    queue = cl.CommandQueue(context)
    kept = 1 if implementations.identify(cl_device.platform.name).binary_on_reuse else 0
    for build in range(3):
        loaded.clear()
        prg = codegen.compiled(context, source)
        data = np.arange(16, dtype=np.float32)
        buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                           hostbuf=data)
        prg.thrice(queue, (16,), None, buffer)
        cl.enqueue_copy(queue, data, buffer)
        np.testing.assert_array_equal(data, 3 * np.arange(16, dtype=np.float32))
        assert len(list(tmp_path.glob("binaries/*.bin"))) == (build >= kept), build
        assert len(made) == (build >= kept), build  # made once, at build `kept`
        assert loaded == ([True] if build > kept else [False]), build
