"""The matched pair of cone-beam operators on one device: the forward projection A and
its exact transpose A^T (templates/operators/cone.cl.mako), on device buffers of a
volume ``(nz, ny, nx)`` and projections ``(n_angles, n_rows, n_cols)``, in the geometry
of :class:`pybp.ConeGeometry`: distance-driven, line integrals in the geometry's length
(pybp/cone/reference.py's ``footprints`` is the model in float64)."""

from __future__ import annotations

import copy

import numpy as np
import pyopencl as cl

from pybp.cl import codegen, pacing, transpose
from pybp.cl.kernel import Arg, global_size, ints
from pybp.geometry.volume import VolumeGeometry

SIZES = ints("n_angles", "n_rows", "n_cols", "nx", "ny", "nz")
SOURCE = 6  # a projection's rays (tables): p (a point, or minus a direction), the voxel's sides
INVERSE = 18  # a projection's rays through pixels, for the scatter's windows (tables)


def _args(real):
    matrices = Arg("matrices", f"__global const {real} *",
                   "per image: voxel indices to (c w, r w, w), 12 values")
    sources = Arg("sources", f"__global const {real} *",
                  f"per image: its rays (voxel_rays), the voxel's sides: {SOURCE} values")
    u_reach = Arg("u_reach", f"const {real}",
                  "pixels: the farthest a box's end along the columns lies from its centre")
    forward = (
        Arg("volume", "__global const float *", "nz x ny x nx"), matrices, sources,
        Arg("inverses", f"__global const {real} *",
            f"per image: the rays through pixels, D then E row by row: {INVERSE} values"),
        Arg("shift", "__global const int *", "the terms' scale, 2^shift (cone_shift)"),
        Arg("projections", "__global float *", "n_angles x n_rows x n_cols"), *SIZES, u_reach,
        Arg("v_reach", f"const {real}", "pixels: likewise, along the rows"),
        Arg("first_angle", "const int", "the launch's first image (pybp/cl/pacing.py)"),
    )
    backward = (
        Arg("projections", "__global const float *", "n_angles x n_rows x n_cols"), matrices,
        sources, Arg("volume", "__global float *", "nz x ny x nx"), *SIZES,
        Arg("first_plane", "const int", "the launch's first z plane (pybp/cl/pacing.py)"),
    )
    magnitude = (
        Arg("volume", "__global const float *", "nz x ny x nx"),
        Arg("size", "const ulong", "voxels"),
        Arg("parts", "__global float *", "MAGNITUDE_GROUPS partial sums of |volume|"),
    )
    shift = (
        Arg("parts", "__global const float *", "cone_magnitude's partial sums"),
        Arg("n_parts", "const int", "how many"),
        Arg("amplitude_bits", "const int", "every amplitude is below 2^amplitude_bits"),
        Arg("shift", "__global int *", "out: the forward projection's scale exponent"),
    )
    gather = (
        Arg("columns", "__global const float *", "the volume transposed: ny nx x nz"),
        matrices, sources, Arg("projections", "__global float *", "n_angles x n_rows x n_cols"),
        *SIZES, u_reach, Arg("first_angle", "const int", "the launch's first image (pybp/cl/pacing.py)"),
    )
    return dict(cone_forward=forward, cone_backward=backward, cone_magnitude=magnitude,
                cone_shift=shift, cone_gather=gather, transpose_slices=transpose.ARGS)


