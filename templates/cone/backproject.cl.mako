## The voxel-driven cone-beam back-projection (docs/design.md, section 8): each work-item
## takes a column of voxels_per_item voxels along z, projects each voxel centre onto each
## image of the pass by its matrix, samples the image bilinearly (zero beyond its edge
## pixels) and adds the samples in registers (FDK: times 1/w^2, the depth weight); each
## voxel is written once per launch. The images hold a window of detector rows
## (first_row on): the rows a slab of the volume projects onto.
##
## exact: bilinear interpolation in arithmetic from a buffer; texture: the images in an
## image2d_array_t, interpolated by the sampler (8-bit weights on NVIDIA).
## shared_column (a circular orbit, untilted detector: a matrix's z column is (0, m6, 0)):
## the column and depth are the same for every voxel of an item, each further voxel
## costs a row step, one fetch and one add.
${"/* pybp cone-beam back-projection: %s family, %d voxels per item, %d projections per pass%s */" % (p.family, p.voxels_per_item, p.projections_per_pass, ", shared column" if shared_column else "")}
% if p.positions == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double real;
% else:
typedef float real;
% endif

% if p.family == "texture":
__constant sampler_t linear = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_LINEAR;

// Image q at detector row r (the window starts at first_row), column c. Texel centres
// sit at +0.5; the border beyond the image reads zero, so within one pixel of the edge
// the value falls linearly to zero, as in the exact family. The row is rounded to
// float before the window's first row is taken from it (exactly), so that any window
// samples a voxel alike.
#define SAMPLE(q, r, c) read_imagef(projections, linear, texel(q, r, c, first_row)).x

inline float4 texel(const int q, const real r, const real c, const int first_row)
{
    return (float4)((float)c + 0.5f, ((float)r + 0.5f) - first_row, (float)q, 0.0f);
}
% else:
// The image at row r, column c (from the first pixel's centre), zero beyond its edge
// pixels: within one pixel of the edge the value falls linearly to zero.
inline float sample(__global const float *image, const int n_rows, const int n_cols,
                    const real r, const real c)
{
    const real r0 = floor(r), c0 = floor(c);
    if (!(r0 >= -1 && r0 <= n_rows - 1 && c0 >= -1 && c0 <= n_cols - 1))
        return 0.0f;  // (also NaN; and before converting a huge value to int)
    const int a = (int)r0, b = (int)c0;
    const float fr = (float)(r - r0), fc = (float)(c - c0);
    const bool top = a >= 0, bottom = a + 1 < n_rows, left = b >= 0, right = b + 1 < n_cols;
    const size_t at = (size_t)a * n_cols + b;
    const float v00 = top && left ? image[at] : 0.0f;
    const float v01 = top && right ? image[at + 1] : 0.0f;
    const float v10 = bottom && left ? image[at + n_cols] : 0.0f;
    const float v11 = bottom && right ? image[at + n_cols + 1] : 0.0f;
    return (1.0f - fr) * ((1.0f - fc) * v00 + fc * v01) + fr * ((1.0f - fc) * v10 + fc * v11);
}

// Image q at detector row r (the window starts at first_row), column c. (A whole
// number of rows taken from a position is exact in floating point: any window samples
// a voxel alike.)
#define SAMPLE(q, r, c) sample(image(projections, q, row_stride, n_cols), n_rows, n_cols, (r) - first_row, c)

inline __global const float *image(__global const float *images, const int q, const int row_stride,
                                   const int n_cols)
{
    return images + (size_t)q * row_stride * n_cols;
}
% endif

% if distance_weight:
#define WEIGHTED(value, depth) ((value) * (float)(depth) * (float)(depth))
% else:
#define WEIGHTED(value, depth) (value)
% endif

__kernel __attribute__((reqd_work_group_size(${p.group[0]}, ${p.group[1]}, 1)))
void cone_backproject(
${args['cone_backproject']}
{
    const int i = get_global_id(0), j = get_global_id(1);
    const int k0 = first_plane + get_global_id(2) * ${p.voxels_per_item};
    if (i >= nx || j >= ny)
        return;
    float sum[${p.voxels_per_item}];
    for (int v = 0; v < ${p.voxels_per_item}; ++v)
        sum[v] = 0.0f;
    for (int q = 0; q < n_projections; ++q) {
        __constant const real *m = matrices + ${matrix_values} * q;
        // The column's first voxel; each further one adds the matrix's z column.
        const real c = m[0] * i + m[1] * j + m[2] * k0 + m[3];
        const real r = m[4] * i + m[5] * j + m[6] * k0 + m[7];
        const real w = m[8] * i + m[9] * j + m[10] * k0 + m[11];
% if shared_column:
        const real depth = 1 / w, column = c * depth, step = m[6] * depth, row = r * depth;
        #pragma unroll
        for (int v = 0; v < ${p.voxels_per_item}; ++v)
            sum[v] += WEIGHTED(SAMPLE(q, row + step * v, column), depth);
% else:
        #pragma unroll
        for (int v = 0; v < ${p.voxels_per_item}; ++v) {
            const real depth = 1 / (w + m[10] * v);
            sum[v] += WEIGHTED(SAMPLE(q, (r + m[6] * v) * depth, (c + m[2] * v) * depth), depth);
        }
% endif
    }
    for (int v = 0; v < ${p.voxels_per_item}; ++v) {
        const int plane = k0 - first_plane + v;  // in the volume buffer
        if (plane < n_planes) {
            const size_t at = ((size_t)plane * ny + j) * nx + i;
            volume[at] = accumulate ? volume[at] + sum[v] : sum[v];
        }
    }
}
