## The matched pair of parallel-beam operators (docs/design.md, section 9): a forward
## projection A and its exact transpose A^T, linear interpolation on the detector.
##
## Both find where pixel (i, j) of a slice meets the detector at an angle with the one
## function `position` below, in integers, so that each pixel-bin weight is the same
## float in both kernels and <A x, y> = <x, A^T y> holds to the rounding of the sums.
## The back-projection gathers, per pixel, (1 - w) s[bin] + w s[bin + 1]; the forward
## projection gathers, per bin b, (1 - w) x over the pixels at bin b and w x over those
## at b - 1.
<%namespace file="/operators/transpose.cl.mako" import="transpose"/>\
/* pybp matched parallel-beam operators: forward projection and its transpose, ${rows} slice(s) per work-item */
#define ROWS ${rows}
#define FRACTION 0x1p-32f  /* the positions' unit: 32.32 fixed point */

// Pixel (i, j) at the angle of c (cos, -sin and base in 32.32 fixed point:
// Geometry.fixed_constants) meets the detector at h = i cos - j sin + base. Integer sums
// are exact, so h is the same however it is grouped: the forward projection adds the
// line's part once and the pixel's along it. Fixed point holds h to 2^-32 bin per term
// (2e-7 bin at 2048 pixels), where a float32 h at thousands of bins is good to 1e-4.
inline long position(const int i, const int j, const long4 c)
{
    return i * c.s0 + j * c.s1 + c.s2;
}

// The bin floor(h) and, in *weight, h - floor(h) in [0, 1): the low word's top 23 bits
// as the mantissa of a float in [1, 2), less 1 (exact); cheaper than a conversion.
inline int split(const long h, float *weight)
{
    *weight = as_float(0x3f800000u | ((uint)h >> 9)) - 1.0f;
    return (int)(h >> 32);
}

// A^T: work-item (i, j) of ROWS slices from row0 sums over every angle; projections
// (n_angles, n_rows, n_bins), the volume (n_rows, ny, nx). One position serves ROWS
// slices, as the back-projectors' interleaved slices share theirs.
__kernel __attribute__((reqd_work_group_size(${backward_group[0]}, ${backward_group[1]}, 1)))
void parallel_backward(
${args['parallel_backward']}
{
    const int i = get_global_id(0), j = get_global_id(1);
    const int row0 = (first_row_group + get_global_id(2)) * ROWS;
    if (i >= nx || j >= ny || row0 >= n_rows)
        return;
    const int rows = min(ROWS, n_rows - row0);
    float sum[ROWS];
    // Loops over all ROWS, unrolled, keep sum in registers: a last group of fewer rows
    // reads its top row again and stores only its own.
    #pragma unroll
    for (int r = 0; r < ROWS; r++)
        sum[r] = 0.0f;
    const int top = rows - 1;
    for (int a = 0; a < n_angles; a++) {
        float w;
        const int bin = split(position(i, j, constants[a]), &w);
        const bool left = bin >= 0 && bin < n_bins, right = bin + 1 >= 0 && bin + 1 < n_bins;
        __global const float *line = projections + ((size_t)a * n_rows + row0) * n_bins + bin;
        #pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int row = min(r, top) * n_bins;
            const float v0 = left ? line[row] : 0.0f;
            const float v1 = right ? line[row + 1] : 0.0f;
            sum[r] += (1.0f - w) * v0 + w * v1;
        }
    }
    #pragma unroll
    for (int r = 0; r < ROWS; r++)
        if (r < rows)
            volume[((size_t)(row0 + r) * ny + j) * nx + i] = sum[r];
}

// A: work-item (angle a, bins b and b + 1, ROWS slices from row0) sums over the pixels
// whose position falls in [b - 1, b + 2). It steps along the slice axis the angle
// crosses more steeply (|cos| >= |sin|: rows j, else columns i), one line u at a time;
// on each line those pixels are a run of at most 6 of the other index v, solved for in
// float and widened by MARGIN and by what float rounds it by, and each is judged by
// its exact position. No local memory and no barriers: the items of a warp are
// neighbouring angles (the axis 0 of the launch), which read nearly the same pixels of
// a line, a cache line or two for the warp's load. Lines of columns come from a
// transposed copy.
#define MARGIN 1e-3f  /* pixels beyond the solved interval */
#define ROUNDING 4e-6f  /* of the interval's ends' magnitudes: 8x float32's relative error */

__kernel __attribute__((reqd_work_group_size(${forward_group[0]}, ${forward_group[1]}, 1)))
void parallel_forward(
${args['parallel_forward']}
{
    const int a = first_angle + get_global_id(0);
    const int b = 2 * get_global_id(1);
    const int row0 = get_global_id(2) * ROWS;
    if (b >= n_bins || a >= n_angles)
        return;
    const int rows = min(ROWS, n_rows - row0);
    const long4 c = constants[a];
    const float cosine = convert_float(c.s0) * FRACTION, sine = -convert_float(c.s1) * FRACTION;
    const bool by_rows = fabs(cosine) >= fabs(sine);
    // h = u cu + v cv + base along line u; line u of slice r at slice[r] + u inner
    const long cu = by_rows ? c.s1 : c.s0, cv = by_rows ? c.s0 : c.s1;
    const int outer = by_rows ? ny : nx, inner = by_rows ? nx : ny;
    __global const float *slice[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; r++)  // a last group of fewer rows reads its top row again
        slice[r] = (by_rows ? volume : transposed) + (size_t)(row0 + min(r, rows - 1)) * ny * nx;
    // v = (h - base - u cu) / cv: the interval's ends at u = 0 and their step per line
    const float scale = 1.0f / (convert_float(cv) * FRACTION), base = convert_float(c.s2) * FRACTION;
    const float e0 = ((float)(b - 1) - base) * scale, e1 = ((float)(b + 2) - base) * scale;
    const float slope = -convert_float(cu) * FRACTION * scale;
    float sum0[ROWS], sum1[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; r++)
        sum0[r] = sum1[r] = 0.0f;
    for (int u = 0; u < outer; u++) {
        const float f0 = mad((float)u, slope, e0), f1 = mad((float)u, slope, e1);
        const float slack = MARGIN + ROUNDING * (fabs(f0) + fabs(f1) + fabs((float)u * slope));
        const int first = max((int)floor(fmin(f0, f1) - slack), 0);
        const int last = min((int)floor(fmax(f0, f1) + slack), inner - 1);
        const size_t line = (size_t)u * inner;
        long h = u * cu + first * cv + c.s2;  // exact: position(i, j, c) of (u, first)
        for (int v = first; v <= last; v++, h += cv) {
            float w;
            const int bin = split(h, &w);
            // this pixel's weights at b (bins b - 1 and b give w and 1 - w) and at b + 1
            const float w0 = bin == b - 1 ? w : bin == b ? 1.0f - w : 0.0f;
            const float w1 = bin == b ? w : bin == b + 1 ? 1.0f - w : 0.0f;
            #pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const float x = slice[r][line + v];
                sum0[r] += w0 * x;
                sum1[r] += w1 * x;
            }
        }
    }
    __global float *out = projections + ((size_t)a * n_rows + row0) * n_bins + b;
    #pragma unroll
    for (int r = 0; r < ROWS; r++)
        if (r < rows) {
            out[(size_t)r * n_bins] = sum0[r];
            if (b + 1 < n_bins)
                out[(size_t)r * n_bins + 1] = sum1[r];
        }
}

${transpose(args['transpose_slices'], tile)}
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
