## Vector steps of the iterative methods (pybp/iterative/), on elements first ... n - 1
## of buffers of floats (a device's share of a vector split over several:
## pybp/iterative/team.py): each is one pass over memory, so an iteration is two
## operator applications and a few of these, with nothing read back but the partial
## sums of a dot product.
/* pybp vector steps of the iterative methods */

// out = a x + b y
__kernel void combine(
${args['combine']}
{
    const size_t k = first + get_global_id(0);
    if (k < n)
        out[k] = a * x[k] + b * y[k];
}

// out = value
__kernel void fill(
${args['fill']}
{
    const size_t k = first + get_global_id(0);
    if (k < n)
        out[k] = value;
}

// weights = 1 / sums where sums > 0, else 0: ASTRA's SIRT weights (the inverse row and
// column sums of A), zero for a pixel no ray meets or a ray that meets no pixel.
__kernel void invert_sums(
${args['invert_sums']}
{
    const size_t k = first + get_global_id(0);
    if (k < n)
        weights[k] = sums[k] > 0.0f ? 1.0f / sums[k] : 0.0f;
}

// r = (b - r) w: the weighted residual of SIRT, from r = A x.
__kernel void weighted_residual(
${args['weighted_residual']}
{
    const size_t k = first + get_global_id(0);
    if (k < n)
        r[k] = (b[k] - r[k]) * w[k];
}

// x = x + relaxation w d, then max(x, 0) where nonnegative: SIRT's step (a mask is in
// its weights: a pixel outside it keeps its start).
__kernel void sirt_step(
${args['sirt_step']}
{
    const size_t k = first + get_global_id(0);
    if (k < n) {
        const float v = mad(relaxation, w[k] * d[k], x[k]);
        x[k] = nonnegative ? fmax(v, 0.0f) : v;
    }
}

// x = x w, elementwise (a mask, or weights).
__kernel void scale(
${args['scale']}
{
    const size_t k = first + get_global_id(0);
    if (k < n)
        x[k] *= w[k];
}

// Each problem's coefficients (a per-slice step of CGLS): out = a[s] x + b[s] y, s the
// problem of element k (its elements: runs of `block` in turn with the other problems').
__kernel void combine_each(
${args['combine_each']}
{
    const size_t k = first + get_global_id(0);
    if (k < n) {
        const int s = (k / block) % problems;
        out[k] = a[s] * x[k] + b[s] * y[k];
    }
}

<%def name="per_problem(name, term, op)">\
__kernel __attribute__((reqd_work_group_size(${group}, 1, 1)))
void ${name}(
${args[name]}
{
    __local float part[${group}];
    const int item = get_local_id(0);
    const size_t s = get_group_id(1), parts = get_num_groups(0);
    const size_t size = n / problems;
    x += first;
% if name == "problem_dots":
    y += first;
% endif
    float sum = 0.0f;
    for (size_t k = get_group_id(0) * ${group} + item; k < size; k += parts * ${group}) {
        const size_t i = ((k / block) * problems + s) * block + k % block;
        sum = ${op}(sum, ${term});
    }
    part[item] = sum;
    for (int width = ${group // 2}; width > 0; width >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (item < width)
            part[item] = ${op}(part[item], part[item + width]);
    }
    if (item == 0)
        sums[s * parts + get_group_id(0)] = part[0];
}
</%def>\
inline float add(const float a, const float b)
{
    return a + b;
}

// Partial sums of x . y for each problem: work-group (part, problem s) adds the elements
// of s in a fixed order (each item strides over them, then a tree), which depends on
// s's size alone: a problem's dot has the same bits however many problems share the
// vectors (chunks of slices of any size) and every run.
${per_problem("problem_dots", "x[i] * y[i]", "add")}

// The largest |x| of each problem, by parts (CGLS's scale: pybp/iterative/methods.py).
${per_problem("problem_peaks", "fabs(x[i])", "fmax")}
