## Interleave up to 4 sinograms into texels (Sect. 5.2, Fig. 5) and convert them to the
## storage precision (Sect. 5.3), for one piece of the sinogram: the angles and bins
## that one launch reads. Missing slices and spare channels are zero. Half texels hold
## each slice times its own power of two (`scales`, from the slice's largest value:
## `half_scales`), so that its largest texel lands well inside half's range: data of
## any magnitude keep half's 11 bits (pybp/stages/halfscale.py).
<%namespace name="common" file="/common.cl.mako"/>\
${common.header(p, "sinogram packing", fields)}
<%
    rows = p.texel_rows
    per_row = p.texels_per_row
    channels = p.texel_channels
    half = p.storage == "half"
%>\
__kernel void pack(
${args['pack']}
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
