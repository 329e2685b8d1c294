## Texture-engine back-projection, one pixel per work-item (paper Sect. 5.1, Alg. 1).
## `locality` only changes which pixel a work-item takes (Sect. 5.5, Alg. 2).
<%namespace name="common" file="/common.cl.mako"/>\
${common.header(p, "texture back-projection (%s)" % p.kernel)}
${common.fetch_function(p)}
<% vt = common.attr.vector_type(p.slices_per_pass) %>
__kernel __attribute__((reqd_work_group_size(${p.group_side}, ${p.group_side}, 1)))
void backproject(
${args['backproject']}
{
% if p.kernel == "locality":
${common.zorder_pixel(p)}
% else:
    const int x = first_column + get_global_id(0);
    const int y = first_row + get_global_id(1);
% endif
    const float fx = (float)x;
    const float fy = (float)y;
    ${vt} sum = (${vt})(0.0f);
% if p.unroll > 1:
    #pragma unroll ${p.unroll}
% endif
    for (int a = 0; a < n_angles; a++) {
        const float4 c = projection[a];
        sum += fetch(sinogram, n_bins, mad(fx, c.x, mad(fy, -c.y, c.z)), a);
    }
${common.store(p, "sum")}
}
