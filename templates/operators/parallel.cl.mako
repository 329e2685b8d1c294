## The matched pair of parallel-beam operators (docs/design.md, section 9): a forward
## projection A and its exact transpose A^T, distance-driven: a voxel's shadow on the
## detector is a box of the angle's footprint width about its position, each ray
## through it as long as the angle's amplitude (Geometry.footprints), so that a bin's
## weight is the mean chord over the bin, in the geometry's units of length.
##
## Both find where the box of voxel (i, j) begins at an angle with the one function
## `position` below, in integers, and its weights on the bins with `footprint`, so that
## each voxel-bin weight is the same float in both kernels and <A x, y> = <x, A^T y>
## holds to the rounding of the sums. The back-projection gathers, per voxel, the
## weighted bins its box covers; the forward projection gathers, per bin, the voxels
## whose boxes cover it. The amplitude, one per angle, multiplies the projections where
## A^T stacks them and A's sums where it stores them.
/* pybp matched parallel-beam operators: forward projection and its transpose, ${rows} slice(s) per work-item, footprints over up to ${span} bins */
#define ROWS ${rows}
#define SPAN ${span}  /* the most bins a voxel's footprint covers: ceil(widest) + 1 */
#define FRACTION 0x1p-32f  /* the positions' unit: 32.32 fixed point */
// One pixel's ROWS slices side by side, as the back-projectors interleave sinograms
// into float2/float4 texels: one vector load serves every slice of a work-item.
typedef ${"float" if rows == 1 else "float%d" % rows} stack;

inline stack stacked(const float *values)
{
    return ${"values[0]" if rows == 1 else "vload%d(0, values)" % rows};
}

inline void unstacked(const stack values, float *out)
{
    ${"out[0] = values" if rows == 1 else "vstore%d(values, 0, out)" % rows};
}

// Voxel (i, j) at the angle of c (cos, -sin and base in 32.32 fixed point:
// Geometry.fixed_constants) has its footprint's lower end, plus half a bin, at
// h = i cos - j sin + base. Integer sums are exact, so h is the same however it is
// grouped: the forward projection adds the line's part once and the voxel's along it.
// Fixed point holds h to 2^-32 bin per term (2e-7 bin at 2048 voxels), where a float32
// h at thousands of bins is good to 1e-4.
inline long position(const int i, const int j, const long4 c)
{
    return i * c.s0 + j * c.s1 + c.s2;
}

// The bin floor(h) (the first its footprint covers) and, in *fraction, 1 + h - floor(h)
// in [1, 2): the low word's top 23 bits as the mantissa of a float in [1, 2) (exact);
// cheaper than a conversion, and footprint takes it as it is (a subtraction less a
// voxel: A 3% faster on the H200).
inline int split(const long h, float *fraction)
{
    *fraction = as_float(0x3f800000u | ((uint)h >> 9));
    return (int)(h >> 32);
}

// The angle's footprint width in bins and the amplitude (the chord, in the geometry's
// unit of length), float32 bits in the table's fourth value.
inline float width_of(const long4 c)
{
    return as_float((uint)c.s3);
}

inline float amplitude_of(const long4 c)
{
    return as_float((uint)(c.s3 >> 32));
}

// The shares of bins floor(h) + m, m < SPAN, that a footprint covers: its box spans
// [f, f + width) in bins counted from bin floor(h)'s lower edge, f = h - floor(h) (f1
// is 1 + f, from split), and bin floor(h) + m spans [m, m + 1). Both kernels call this
// with the same floats.
inline void footprint(const float f1, const float width, float *shares)
{
% if span == 2:
    // no wider than a bin: what reaches into the second bin (f1 and 2 - width are in
    // [1, 2], so their difference is exact), and the rest
    shares[1] = fmax(0.0f, f1 - (2.0f - width));
    shares[0] = width - shares[1];
% else:
    const float f = f1 - 1.0f;  // exact
    #pragma unroll
    for (int m = 0; m < SPAN; m++)
        shares[m] = fmax(0.0f, fmin(f + width, (float)(m + 1)) - fmax(f, (float)m));
% endif
}

