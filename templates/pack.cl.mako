## Interleave up to 4 sinograms into texels (Sect. 5.2, Fig. 5) and convert them to the
## storage precision (Sect. 5.3), for one piece of the sinogram: the angles and bins
## that one launch reads. Missing slices and spare channels are zero.
<%namespace name="common" file="common.cl.mako"/>\
${common.header(p, "sinogram packing")}
__kernel void pack(
    __global const float *sinograms,    /* n_slices planes of n_angles x n_bins */
    const int n_slices,
    const int n_angles,
    const int n_bins,
    const int first_angle,              /* the piece: angles [first_angle, +piece_angles) */
    const int first_bin,                /*            bins [first_bin, +piece_bins) */
    const int piece_angles,
    const int piece_bins,
% if p["storage"] == "half":
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
<%
    rows = p["texel_rows"]
    per_row = p["slices_per_pass"] // rows
    channels = p["texel_channels"]
%>\
% for i in range(rows):
    // Projection a's texel row ${i} is image row ${rows} a + ${i}.
    const size_t texel${i} = (((size_t)a * ${rows} + ${i}) * piece_bins + b) * ${channels};
% for c in range(channels):
<% s = i * per_row + c %>\
% if c < per_row:
    const float v${i}${c} = ${s} < n_slices ? sinograms[${s} * plane + source] : 0.0f;
% else:
    const float v${i}${c} = 0.0f;
% endif
% if p["storage"] == "half":
    vstore_half(v${i}${c}, texel${i} + ${c}, texels);
% else:
    texels[texel${i} + ${c}] = v${i}${c};
% endif
% endfor
% endfor
}
