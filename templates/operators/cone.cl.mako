## The matched pair of cone-beam operators (docs/design.md, section 9): a forward
## projection A and its exact transpose A^T, bilinear interpolation on the detector.
##
## Both find where voxel (i, j, k) projects in image q with the one function
## `cone_position` below (the voxel's matrix row by row, in `real`), so that each voxel-
## pixel weight comes from the same floats in both kernels. A^T gathers, per voxel, the
## bilinear sample of each image (zero beyond its edge pixels); A gathers, per detector
## pixel, each voxel whose sample reads it, with the weight the sample gives it. Voxels
## at or behind a source's plane (w <= 0) are left out of both.
/* pybp matched cone-beam operators: forward projection and its transpose */
% if real == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
typedef ${real} real;

// Voxel (i, j, k) in image q of matrices m (12 values: voxel indices to (c w, r w, w)):
// its homogeneous position, row by row.
inline void cone_homogeneous(__global const real *m, const int i, const int j, const int k,
                             real *c, real *r, real *w)
{
    *c = m[0] * i + m[1] * j + m[2] * k + m[3];
    *r = m[4] * i + m[5] * j + m[6] * k + m[7];
    *w = m[8] * i + m[9] * j + m[10] * k + m[11];
}

// Of a homogeneous position: false where it is at or behind the source's plane, or
// beyond the image's bilinear reach; else its pixel (*row, *col) = floor of its
// position and the fractions.
inline bool cone_split(const real c, const real r, const real w, const int n_rows,
                       const int n_cols, int *row, int *col, float *fr, float *fc)
{
    if (!(w > 0))
        return false;
    const real u = c / w, v = r / w;
    const real u0 = floor(u), v0 = floor(v);
    if (!(v0 >= -1 && v0 <= n_rows - 1 && u0 >= -1 && u0 <= n_cols - 1))
        return false;
    *row = (int)v0;
    *col = (int)u0;
    *fr = (float)(v - v0);
    *fc = (float)(u - u0);
    return true;
}

// Both together: the one position function of the pair.
inline bool cone_position(__global const real *m, const int i, const int j, const int k,
                          const int n_rows, const int n_cols, int *row, int *col,
                          float *fr, float *fc)
{
    real c, r, w;
    cone_homogeneous(m, i, j, k, &c, &r, &w);
    return cone_split(c, r, w, n_rows, n_cols, row, col, fr, fc);
}

inline float pixel(__global const float *image, const int n_rows, const int n_cols,
                   const int r, const int c)
{
    return r >= 0 && r < n_rows && c >= 0 && c < n_cols ? image[(size_t)r * n_cols + c] : 0.0f;
}