// The copies both kernels read, group g of ROWS slices (zeros past the last slice):
// by_rows (groups, ny, nx) and by_columns (groups, nx, ny) of the volume (n_rows, ny,
// nx), so that the forward projection's lines along either axis are consecutive stacks.
// Work-item (x, y, g) reads its pixel's stack, consecutive along x, and writes it to
// by_rows; by_columns takes a TILE x TILE block through local memory, so that its writes
// are consecutive along y too (1.6 ms for 64 slices of 2048^2 on the H100).
#define TILE ${tile}
__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void stack_slices(
${args['stack_slices']}
{
    __local stack block[TILE][TILE + 1];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int x0 = get_group_id(0) * TILE, y0 = get_group_id(1) * TILE, g = get_global_id(2);
    const int x = x0 + tx, y = y0 + ty;
    if (x < nx && y < ny) {
        float values[ROWS];
        #pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int row = g * ROWS + r;
            values[r] = row < n_rows ? volume[((size_t)row * ny + y) * nx + x] : 0.0f;
        }
        const stack value = stacked(values);
        by_rows[((size_t)g * ny + y) * nx + x] = value;
        block[ty][tx] = value;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (y0 + tx < ny && x0 + ty < nx)
        by_columns[((size_t)g * nx + x0 + ty) * ny + y0 + tx] = block[tx][ty];
}

// stacks (n_angles, groups, n_bins) of the projections (n_angles, n_rows, n_bins) for
// the transpose, times each angle's amplitude: work-item (bin, angle, g).
__kernel __attribute__((reqd_work_group_size(${projection_group[0]}, 1, 1)))
void stack_projections(
${args['stack_projections']}
{
    const int b = get_global_id(0), a = get_global_id(1), g = get_global_id(2);
    if (b >= n_bins)
        return;
    const float amplitude = amplitude_of(constants[a]);
    float values[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int row = g * ROWS + r;
        values[r] = row < n_rows ?
            amplitude * projections[((size_t)a * n_rows + row) * n_bins + b] : 0.0f;
    }
    const int groups = (n_rows + ROWS - 1) / ROWS;
    stacks[((size_t)a * groups + g) * n_bins + b] = stacked(values);
}

// A^T: work-item (i, j) of the ROWS slices of group g sums over every angle the bins
// its footprint covers, each times its share, from the projections' stacks (the
// amplitude is in them); the volume (n_rows, ny, nx). One position serves ROWS slices.
// A warp is a 4 x 8 block of pixels, whose positions at an angle span few bins: fewer
// cache lines per load than a 16 x 2 one (2552 against 1946 G updates/s on the H100).
__kernel __attribute__((reqd_work_group_size(${backward_group[0]}, ${backward_group[1]}, 1)))
void parallel_backward(
${args['parallel_backward']}
{
    const int i = get_global_id(0), j = get_global_id(1);
    const int g = first_row_group + get_global_id(2), row0 = g * ROWS;
    if (i >= nx || j >= ny || row0 >= n_rows)
        return;
    const int groups = (n_rows + ROWS - 1) / ROWS;
    stack sum = 0.0f;
    for (int a = 0; a < n_angles; a++) {
        const long4 c = constants[a];
        float f1;
        const int bin = split(position(i, j, c), &f1);
        __global const stack *line = stacks + ((size_t)a * groups + g) * n_bins + bin;
        stack values[SPAN];
        #pragma unroll
        for (int m = 0; m < SPAN; m++)
            values[m] = bin + m >= 0 && bin + m < n_bins ? line[m] : 0.0f;
        float shares[SPAN];
        footprint(f1, width_of(c), shares);
        #pragma unroll
        for (int m = 0; m < SPAN; m++)
            sum += shares[m] * values[m];
    }
    float sums[ROWS];
    unstacked(sum, sums);
    #pragma unroll
    for (int r = 0; r < ROWS; r++)
        if (row0 + r < n_rows)
            volume[((size_t)(row0 + r) * ny + j) * nx + i] = sums[r];
}

// A: work-item (angle a, bins b to b + BINS - 1, the ROWS slices of group g) sums over
// the voxels whose footprint covers one of those bins: those whose first bin
// (floor(h)) lies in [b - SPAN + 1, b + BINS). It steps along the slice axis the angle
// crosses more steeply (|cos| >= |sin|: rows j, else columns i), one line u at a time;
// on each line those voxels are a run of at most (BINS + SPAN - 1) sqrt(2) / pitch + 1
// of the other index v, solved for in float and widened by MARGIN and by what float
// rounds it by, and each is judged by its exact position. No local memory and no
// barriers: the items of a warp are neighbouring angles (the axis 0 of the launch),
// which read nearly the same voxels of a line, a few cache lines for the warp's load.
// Each voxel serves the item's bins its footprint covers: BINS bins an item share the
// run's loads (pybp/parallel/project.py: BINS_PER_ITEM).
#define BINS ${bins}
#define MARGIN 1e-3f  /* voxels beyond the solved interval */
#define ROUNDING 4e-6f  /* of the interval's ends' magnitudes: 8x float32's relative error */

__kernel __attribute__((reqd_work_group_size(${forward_group[0]}, ${forward_group[1]}, 1)))
void parallel_forward(
${args['parallel_forward']}
{
    const int a = first_angle + get_global_id(0);
    const int b = BINS * get_global_id(1);
    const int g = get_global_id(2), row0 = g * ROWS;
    if (b >= n_bins || a >= n_angles)
        return;
    const long4 c = constants[a];
    const float width = width_of(c);
    const float cosine = convert_float(c.s0) * FRACTION, sine = -convert_float(c.s1) * FRACTION;
    const bool by_row = fabs(cosine) >= fabs(sine);
    // h = u cu + v cv + base along line u, whose stacks start at lines + u inner
    const long cu = by_row ? c.s1 : c.s0, cv = by_row ? c.s0 : c.s1;
    const int outer = by_row ? ny : nx, inner = by_row ? nx : ny;
    __global const stack *lines = (by_row ? by_rows : by_columns) + (size_t)g * ny * nx;
    // v = (h - base - u cu) / cv: the interval's ends at u = 0 and their step per line,
    // widened once for all lines: line u's ends t0 and t1 round by ROUNDING of
    // |t0| + |t1| + u |slope| at most, which is below |e0| + |e1| + 3 outer |slope|
    const float scale = 1.0f / (convert_float(cv) * FRACTION), base = convert_float(c.s2) * FRACTION;
    const float e0 = ((float)(b - SPAN + 1) - base) * scale, e1 = ((float)(b + BINS) - base) * scale;
    const float slope = -convert_float(cu) * FRACTION * scale;
    const float slack = MARGIN + ROUNDING * (fabs(e0) + fabs(e1) + 3.0f * outer * fabs(slope));
    const float low = fmin(e0, e1) - slack, high = fmax(e0, e1) + slack;
    stack sums[BINS];
    #pragma unroll
    for (int k = 0; k < BINS; k++)
        sums[k] = 0.0f;
    long start = c.s2;  // position(0, 0) of line u: u cu + base
    for (int u = 0; u < outer; u++, start += cu) {
        const int first = max(convert_int_rtn(mad((float)u, slope, low)), 0);
        const int last = min(convert_int_rtn(mad((float)u, slope, high)), inner - 1);
        __global const stack *line = lines + (size_t)u * inner;
        long h = start + first * cv;  // exact: the position of (u, first)
        // Not unrolled: with 4 bins an item, NVIDIA's default unrolling of this short
        // loop of varying length ran 11% slower on the H100, 2 at a time 21% slower.
        #pragma unroll 1
        for (int v = first; v <= last; v++, h += cv) {
            float f1;
            const int bin = split(h, &f1);
            const stack x = line[v];
            float shares[SPAN];
            footprint(f1, width, shares);
            // this voxel's weight at bin b + k: its share of the bin, bin + m = b + k
            #pragma unroll
            for (int k = 0; k < BINS; k++) {
                float weight = 0.0f;
                #pragma unroll
                for (int m = 0; m < SPAN; m++)
                    weight = bin + m == b + k ? shares[m] : weight;
                sums[k] += weight * x;
            }
        }
    }
    const float amplitude = amplitude_of(c);
    __global float *out = projections + ((size_t)a * n_rows + row0) * n_bins + b;
    #pragma unroll
    for (int k = 0; k < BINS; k++) {
        float values[ROWS];
        unstacked(amplitude * sums[k], values);
        #pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (row0 + r < n_rows && b + k < n_bins)
                out[(size_t)r * n_bins + k] = values[r];
    }
}

// projections (n_angles, n_rows, n_bins) from the stream's sinograms (n_rows, n_angles,
// n_bins): work-item (bin, angle, row), reads and writes consecutive along the bins.
__kernel __attribute__((reqd_work_group_size(${to_projections_group[0]}, 1, 1)))
void sinograms_to_projections(
${args['sinograms_to_projections']}
{
    const int b = get_global_id(0), a = get_global_id(1), r = get_global_id(2);
    if (b < n_bins)
        projections[((size_t)a * n_rows + r) * n_bins + b] =
            sinograms[((size_t)r * n_angles + a) * n_bins + b];
}
