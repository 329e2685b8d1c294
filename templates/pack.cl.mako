## Interleave up to 4 sinograms into texels (Sect. 5.2, Fig. 5) and convert them to the
## storage precision (Sect. 5.3), for one piece of the sinogram: the angles and bins
## that one launch reads. Missing slices and spare channels are zero. Half texels hold
## each slice times its own power of two (`scale`), chosen so that its largest value
## lands well inside half's range: data of any magnitude keep half's 11 bits.
<%namespace name="common" file="common.cl.mako"/>\
${common.header(p, "sinogram packing", fields)}
<%
    rows = p.texel_rows
    per_row = p.texels_per_row
    channels = p.texel_channels
    half = p.storage == "half"
%>\
__kernel void pack(
    __global const float *sinograms,    /* n_slices planes of n_angles x n_bins */
    const int n_slices,
    const int n_angles,
    const int n_bins,
    const int first_angle,              /* the piece: angles [first_angle, +piece_angles) */
    const int first_bin,                /*            bins [first_bin, +piece_bins) */
    const int piece_angles,
    const int piece_bins,
    const float4 scale,                 /* per slice: a power of two (half texels) */
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
    const size_t source = (size_t)(first_angle + a) * n_bins + first_bin + b;
    const size_t plane = (size_t)n_angles * n_bins;
% for i in range(rows):
    // Projection a's texel row ${i} is image row ${rows} a + ${i}.
    const size_t texel${i} = (((size_t)a * ${rows} + ${i}) * piece_bins + b) * ${channels};
% for c in range(channels):
<% s = i * per_row + c %>\
% if c < per_row:
    const float v${i}${c} = ${s} < n_slices ? sinograms[${s} * plane + source]${" * scale.s%d" % s if half else ""} : 0.0f;
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

// Half texels hold each slice times its scale: multiply the finished slices by the
// inverse (powers of two, exact). A launch of its own keeps the back-projection kernels
// free of it (a multiply in their store cost 2.3% on the H100, one slice, linear).
__kernel void unscale(
    __global float *slices,             /* n_slices planes of `plane` pixels */
    const int plane,
    const float4 factors)               /* per slice: 1 / its scale */
{
    const int i = get_global_id(0);
    const int s = get_global_id(1);
    slices[(size_t)s * plane + i] *= s == 0 ? factors.x : s == 1 ? factors.y
                                       : s == 2 ? factors.z : factors.w;
}
