## Interleave up to 4 sinograms into texels (Sect. 5.2, Fig. 5) and convert them to the
## storage precision (Sect. 5.3), for one piece of the sinogram: the angles and bins
## that one launch reads. Missing slices and spare channels are zero. Half texels hold
## each slice times its own power of two (`scales`, from the slice's largest value:
## `half_scales`), so that its largest texel lands well inside half's range: data of
## any magnitude keep half's 11 bits (pybp/scaling.py).
<%namespace name="common" file="common.cl.mako"/>\
${common.header(p, "sinogram packing", fields)}
<%
    rows = p.texel_rows
    per_row = p.texels_per_row
    channels = p.texel_channels
    half = p.storage == "half"
%>\
__kernel void pack(
    __global const float *sinograms,    /* a chunk's planes of n_angles x n_bins */
    const int first_slice,              /* this pass's first plane */
    const int n_slices,                 /* slices in this pass */
    const int n_angles,
    const int n_bins,
    const int first_angle,              /* the piece: angles [first_angle, +piece_angles) */
    const int first_bin,                /*            bins [first_bin, +piece_bins) */
    const int piece_angles,
    const int piece_bins,
    __global const float *scales,       /* per plane of the chunk: a power of two */
% if half:
    __global half *texels)              /* piece_angles x texel_rows x piece_bins x channels */
% else:
    __global float *texels)             /* piece_angles x texel_rows x piece_bins x channels */
% endif
{
    const int b = get_global_id(0);
    const int a = get_global_id(1);
    if (b >= piece_bins || a >= piece_angles)
        return;
    const size_t source = ((size_t)first_slice * n_angles + first_angle + a) * n_bins
                          + first_bin + b;
    const size_t plane = (size_t)n_angles * n_bins;
% for i in range(rows):
    // Projection a's texel row ${i} is image row ${rows} a + ${i}.
    const size_t texel${i} = (((size_t)a * ${rows} + ${i}) * piece_bins + b) * ${channels};
% for c in range(channels):
<% s = i * per_row + c %>\
% if c < per_row:
    const float v${i}${c} = ${s} < n_slices ? sinograms[${s} * plane + source]${" * scales[first_slice + %d]" % s if half else ""} : 0.0f;
% else:
    const float v${i}${c} = 0.0f;
% endif
% if half:
    vstore_half(v${i}${c}, texel${i} + ${c}, texels);
% else:
    texels[texel${i} + ${c}] = v${i}${c};
% endif
% endfor
% endfor
}

// Per plane, its largest absolute value, as float bits: non-negative floats order as
// their bits, so an integer atomic max finds it. `peaks` start at zero.
#define PEAK_ITEMS ${peak_items}
__kernel __attribute__((reqd_work_group_size(PEAK_ITEMS, 1, 1)))
void slice_peaks(
    __global const float *planes,
    const int plane,                    /* values per plane */
    __global uint *peaks)
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
// value times `bound`, pybp/scaling.py) to at most `target`; 1 for an all-zero plane.
__kernel void half_scales(
    __global const uint *peaks,
    const float bound,
    const float target,
    const int n_planes,
    __global float *scales)
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
    __global float *slices,             /* a chunk's planes of `plane` pixels */
    const int plane,
    __global const float *scales)       /* per plane */
{
    const int i = get_global_id(0);
    const int s = get_global_id(1);
    if (i < plane)
        slices[(size_t)s * plane + i] /= scales[s];
}

// circle=True: zero the pixels outside the reconstruction circle, where some
// projections missed the detector (scikit-image's iradon(circle=True) does the same).
// Each row's inside is the columns [first, stop), worked out in double on the host.
__kernel void outside_circle(
    __global float *slices,             /* a chunk's planes of nx x ny pixels */
    const int nx,
    const int ny,
    __global const int2 *inside)        /* per row: first and stop column inside */
{
    const int x = get_global_id(0);
    const int y = get_global_id(1);
    const int s = get_global_id(2);
    if (x < nx && y < ny && (x < inside[y].x || x >= inside[y].y))
        slices[((size_t)s * ny + y) * nx + x] = 0.0f;
}
