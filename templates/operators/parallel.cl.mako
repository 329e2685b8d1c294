## The matched pair of parallel-beam operators (docs/design.md, section 9): a forward
## projection A and its exact transpose A^T, linear interpolation on the detector.
##
## Both find where pixel (i, j) of a slice meets the detector at an angle with the one
## function `position` below, so that each pixel-bin weight is the same float in both
## kernels and <A x, y> = <x, A^T y> holds to the rounding of the sums. The back-
## projection gathers, per pixel, (1 - w) s[bin] + w s[bin + 1]; the forward projection
## gathers, per bin b, (1 - w) x over the pixels at bin b and w x over those at b - 1.
/* pybp matched parallel-beam operators: forward projection and its transpose, ${rows} slice(s) per work-item */
#define ROWS ${rows}
// The error-free sums of `position` need a*b+c left as written, not contracted to fma.
#pragma OPENCL FP_CONTRACT OFF

inline float two_sum(const float a, const float b, float *error)
{
    const float s = a + b;
    const float bb = s - a;
    *error += (a - (s - bb)) + (b - bb);
    return s;
}

inline float two_diff(const float a, const float b, float *error)
{
    const float s = a - b;
    const float bb = s - a;
    *error += (a - (s - bb)) - (b + bb);
    return s;
}

// Pixel (i, j) at the angle of c (cos, sin, base, base's residual, cos's and sin's
// residuals: Geometry.projection_constants with 8 floats) meets the detector at
// h = i cos - j sin + base: returned as the bin floor(h) and *weight = h - floor(h) in
// [0, 1). Positions reach thousands of bins, where a float32 h is good to 1e-4 bin only;
// h is kept as a float and its rounding error (fma gives the products' errors exactly),
// so the weight is good to float32 rounding of a number below 1.
inline int position(const int i, const int j, const float8 c, float *weight)
{
    const float x = (float)i, y = (float)j;
    const float px = x * c.s0, py = y * c.s1;
    float error = (fma(x, c.s0, -px) - fma(y, c.s1, -py)) + ((x * c.s4 - y * c.s5) + c.s3);
    const float h = two_sum(two_diff(px, py, &error), c.s2, &error);
    float bin = floor(h + error);
    float w = (h - bin) + error;
    if (w < 0.0f) {
        bin -= 1.0f;
        w += 1.0f;
    } else if (w >= 1.0f) {
        bin += 1.0f;
        w -= 1.0f;
    }
    *weight = w;
    return (int)bin;
}

inline float bin_value(__global const float *row, const int n_bins, const int bin)
{
    return bin >= 0 && bin < n_bins ? row[bin] : 0.0f;
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
    for (int r = 0; r < ROWS; r++)
        sum[r] = 0.0f;
    for (int a = 0; a < n_angles; a++) {
        float w;
        const int bin = position(i, j, constants[a], &w);
        const bool left = bin >= 0 && bin < n_bins, right = bin + 1 >= 0 && bin + 1 < n_bins;
        __global const float *line = projections + ((size_t)a * n_rows + row0) * n_bins + bin;
        for (int r = 0; r < rows; r++) {
            const float v0 = left ? line[(size_t)r * n_bins] : 0.0f;
            const float v1 = right ? line[(size_t)r * n_bins + 1] : 0.0f;
            sum[r] += (1.0f - w) * v0 + w * v1;
        }
    }
    for (int r = 0; r < rows; r++)
        volume[((size_t)(row0 + r) * ny + j) * nx + i] = sum[r];
}

// A: work-item (bin, ROWS slices from row0, angle) sums over the pixels whose position
// falls in [bin - 1, bin + 1). Along the slice axis the angle crosses more steeply
// (|cos| >= |sin|: rows j, else columns i) the group steps one line u at a time; on that
// line the pixels its GROUP bins can reach are one segment of the other index, solved
// for in float and widened by MARGIN and by what float rounds it by. The group finds
// each segment pixel's position once (`position` itself, so the rounding of the
// segment never changes a weight) and loads its values into local memory; each item
// then adds the pixels of its own bin's interval.
#define GROUP ${forward_group[0]}
#define SEGMENT ${segment}  /* > (GROUP + 2) sqrt(2) + 3: the longest segment */
#define MARGIN 1e-3f  /* pixels beyond the solved interval */
#define ROUNDING 4e-6f  /* of the interval's ends' magnitudes: 8x float32's relative error */