# A where the matrices share a column's c and w (shared_column) and a voxel's image is
# at most GATHER_BELOW pixels tall (forward_method): a gather, work-groups of
# GATHER_ITEMS work-items taking up to SLOTS image rows each on GATHER_COLUMNS image
# columns, listing the voxel columns of a half strip ENTRIES at a time (the first of
# GATHER_ENTRIES that fits the device's local memory) and making their profiles CHUNK
# at a time, a work-item reading up to UNROLL voxels of each at once (gather_shape). The
# H100's best of a sweep; there the gather was 3.6x the scatter's speed on voxels 2.7
# pixels tall, and (a step earlier) 2.0x at 5.4 and 1.16x at 10.8 (docs/benchmarks.md's history).
GATHER_BELOW = 12.0
GATHER_ITEMS, SLOTS, GATHER_COLUMNS, GATHER_ENTRIES, CHUNK, UNROLL = 128, 8, 4, (128, 32), 4, 4
# Neighbouring rows a work-item reads of a profile at once, at most: with 4, ptxas gave
# the gather 96 registers (5 groups a multiprocessor), with 2 80 (6), 0.1850 against
# 0.1735 s on the H100 (docs/benchmarks.md's history; before the rows in fixed point, which took
# it to 96 registers with 2, and faster)
READ_ROWS = 2
LISTED_BYTES = 48  # local memory a listed voxel column takes (the template's listed_*)
# A elsewhere: a scatter, FORWARD_GROUP work-items adding the voxels of a tile of (rows,
# columns) detector pixels of one image, PLANES planes of voxels at a time (voxel by
# voxel; by columns, where the matrices share a column's c and w), LANES work-items
# along a row of voxels; the tile the first of FORWARD_TILES whose sums fit the device's
# local memory (forward_tile). The H100's best of a sweep (docs/benchmarks.md's history).
FORWARD_GROUP = 256
FORWARD_TILES = ((64, 64), (16, 64))
PLANES = {False: 8, True: 64}
LANES = 8
MAGNITUDE_GROUP, MAGNITUDE_GROUPS = 256, 256  # the L1 norm's partial sums
# A^T's work-groups: a tile of voxel columns, 8 along x and 16 along y (0.1012 s on the
# H100 against 0.1028 s for 16 x 8, docs/benchmarks.md's history)
BACKWARD_GROUP = (8, 16, 1)
COLUMN = 8  # A^T's voxels along z per work-item, at most (backward_shape)
# A^T's rows whose sums a work-item makes at once on a GPU (their reads issued
# together): on the H100, one call, the standard case took 0.529 s for 3, 0.538 s for 2,
# 0.539 s for 8 and 0.613 s for 1 (docs/benchmarks.md, issue 69). On a CPU one at a
# time: a batch's rows past the last are read again for nothing, and PoCL ran 3 at a
# time 4% to 9% slower (docs/benchmarks.md).
AT_BATCH = {"gpu": 3}


def forward_tile(device) -> tuple:
    """A's tile on ``device`` (a :class:`pybp.cl.device.DeviceDescription`): the first of
    FORWARD_TILES whose local memory (a sum of two 32-bit words and a flag per pixel, the
    boxes' lines) the device has, else the last."""
    for tile in FORWARD_TILES:
        if 9 * tile[0] * tile[1] + 256 <= device.local_memory:
            return tile
    return FORWARD_TILES[-1]


