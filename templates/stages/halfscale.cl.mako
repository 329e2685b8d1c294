## Half storage at any data scale (pybp/stages/halfscale.py): per plane of a chunk, the
## power of two that brings its largest texel near the target before packing, and the
## division of the finished slices by it after. Powers of two: both steps are exact.
/* pybp half scaling: ${peak_items} work-items per peak search */
// Per plane, its largest absolute value, as float bits: non-negative floats order as
// their bits, so an integer atomic max finds it. `peaks` start at zero.
#define PEAK_ITEMS ${peak_items}
__kernel __attribute__((reqd_work_group_size(PEAK_ITEMS, 1, 1)))
void slice_peaks(
${args['slice_peaks']}
{
    __local float best[PEAK_ITEMS];
    const int item = get_local_id(0);
    const int s = get_global_id(1);
    float peak = 0.0f;
    for (size_t i = get_global_id(0); i < plane; i += get_global_size(0))
        peak = fmax(peak, fabs(planes[(size_t)s * plane + i]));
    best[item] = peak;
    for (int step = PEAK_ITEMS / 2; step > 0; step /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (item < step)
            best[item] = fmax(best[item], best[item + step]);
    }
    if (item == 0)
        atomic_max(peaks + s, as_uint(best[0]));
}

// Per plane, the power of two that brings its largest possible texel (its largest
// value times `bound`, pybp/stages/halfscale.py) to at most `target`; 1 for an all-zero plane.
__kernel void half_scales(
${args['half_scales']}
{
    const int s = get_global_id(0);
    if (s >= n_planes)
        return;
    const float peak = as_float(peaks[s]);
    scales[s] = peak > 0.0f ? exp2(clamp(floor(log2(target / peak / bound)), -126.0f, 126.0f))
                            : 1.0f;
}

// Half texels hold each slice times its scale: divide the finished slices by it
// (powers of two, exact). A launch of its own keeps the back-projection kernels free of
// it (a multiply in their store cost 2.3% on the H100, one slice, linear).
__kernel void unscale(
${args['unscale']}
{
    const int i = get_global_id(0);
    const int s = get_global_id(1);
    if (i < plane)
        slices[(size_t)s * plane + i] /= scales[s];
}

