#!/usr/bin/env python3
"""The binaries (PTX on NVIDIA's OpenCL) of the back-projection kernels the device's
profile picks, one file per setting, to count the instructions of the inner loop:

    python tuning/kernel_ptx.py --folder ptx --slices 1 2 --interpolation nearest linear
    ptxas -arch=sm_90 -O3 ptx/alu-v1-nearest-float.ptx -o k.cubin && cuobjdump -sass k.cubin

(ptxas comes with the CUDA toolkit; cuobjdump and nvdisasm with it, or in Triton's wheel.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from pybp.api.sinograms import Backprojector
from pybp.cl import codegen
from pybp.parallel import kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default="ptx")
    parser.add_argument("--device", default=None)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--slices", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--interpolation", nargs="*", default=["nearest", "linear"])
    parser.add_argument("--storage", default="float")
    parser.add_argument("--kernel", default="alu")
    args = parser.parse_args()
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    angles = np.linspace(0, np.pi, args.size, endpoint=False)
    for slices in args.slices:
        for interpolation in args.interpolation:
            bp = Backprojector(args.size, angles, device=args.device, slices_per_pass=slices,
                               interpolation=interpolation, precision=args.storage,
                               kernel=args.kernel)
            source = kernels.backproject_source(bp.params)
            program = codegen.compiled(bp.context, source)
            name = f"{args.kernel}-v{slices}-{interpolation}-{args.storage}"
            (folder / f"{name}.cl").write_text(source)
            (folder / f"{name}.ptx").write_bytes(program.binaries[0])
            print(f"{name}: {bp.params}")


if __name__ == "__main__":
    main()
