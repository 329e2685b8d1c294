"""The parameters of a cone-beam back-projection kernel (docs/design.md, section 8):
one frozen set per launch configuration, rendered into templates/cone/ and passed to
the launch from the same fields."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pybp import checks

FAMILIES = ("exact", "texture")
POSITIONS = ("double", "float")
VOXELS_PER_ITEM = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class ConeParams:
    """- ``family``: ``exact``, bilinear interpolation in arithmetic from a buffer;
      ``texture``, the images in an image array, interpolated by the sampler (8-bit
      weights on NVIDIA: the texture rule of pybp/parallel/verify.py).
    - ``voxels_per_item``: voxels along z per work-item (a column of the volume).
    - ``projections_per_pass``: projections back-projected per launch, their matrices in
      ``__constant`` memory and the sums in registers, each voxel written once per launch.
    - ``group``: the work-group's ``(x, y)`` items, x along the volume's fastest axis.
    - ``positions``: the arithmetic of the projected positions: ``double`` keeps them
      exact at thousands of pixels (float32 rounds a position near pixel 2000 by
      about 1e-4 pixel); ``float`` where the device has no doubles."""

    family: str = "exact"
    voxels_per_item: int = 4
    projections_per_pass: int = 8
    group: tuple = (32, 8)
    positions: str = "double"

    def __post_init__(self):
        checks.choice("family", self.family, FAMILIES)
        checks.choice("voxels_per_item", self.voxels_per_item, VOXELS_PER_ITEM)
        checks.positive_int(self.projections_per_pass, "projections_per_pass")
        checks.choice("positions", self.positions, POSITIONS)
        gx, gy = (checks.positive_int(g, "group") for g in self.group)
        object.__setattr__(self, "group", (gx, gy))

    def key(self) -> str:
        return "-".join(f"{k}={v}" for k, v in asdict(self).items())
