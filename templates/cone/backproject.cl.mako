## The voxel-driven cone-beam back-projection (docs/design.md, section 8): each work-item
## takes a column of voxels_per_item voxels along z, projects each voxel centre onto each
## image of the pass by its matrix, samples the image bilinearly (zero beyond its edge
## pixels) and adds the samples in registers; each voxel is written once per launch.
${"/* pybp cone-beam back-projection: %s family, %d voxels per item, %d projections per pass */" % (p.family, p.voxels_per_item, p.projections_per_pass)}
% if p.positions == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double real;
% else:
typedef float real;
% endif

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
        __global const float *image = projections + (size_t)q * n_rows * n_cols;
        // The column's first voxel; each further one adds the matrix's z column.
        const real c = m[0] * i + m[1] * j + m[2] * k0 + m[3];
        const real r = m[4] * i + m[5] * j + m[6] * k0 + m[7];
        const real w = m[8] * i + m[9] * j + m[10] * k0 + m[11];
        #pragma unroll
        for (int v = 0; v < ${p.voxels_per_item}; ++v) {
            const real depth = 1 / (w + m[10] * v);
            sum[v] += sample(image, n_rows, n_cols, (r + m[6] * v) * depth,
                             (c + m[2] * v) * depth);
        }
    }
    for (int v = 0; v < ${p.voxels_per_item}; ++v) {
        const int plane = k0 - first_plane + v;  // in the volume buffer
        if (plane < n_planes) {
            const size_t at = ((size_t)plane * ny + j) * nx + i;
            volume[at] = accumulate ? volume[at] + sum[v] : sum[v];
        }
    }
}