// A^T: work-item (i, j, k) sums each image's bilinear sample.
__kernel void cone_backward(
${args['cone_backward']}
{
    const int i = get_global_id(0), j = get_global_id(1), k = first_plane + get_global_id(2);
    if (i >= nx || j >= ny || k >= nz)
        return;
    float sum = 0.0f;
    for (int q = 0; q < n_angles; q++) {
        int r, c;
        float fr, fc;
        if (!cone_position(matrices + 12 * q, i, j, k, n_rows, n_cols, &r, &c, &fr, &fc))
            continue;
        __global const float *image = projections + (size_t)q * n_rows * n_cols;
        sum += (1.0f - fr) * ((1.0f - fc) * pixel(image, n_rows, n_cols, r, c)
                              + fc * pixel(image, n_rows, n_cols, r, c + 1))
             + fr * ((1.0f - fc) * pixel(image, n_rows, n_cols, r + 1, c)
                     + fc * pixel(image, n_rows, n_cols, r + 1, c + 1));
    }
    volume[((size_t)k * ny + j) * nx + i] = sum;
}

// A: work-item (column, row, image) sums over the voxels whose position falls in
// [row - 1, row + 1) x [column - 1, column + 1). The rays through that window's corners
// (rays: voxel-index points x = w d - s, d = inverse(M) (c, r, 1), s = inverse(M) m4)
// meet each plane along the ray's steepest axis in a quadrilateral, the window's
// preimage there; the voxels of its bounding box, widened by BOX_MARGIN for the
// rounding of the corners, are the candidates, and each is judged by `cone_position`
// itself, so the rounding of the box never changes a weight.
#define REJECT 0.01f  /* pixels beyond the window a float position may stray */
% if real == "double":
#define BOX_MARGIN 1e-6  /* voxels: positions in double are good to 1e-12 of thousands */
% else:
#define BOX_MARGIN 0.05f  /* voxels: positions in float, to 1e-7 of thousands of pixels */
% endif
__kernel void cone_forward(
${args['cone_forward']}
{
    const int c = get_global_id(0), r = get_global_id(1), q = first_angle + get_global_id(2);
    if (c >= n_cols || r >= n_rows || q >= n_angles)
        return;
    __global const real *m = matrices + 12 * q;
    __global const real *t = inverses + 12 * q;  // inverse(M) row by row, then s
    const int size[3] = {nx, ny, nz};
    // The central ray's direction picks the axis.
    real d[3];
    for (int a = 0; a < 3; a++)
        d[a] = t[3 * a] * c + t[3 * a + 1] * r + t[3 * a + 2];
    const int axis = fabs(d[0]) >= fabs(d[1]) && fabs(d[0]) >= fabs(d[2]) ? 0
                   : fabs(d[1]) >= fabs(d[2]) ? 1 : 2;
    const int a1 = axis == 0 ? 1 : 0, a2 = axis == 2 ? 1 : 2;
    const real s_axis = t[9 + axis], s1 = t[9 + a1], s2 = t[9 + a2];
    // A corner ray meets plane p at w = (p + s_axis) / d_axis: its other two indices
    // are lines in p, x = p slope + offset, found once here.
    real slope1[4], offset1[4], slope2[4], offset2[4];
    bool meets[4];
    for (int n = 0; n < 4; n++) {
        const real cc = c + (n & 1 ? 1 : -1), rr = r + (n & 2 ? 1 : -1);
        const real along = t[3 * axis] * cc + t[3 * axis + 1] * rr + t[3 * axis + 2];
        const real k1 = (t[3 * a1] * cc + t[3 * a1 + 1] * rr + t[3 * a1 + 2]) / along;
        const real k2 = (t[3 * a2] * cc + t[3 * a2 + 1] * rr + t[3 * a2 + 2]) / along;
        meets[n] = along != 0;
        slope1[n] = k1;
        offset1[n] = s_axis * k1 - s1;
        slope2[n] = k2;
        offset2[n] = s_axis * k2 - s2;
    }
    float sum = 0.0f;
    for (int p = 0; p < size[axis]; p++) {
        real low1 = INFINITY, high1 = -INFINITY, low2 = INFINITY, high2 = -INFINITY;
        for (int n = 0; n < 4; n++) {
            // (a plane behind the source gives a box whose voxels all fail w > 0 below)
            if (!meets[n])
                continue;
            const real x1 = p * slope1[n] + offset1[n], x2 = p * slope2[n] + offset2[n];
            low1 = fmin(low1, x1); high1 = fmax(high1, x1);
            low2 = fmin(low2, x2); high2 = fmax(high2, x2);
        }
        // the box's voxels, within the volume (the bounds compared in real: no overflow)
        const int first1 = (int)fmax(ceil(low1 - BOX_MARGIN), (real)0);
        const int last1 = (int)fmin(floor(high1 + BOX_MARGIN), (real)(size[a1] - 1));
        const int first2 = (int)fmax(ceil(low2 - BOX_MARGIN), (real)0);
        const int last2 = (int)fmin(floor(high2 + BOX_MARGIN), (real)(size[a2] - 1));
        for (int v2 = first2; v2 <= last2; v2++)
            for (int v1 = first1; v1 <= last1; v1++) {
                const int i = axis == 0 ? p : v1, j = axis == 1 ? p : axis == 0 ? v1 : v2;
                const int k = axis == 2 ? p : v2;
                real hc, hr, hw;
                cone_homogeneous(m, i, j, k, &hc, &hr, &hw);
                // in float first, to pass over the voxels clearly outside the window
                // without the exact divisions (slack: REJECT pixels and 8x float's
                // relative error)
                const float fw = (float)hw, uc = (float)hc / fw, ur = (float)hr / fw;
                const float slack = REJECT + 1e-6f * (fabs(uc) + fabs(ur));
                if (!(fw > 0) || uc < c - 1 - slack || uc >= c + 1 + slack
                        || ur < r - 1 - slack || ur >= r + 1 + slack)
                    continue;
                int vr, vc;
                float fr, fc;
                if (!cone_split(hc, hr, hw, n_rows, n_cols, &vr, &vc, &fr, &fc))
                    continue;
                if ((vr != r && vr != r - 1) || (vc != c && vc != c - 1))
                    continue;
                const float weight = (vr == r ? 1.0f - fr : fr) * (vc == c ? 1.0f - fc : fc);
                sum += weight * volume[((size_t)k * ny + j) * nx + i];
            }
    }
    projections[((size_t)q * n_rows + r) * n_cols + c] = sum;
}
