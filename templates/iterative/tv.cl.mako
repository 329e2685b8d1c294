## Total variation for pybp.tv (Chambolle-Pock): the gradient of a volume by forward
## differences (zero at each axis's last index), along x and y within each plane (dims
## 2: parallel beam's slices, each on its own) or along z too (dims 3: cone beam), its
## exact transpose, and the steps of the primal-dual iteration. The gradient's
## components lie one after another, each a volume of n = nx ny nz values.
/* pybp total variation */

inline size_t at(const int i, const int j, const int k, const int nx, const int ny)
{
    return ((size_t)k * ny + j) * nx + i;
}

// The component d of the gradient of x at (i, j, k).
inline float difference(__global const float *x, const int d, const int i, const int j,
                        const int k, const int nx, const int ny, const int nz)
{
    const size_t here = at(i, j, k, nx, ny);
    if (d == 0)
        return i < nx - 1 ? x[here + 1] - x[here] : 0.0f;
    if (d == 1)
        return j < ny - 1 ? x[here + nx] - x[here] : 0.0f;
    return k < nz - 1 ? x[here + (size_t)nx * ny] - x[here] : 0.0f;
}

// q = grad x
__kernel void tv_gradient(
${args['tv_gradient']}
{
    const int i = get_global_id(0), j = get_global_id(1), k = first_plane + get_global_id(2);
    if (i >= nx || j >= ny || k >= nz)
        return;
    const size_t n = (size_t)nx * ny * nz;
    for (int d = 0; d < dims; d++)
        q[d * n + at(i, j, k, nx, ny)] = difference(x, d, i, j, k, nx, ny, nz);
}

// out = grad^T q (minus the divergence): each difference's transpose, term by term.
__kernel void tv_transpose(
${args['tv_transpose']}
{
    const int i = get_global_id(0), j = get_global_id(1), k = first_plane + get_global_id(2);
    if (i >= nx || j >= ny || k >= nz)
        return;
    const size_t n = (size_t)nx * ny * nz, here = at(i, j, k, nx, ny);
    const int index[3] = {i, j, k}, size[3] = {nx, ny, nz};
    const size_t step[3] = {1, (size_t)nx, (size_t)nx * ny};
    float sum = 0.0f;
    for (int d = 0; d < dims; d++) {
        __global const float *component = q + d * n;
        if (index[d] > 0)
            sum += component[here - step[d]];
        if (index[d] < size[d] - 1)
            sum -= component[here];
    }
    out[here] = sum;
}

// The dual step of the TV term: q = q + sigma grad xbar (sigma: the step times the
// gradient's scale), each voxel's vector of components then shrunk to length at most
// weight.
__kernel void tv_dual(
${args['tv_dual']}
{
    const int i = get_global_id(0), j = get_global_id(1), k = first_plane + get_global_id(2);
    if (i >= nx || j >= ny || k >= nz)
        return;
    const size_t n = (size_t)nx * ny * nz, here = at(i, j, k, nx, ny);
    float v[3] = {0.0f, 0.0f, 0.0f};
    float length = 0.0f;
    for (int d = 0; d < dims; d++) {
        v[d] = q[d * n + here] + sigma * difference(xbar, d, i, j, k, nx, ny, nz);
        length += v[d] * v[d];
    }
    const float shrink = fmax(1.0f, sqrt(length) / weight);
    for (int d = 0; d < dims; d++)
        q[d * n + here] = v[d] / shrink;
}

// The dual step of the data term: p = (p + sigma (A xbar - b)) / (1 + sigma).
__kernel void data_dual(
${args['data_dual']}
{
    const size_t k = first + get_global_id(0);
    if (k < count)
        p[k] = (p[k] + sigma * (ax[k] - b[k])) / (1.0f + sigma);
}

// The primal step: x' = x - tau A^T p - tau_gradient grad^T q (tau_gradient: the step
// times the gradient's scale), clipped at 0 where nonnegative; xbar = 2 x' - x; x = x'.
__kernel void tv_primal(
${args['tv_primal']}
{
    const size_t k = first + get_global_id(0);
    if (k >= count)
        return;
    float v = x[k] - tau * atp[k] - tau_gradient * gtq[k];
    if (nonnegative)
        v = fmax(v, 0.0f);
    xbar[k] = 2.0f * v - x[k];
    x[k] = v;
}