def gather_shape(device, geometry: VolumeGeometry) -> tuple:
    """A's gather on ``device`` for ``geometry``: (work-items, rows a work-item, image
    columns, listed voxel columns, profiles at a time, voxels of a profile a work-item
    reads at once, neighbouring rows of a profile a work-item reads at once). A group
    takes the image's rows, or SLOTS rows a work-item, fewer where its rows (4 bytes a
    profile, and the profiles' margins) and the list (48 bytes a listed column) would
    not fit the device's local memory; a work-item reads as many of a column's voxels at
    once as a band's rows take in one phase, at most UNROLL, and of a profile the most
    rows up to READ_ROWS that divide its own (4, 2 or 1)."""
    items = min(GATHER_ITEMS, device.max_work_group_size)
    phases = gather_phases(geometry)
    row = 4 * CHUNK  # the profiles' bytes a row
    margins = 2 * READ_ROWS * row  # the profiles' places either side of the band
    entries = GATHER_ENTRIES[-1]
    for entries in GATHER_ENTRIES:
        if LISTED_BYTES * entries + 4 * items + margins + row * items <= device.local_memory:
            break
    spare = device.local_memory - LISTED_BYTES * entries - 4 * items - margins
    n_rows = geometry.detector_shape[0]
    slots = max(1, min(SLOTS, -(-n_rows // items), spare // (row * items)))
    voxels = min(geometry.volume_shape[0], min(n_rows, slots * items) / voxel_step(geometry) + 4)
    unroll = int(np.clip(np.ceil(voxels / (phases * items)), 1, UNROLL))
    rows = next(n for n in (4, 2, 1) if n <= READ_ROWS and slots % n == 0)
    return items, slots, GATHER_COLUMNS, entries, CHUNK, unroll, rows


def backward_shape(device, geometry: VolumeGeometry, reach) -> tuple:
    """A^T's ``(column, rows, columns)`` where the matrices share a column's c and w: the
    voxels along z a work-item takes (COLUMN, or fewer where their rows' running totals
    would not fit the device's local memory: 8 bytes a row a work-item, and one more
    place), the most image rows they cover and the most image columns a box covers,
    from ``reach`` (:func:`reaches`: a box is at most twice as wide and tall) and the
    detector's size."""
    n_rows, n_cols = geometry.detector_shape
    items = int(np.prod(BACKWARD_GROUP))
    columns = min(n_cols, int(np.ceil(2 * reach[0])) + 2)
    for column in (COLUMN, 4, 2, 1):
        rows = min(n_rows, int(np.ceil(column * 2 * reach[1])) + 2)
        if 8 * (rows + 1) * items <= device.local_memory - 1024:
            return column, rows, columns
    raise ValueError(f"geometry: a voxel's box spans up to {2 * reach[1]:.0f} image rows; the "
                     f"cone-beam pair's transpose holds one voxel's rows' sums in local memory "
                     f"({device.local_memory} bytes here): take larger pixels or smaller voxels")


def voxel_step(geometry: VolumeGeometry) -> float:
    """The shortest image of a step of one voxel along a column, in pixels (circular
    orbits: |m6| / w at the volume's farthest column corner), 0 where some image has
    none (m6 = 0)."""
    m = geometry.voxel_matrices()
    nz, ny, nx = geometry.volume_shape
    corners = np.array([[i, j, 0, 1] for i in (0, nx - 1) for j in (0, ny - 1)], float)
    return float(np.min(np.abs(m[:, 1, 2]) / np.max(m[:, 2] @ corners.T, axis=1)))


def gather_phases(geometry: VolumeGeometry) -> int:
    """A's gather's phases: voxels of a column ``phases`` apart have boxes that share no
    row in any image (the ``phases - 1`` voxels between them span at least one pixel),
    so the voxels of one phase write distinct rows of a profile. 0 where some image has
    no step (m6 = 0)."""
    step = voxel_step(geometry)
    if not step > 0:
        return 0
    return 1 + int(np.ceil((1 + 1e-6) / step))


def shared_column(matrices) -> bool:
    """Whether every matrix's third column is (0, m6, 0) (a circular orbit, an untilted
    detector): a voxel column's c and w are then each of its voxels', and the kernels
    find them once per column, and its voxels' rows in fixed point (the template's
    cone_rows: to rounding, the positions found voxel by voxel)."""
    return not np.any(matrices[:, [2, 10]])


# Where the matrices share a column's c and w, the kernels hold a voxel's row position in
# 64-bit fixed point with 32 fraction bits (the template's cone_rows), which holds
# positions within 2^31 pixels. ConePair asks for FIXED_REACH of the volume's columns
# continued FIXED_BEYOND voxels past their ends: a kernel finds positions a little past
# a column's last voxel before it stops (A^T up to COLUMN - 1 voxels, the gather up to
# a round of GATHER_ITEMS x UNROLL x phases voxels: a few thousand pixels).
FIXED_REACH, FIXED_BEYOND = 2.0 ** 30, 2 ** 14


def row_reach(geometry: VolumeGeometry) -> float:
    """The largest |row position| (pixels) of a voxel of ``geometry``'s volume columns,
    continued FIXED_BEYOND voxels past their ends, in any image where the matrices share
    a column's c and w: at the corners (a ratio of linear functions, w > 0 throughout
    the volume and the same along a column)."""
    m = geometry.voxel_matrices()
    nz, ny, nx = geometry.volume_shape
    corners = np.array([[i, j, k, 1] for i in (0, nx - 1) for j in (0, ny - 1)
                        for k in (-FIXED_BEYOND, nz - 1 + FIXED_BEYOND)], float)
    h = m @ corners.T
    return float(np.max(np.abs(h[:, 1] / h[:, 2])))


def forward_method(geometry: VolumeGeometry) -> str:
    """A's kernel for ``geometry``: ``"gather"`` where its matrices share a column's c and
    w, a voxel column's voxels step along the image rows in every image (gather_phases)
    and a voxel at the volume's centre projects at most GATHER_BELOW pixels tall (the
    median over the images), else ``"scatter"``. A detector of one row (fan beam) takes
    the scatter: the gather's work-items take the image's rows, and one row left all but
    one idle (64^2 from 180 projections of 128 pixels: 1.90 s against the scatter's 0.057
    s on PoCL, 2-core Xeon, 2026-12-02). From the float64 matrices, so that the pair and
    the memory checks (:func:`scratch_bytes`) choose alike on any device."""
    m = geometry.voxel_matrices()
    if geometry.detector_shape[0] == 1 or not shared_column(m.reshape(len(m), 12)) \
            or not gather_phases(geometry):
        return "scatter"
    nz, ny, nx = geometry.volume_shape
    centre = np.array([(nx - 1) / 2, (ny - 1) / 2, (nz - 1) / 2, 1.0])
    tall = np.abs(m[:, 1, 2] / (m[:, 2] @ centre))
    return "gather" if np.median(tall) <= GATHER_BELOW else "scatter"


def scratch_bytes(geometry: VolumeGeometry) -> int:
    """Device bytes of the pair's own copy: the gather's transposed volume, where
    :func:`forward_method` chooses it (the scatter's few bytes of its own aside)."""
    if forward_method(geometry) == "gather":
        return 4 * int(np.prod(geometry.volume_shape))
    return 0


def tables(geometry: VolumeGeometry):
    """``(matrices, inverses, sources)``, float64 ``(n_angles, 12)``, ``(n_angles,
    INVERSE)`` and ``(n_angles, SOURCE)``: the voxel matrices row by row; the rays
    through the pixels, the ray through ``(c, r)`` the voxel-index points ``E (c, r, 1)
    + t D (c, r, 1)`` for the scatter's windows, D and E row by row (from a source s:
    ``D = inverse(M)``, E's last column s, the rest 0; along d: D's last column d, the rest
    0, and E a point of each ray); each projection's rays (``voxel_rays``: p, a point or
    minus a direction) and the voxel's sides x, y, z (the boxes' axis and the rays'
    lengths)."""
    m = geometry.voxel_matrices()
    rays = geometry.voxel_rays()
    n = len(m)
    ray_tables = np.zeros((n, 2, 3, 3))
    point = rays[:, 3] != 0
    if point.any():
        ray_tables[point, 0] = np.linalg.inv(m[point, :, :3])
        ray_tables[point, 1, :, 2] = rays[point, :3]
    if (~point).any():
        ray_tables[~point, 0, :, 2] = -rays[~point, :3]
        # the points nearest the origin on the rays: X = A^+ ((c, r) - m's last column)
        across = np.linalg.pinv(m[~point, :2, :3])  # (n, 3, 2)
        ray_tables[~point, 1, :, :2] = across
        ray_tables[~point, 1, :, 2] = -np.einsum("nab,nb->na", across, m[~point, :2, 3])
    sources = np.zeros((n, SOURCE))
    sources[:, :3] = rays[:, :3]
    sources[:, 3:6] = geometry.voxel_sizes
    return m.reshape(n, 12), ray_tables.reshape(n, INVERSE), sources


def reaches(geometry: VolumeGeometry) -> tuple:
    """``(u_reach, v_reach)``: pixels, at least the farthest a voxel's box ends from its
    centre along the image's columns and rows, in any image (the scatter's window and
    the gather's strips take the voxels whose centres lie this near a pixel). Found on
    a grid of 9 points an axis through the volume, each voxel's half steps along x, y
    and z (the boxes take one of x and y), then widened by a quarter and 0.05 pixels:
    the steps change slowly (ratios of linear functions, w > 0 on the volume)."""
    m = geometry.voxel_matrices()
    nz, ny, nx = geometry.volume_shape
    grid = np.stack(np.meshgrid(*(np.linspace(-0.5, n - 0.5, 9) for n in (nx, ny, nz)),
                                indexing="ij"), -1).reshape(-1, 3)
    points = np.concatenate([grid, np.ones((len(grid), 1))], 1)

    def project(p):
        h = np.einsum("nab,pb->npa", m, p)
        return h[..., :2] / h[..., 2:]
    centre = project(points)
    reach = np.zeros(2)
    for axis in range(3):
        for sign in (-0.5, 0.5):
            moved = points.copy()
            moved[:, axis] += sign
            far = np.abs(project(moved) - centre).max(axis=(0, 1))
            reach = np.maximum(reach, far)
    return tuple(float(r) * 1.25 + 0.05 for r in reach)


def amplitude_bits(geometry: VolumeGeometry) -> int:
    """An exponent ``e`` with every ray's length through a voxel below ``2^e`` (the
    scatter's fixed-point scale): a voxel's side along x or y times the ray's length over
    its length along that axis, the one it runs more along, which is at most sqrt(2)
    times the longer side times the ray's length over its horizontal length. From a
    source, largest where the ray is steepest: at most the volume's largest height above
    or below the source over the least of its horizontal distance to the volume's sides;
    along parallel rays, the rays' own."""
    nz, ny, nx = geometry.volume_shape
    sides = geometry.voxel_sizes
    rays = geometry.voxel_rays()
    point = rays[:, 3] != 0
    ratio = 0.0
    if point.any():
        sources = rays[point, :3] * sides
        low = np.array([-0.5, -0.5]) * sides[:2]
        high = np.array([nx - 0.5, ny - 0.5]) * sides[:2]
        # the least over the volume's horizontal rectangle of the horizontal distance, per
        # source (at least its distance along x or y, whichever is more)
        gap = np.maximum(np.maximum(low - sources[:, :2], sources[:, :2] - high), 0).max(axis=1)
        height = np.maximum(np.abs(-0.5 * sides[2] - sources[:, 2]),
                            np.abs((nz - 0.5) * sides[2] - sources[:, 2]))
        ratio = np.where(gap > 0, height / np.where(gap > 0, gap, 1), np.inf).max()
    if (~point).any():
        along = rays[~point, :3] * sides
        horizontal = np.hypot(along[:, 0], along[:, 1])
        ratio = max(ratio, np.where(horizontal > 0, np.abs(along[:, 2]) / np.where(
            horizontal > 0, horizontal, 1), np.inf).max())
    bound = sides[:2].max() * np.sqrt(2) * np.sqrt(1 + ratio ** 2)
    return int(np.ceil(np.log2(bound))) + 1 if np.isfinite(bound) else 64


class ConePair:
    """A and A^T of ``geometry`` on ``queue``'s device, positions in double where the
    device has it. Launches as :class:`pybp.parallel.project.ParallelPair`'s."""

    loads = 4  # 4-byte loads an update takes (pybp bench --forward): the bilinear sample

    def __init__(self, geometry: VolumeGeometry, context, queue, device):
        self.geometry, self.queue = geometry, queue
        self.volume_shape = tuple(geometry.volume_shape)
        self.projection_shape = (geometry.n_angles,) + tuple(geometry.detector_shape)
        # one problem for the methods (pybp/iterative/methods.py): the whole volume
        self.problems = 1
        self.volume_block = int(np.prod(self.volume_shape))
        self.projection_block = int(np.prod(self.projection_shape))
        self.real = "double" if "cl_khr_fp64" in device.extensions else "float"
        dtype = np.float64 if self.real == "double" else np.float32
        self._tables = tuple(t.astype(dtype) for t in tables(geometry))
        self.matrices, self.inverses, self.sources = (self._buffer(t) for t in self._tables)
        self.forward_tile = forward_tile(device)
        self._bits = amplitude_bits(geometry)
        if self._bits > 60:
            raise ValueError(
                "geometry: a source lies above or below the volume, within its extent along x "
                "and y, or rays run along z; the pair takes rays with a part along x or y")
        self._reach = tuple(dtype(r) for r in reaches(geometry))
        self.shared = shared_column(self._tables[0])
        # rays from a point (cone beam) or along a direction, the same in every image: a
        # template value, so that neither kernel asks which per voxel (15% of A^T's time)
        kinds = set(geometry.voxel_rays()[:, 3] != 0)
        if len(kinds) != 1:
            raise ValueError("geometry: rays from a point in some projections and parallel in "
                             "others; the pair takes one kind")
        self.point = bool(kinds.pop())
        reach = row_reach(geometry) if self.shared else 0.0
        if not reach < FIXED_REACH:
            raise ValueError(
                f"geometry: the volume's voxel columns, continued {FIXED_BEYOND} voxels past "
                f"their ends, reach {reach:.3g} pixels from the detector's "
                f"first row; the cone-beam pair holds row positions in fixed point, within "
                f"2^30 pixels (the volume lies too near a source's plane, or its voxels' "
                f"images are too far apart)")
        self.method = forward_method(geometry)
        gathers = self.method == "gather"
        self.column, at_rows, at_cols = (backward_shape(device, geometry, self._reach)
                                         if self.shared else (COLUMN, None, None))
        # (the gather's shape and phases only where it is chosen: they need a voxel step)
        self.gather = gather_shape(device, geometry) if gathers else None
        args = _args(self.real)
        text = codegen.render(
            "operators/cone.cl.mako", args, real=self.real, forward_group=FORWARD_GROUP,
            forward_tile=self.forward_tile, planes=PLANES[self.shared], lanes=LANES,
            magnitude_group=MAGNITUDE_GROUP, gather=self.gather, tile=transpose.TILE,
            source=SOURCE, inverse=INVERSE, point=self.point,
            column=self.column, at_rows=at_rows, at_cols=at_cols,
            at_batch=AT_BATCH.get(device.type, 1),
            backward_items=int(np.prod(BACKWARD_GROUP)), shared=self.shared, forward=self.method,
            phases=gather_phases(geometry) if gathers else None,
            box_rows=int(np.ceil(2 * self._reach[1])) + 2 if gathers else None)
        kernels = (("cone_backward", "cone_gather", "transpose_slices")
                   if self.method == "gather" else
                   ("cone_backward", "cone_forward", "cone_magnitude", "cone_shift"))
        self._kernels = {name: codegen.declared(context, device, text, name, args[name])
                         for name in kernels}
        if self.method == "gather":
            # the gather reads each voxel column's planes from a transposed copy
            self._columns = cl.Buffer(context, cl.mem_flags.READ_WRITE,
                                      4 * int(np.prod(self.volume_shape)))
        else:
            self._parts = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4 * MAGNITUDE_GROUPS)
            self._exponent = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4)
        rate = pacing.FIRST_RATE.get(device.type, pacing.OTHER_RATE)
        self._launch_updates = max(1, int(rate * pacing.LAUNCH_SECONDS))
        self._launch_items = pacing.launch_items(device)
        nz, ny, nx = self.volume_shape
        n_rows, n_cols = geometry.detector_shape
        self.sizes = dict(n_angles=geometry.n_angles, n_rows=n_rows, n_cols=n_cols, nx=nx,
                          ny=ny, nz=nz)

    def _buffer(self, table):
        return cl.Buffer(self.queue.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=np.ascontiguousarray(table))

    def updates(self) -> int:
        """Voxel updates of one application of either operator (the numerator of GUPS)."""
        nz, ny, nx = self.volume_shape
        return nx * ny * nz * self.sizes["n_angles"]

    def restricted(self, angles) -> ConePair:
        """The pair of the projections at indices ``angles`` alone (SART's subsets)."""
        part = copy.copy(self)
        angles = np.asarray(angles)
        part._tables = tuple(np.ascontiguousarray(t[angles]) for t in self._tables)
        part.matrices, part.inverses, part.sources = (self._buffer(t) for t in part._tables)
        part.sizes = dict(self.sizes, n_angles=len(angles))
        part.projection_shape = (len(angles),) + self.projection_shape[1:]
        part.projection_block = int(np.prod(part.projection_shape))
        return part

    def _launch(self, total, items_per_unit):
        """Units (images or planes, of ``total``) a launch takes: about
        pacing.LAUNCH_SECONDS at the device type's first rate, and at least enough to
        fill the device (pacing.launch_items) at ``items_per_unit`` work-items each."""
        by_time = self._launch_updates * total // max(1, self.updates())
        filling = -(-self._launch_items // max(1, items_per_unit))
        return max(1, min(total, max(by_time, filling)))

    def forward(self, volume, projections, wait_for=None, angles=None):
        """projections = A volume (device buffers); the last launch's event. ``angles``
        ``(first, stop)``: those projections alone, each with the bits the whole call
        gives it (a device's share: pybp/iterative/team.py)."""
        n_rows, n_cols = (self.sizes[name] for name in ("n_rows", "n_cols"))
        start, stop = (0, self.sizes["n_angles"]) if angles is None else angles
        n_angles = stop - start
        if n_angles <= 0:
            return None
        if self.method == "gather":
            nz, ny, nx = self.volume_shape
            ready = transpose.launch(self._kernels["transpose_slices"], self.queue, volume,
                                     self._columns, 1, nz, ny * nx, wait_for)
            items, slots, columns = self.gather[:3]
            groups = (-(-n_cols // columns) * items, -(-n_rows // (slots * items)))
            step = self._launch(n_angles, groups[0] * groups[1])
            return pacing.launches(
                lambda first, count, wait: self._kernels["cone_gather"](
                    self.queue, (*groups, count), (items, 1, 1), wait_for=wait,
                    columns=self._columns, matrices=self.matrices, sources=self.sources,
                    projections=projections, u_reach=self._reach[0], first_angle=start + first,
                    **self.sizes),
                n_angles, step, [ready])
        group = (MAGNITUDE_GROUP, 1, 1)
        summed = self._kernels["cone_magnitude"](
            self.queue, (MAGNITUDE_GROUP * MAGNITUDE_GROUPS, 1, 1), group, wait_for=wait_for,
            volume=volume, size=self.volume_block, parts=self._parts)
        scaled = self._kernels["cone_shift"](self.queue, group, group, wait_for=[summed],
                                             parts=self._parts, n_parts=MAGNITUDE_GROUPS,
                                             amplitude_bits=self._bits, shift=self._exponent)
        tile_rows, tile_cols = self.forward_tile
        tiles = (-(-n_cols // tile_cols) * FORWARD_GROUP, -(-n_rows // tile_rows))
        step = self._launch(n_angles, tiles[0] * tiles[1])
        return pacing.launches(
            lambda first, count, wait: self._kernels["cone_forward"](
                self.queue, (*tiles, count), (FORWARD_GROUP, 1, 1), wait_for=wait,
                volume=volume, matrices=self.matrices, sources=self.sources,
                inverses=self.inverses, shift=self._exponent, projections=projections,
                u_reach=self._reach[0], v_reach=self._reach[1], first_angle=start + first,
                **self.sizes),
            n_angles, step, [scaled])

    def backward(self, projections, volume, wait_for=None, planes=None):
        """volume = A^T projections (device buffers); the last launch's event.
        ``planes`` ``(first, stop)``, ``first`` a multiple of :attr:`column`: those
        planes alone, each with the bits the whole call gives it (a work-item takes
        ``column`` planes from a multiple of it)."""
        _, ny, nx = self.volume_shape
        start, stop = (0, self.volume_shape[0]) if planes is None else planes
        if start % self.column:
            raise ValueError(f"planes: the first, {start}, is not a multiple of {self.column}")
        nz = stop - start
        if nz <= 0:
            return None
        column = self.column
        step = self._launch(nz, -(-nx * ny // column))
        step = -(-step // column) * column  # whole columns of voxels a launch
        return pacing.launches(
            lambda first, count, wait: self._kernels["cone_backward"](
                self.queue, global_size((nx, ny, -(-count // column)), BACKWARD_GROUP),
                BACKWARD_GROUP,
                wait_for=wait, projections=projections, matrices=self.matrices,
                sources=self.sources, volume=volume, first_plane=start + first, **self.sizes),
            nz, step, wait_for)