// The inner indices [*first, *last] that positions in [low, high) + base may take on
// line u: slope and scale solve the position for the inner index.
inline void interval(const int u, const float slope, const float scale, const float low,
                     const float high, int *first, int *last)
{
    const float e0 = mad((float)u, slope, low * scale), e1 = mad((float)u, slope, high * scale);
    const float slack = MARGIN + ROUNDING * (fabs(e0) + fabs(e1) + fabs((float)u * slope));
    *first = (int)floor(fmin(e0, e1) - slack);
    *last = (int)floor(fmax(e0, e1) + slack);
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void parallel_forward(
${args['parallel_forward']}
{
    const int item = get_local_id(0);
    const int b0 = get_group_id(0) * GROUP, b = b0 + item;
    const int a = first_angle + get_global_id(2);
    const int row0 = get_global_id(1) * ROWS;
    const int rows = min(ROWS, n_rows - row0);
    const float8 c = constants[a];
    __global const float *slices = volume + (size_t)row0 * ny * nx;
    __global const float *columns = transposed + (size_t)row0 * ny * nx;
    const size_t slice_size = (size_t)ny * nx;
    __local int bins[SEGMENT];
    __local float weights[SEGMENT];
    __local float values[ROWS][SEGMENT];
    float sum[ROWS];
    for (int r = 0; r < ROWS; r++)
        sum[r] = 0.0f;
    const bool by_rows = fabs(c.s0) >= fabs(c.s1);
    const int outer = by_rows ? ny : nx, inner = by_rows ? nx : ny;
    // by rows: i = (h - base + j sin) / cos; by columns: j = (i cos + base - h) / sin
    const float slope = by_rows ? c.s1 / c.s0 : c.s0 / c.s1;
    const float scale = by_rows ? 1.0f / c.s0 : -1.0f / c.s1;
    const float low = (float)(b - 1) - c.s2, high = (float)(b + 1) - c.s2;
    const float group_low = (float)(b0 - 1) - c.s2, group_high = (float)(b0 + GROUP + 1) - c.s2;
    for (int u = 0; u < outer; u++) {
        int start, end, first, last;
        interval(u, slope, scale, group_low, group_high, &start, &end);
        start = max(start, 0);
        end = min(min(end, inner - 1), start + SEGMENT - 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = item; k <= end - start; k += GROUP) {
            const int v = start + k;
            const int i = by_rows ? v : u, j = by_rows ? u : v;
            float w;
            bins[k] = position(i, j, c, &w);
            weights[k] = w;
            // Along the line: consecutive items read consecutive addresses of one copy.
            __global const float *line = by_rows ? slices + (size_t)j * nx : columns + (size_t)i * ny;
            for (int r = 0; r < rows; r++)
                values[r][k] = line[r * slice_size + v];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        interval(u, slope, scale, low, high, &first, &last);
        first = max(first, start);
        last = min(last, end);
        for (int v = first; v <= last; v++) {
            const int bin = bins[v - start];
            if (bin != b && bin != b - 1)
                continue;
            const float weight = bin == b ? 1.0f - weights[v - start] : weights[v - start];
            for (int r = 0; r < rows; r++)
                sum[r] += weight * values[r][v - start];
        }
    }
    if (b < n_bins && a < n_angles)
        for (int r = 0; r < rows; r++)
            projections[((size_t)a * n_rows + row0 + r) * n_bins + b] = sum[r];
}

// transposed = each slice of volume transposed, (n_rows, nx, ny): the forward
// projection reads lines of columns from it as lines of rows from the volume, whole
// cache lines at a time (a column of a slice is one float per cache line). Through a
// TILE x TILE block of local memory, so that both the read and the write are
// consecutive; one column more keeps the block's columns on distinct banks.
#define TILE ${tile}
__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void transpose_slices(
${args['transpose_slices']}
{
    __local float block[TILE][TILE + 1];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int x0 = get_group_id(0) * TILE, y0 = get_group_id(1) * TILE;
    const size_t slice = (size_t)get_global_id(2) * ny * nx;
    if (x0 + tx < nx && y0 + ty < ny)
        block[ty][tx] = volume[slice + (size_t)(y0 + ty) * nx + x0 + tx];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (y0 + tx < ny && x0 + ty < nx)
        transposed[slice + (size_t)(x0 + ty) * ny + y0 + tx] = block[tx][ty];
}
