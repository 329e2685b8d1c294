## Texture-engine ceiling: the standard kernel's launch and fetch, with no geometry.
## Work-items take pixels in Z-order (as `locality`) and fetch bin x + 1/4 of every
## projection: one filtered texel per update, a warp's fetches within 9 neighbouring
## bins (best locality), so the rate is what the texture units deliver for the format.
<%namespace name="common" file="common.cl.mako"/>\
${common.header(p, "texture fetch ceiling probe")}
${common.fetch_function(p)}
<% vt = common.attr.vector_type(p["slices_per_pass"]) %>
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void fetch_only(
    ${common.source_arg(p)},
    const int n_angles,
    const int n_bins,
    const int nx,
    const int ny,
    __global float *out)
{
${common.zorder_pixel()}
    const int accumulate = 0;
    const float h = (float)x + 0.25f;   /* between two bins, so linear filtering blends */
    ${vt} sum = (${vt})(0.0f);
    #pragma unroll 4
    for (int a = 0; a < n_angles; a++)
        sum += fetch(${common.source_names(p)}, n_bins, h, a);
${common.store(p, "sum")}
}
