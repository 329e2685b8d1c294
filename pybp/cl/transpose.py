"""A tiled transpose of each layer of a volume (templates/operators/transpose.cl.mako):
cone beam's gather reads each voxel column's planes as consecutive floats from a
transposed copy. A template renders it with ``${transpose(args['transpose_slices'],
tile)}``."""

from __future__ import annotations

from pybp.cl.kernel import Arg, global_size, ints

ARGS = (
    Arg("volume", "__global const float *", "layers x ny x nx"),
    Arg("transposed", "__global float *", "layers x nx x ny"), *ints("nx", "ny"),
)
TILE = 16  # the block's side


def launch(kernel, queue, volume, transposed, layers: int, ny: int, nx: int, wait_for=None):
    """transposed = each of ``layers`` (ny, nx) matrices of ``volume`` transposed (device
    buffers; ``kernel`` the built ``transpose_slices``); the event."""
    tiles = (TILE, TILE, 1)
    return kernel(queue, global_size((nx, ny, layers), tiles), tiles, wait_for=wait_for,
                  volume=volume, transposed=transposed, nx=nx, ny=ny)
