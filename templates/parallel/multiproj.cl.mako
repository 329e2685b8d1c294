## Texture-engine back-projection over 4 projections at once (paper Sect. 5.6, Alg. 3):
## 256 work-items cover 16x16 pixels; each takes 4 pixels and every 4th projection, and
## the 4 partial sums of a pixel are reduced in local memory.
##
## With `probe`, the same schedule without geometry is the texture-engine ceiling
## (`fetch_only`): every pixel fetches bin x + 1/4 of each projection, one filtered
## texel per update with the best locality; `row_slope` is 0 at run time, so that the
## compiler cannot merge the 4 pixels' fetches.
<%namespace name="common" file="/common.cl.mako"/>\
${common.header(p, "texture fetch ceiling probe" if probe else "texture back-projection (multiproj)")}
${common.fetch_function(p)}
<%
    vt = common.attr.vector_type(p.slices_per_pass)
    local_constants = p.constants == "local" and not probe
    tile = p.group_side
    projections = p.projections_in_flight
    # Each work-item takes `projections` pixels, `rows_apart` rows apart: the tile's
    # items split into one group per projection in flight (Fig. 10).
    items = tile * tile
    rows_apart = tile // projections
%>
#define PROJECTIONS ${projections}   /* projections in flight per work-group */
#define CACHED ${p.local_constants}      /* projection constants cached per round (Alg. 5) */

__kernel __attribute__((reqd_work_group_size(${tile}, ${tile}, 1)))
void ${"fetch_only" if probe else "backproject"}(
${args["fetch_only" if probe else "backproject"]}
{
    // Bits 0-3: Z-order place in a 4x4 square (Sect. 5.5); bits 4-5: the square along
    // a 16x4 strip; bits 6-7: the projection, the same for a whole warp so that its
    // constant loads broadcast (Fig. 10). The strip steps down 4 rows at a time.
    const int item = get_local_id(1) * ${tile} + get_local_id(0);
    const int qx = ((item >> 4) & 3) * 4 + ((item & 1) | ((item >> 1) & 2));
    const int qy = ((item >> 1) & 1) | ((item >> 2) & 2);
    const int first = item >> 6;
    const float fx = (float)(first_column + get_group_id(0) * ${tile} + qx);
    const float fy = (float)(first_row + get_group_id(1) * ${tile} + qy);

    ${vt} sum[PROJECTIONS];
    for (int k = 0; k < PROJECTIONS; k++)
        sum[k] = (${vt})(0.0f);

% if local_constants:
    __local float4 cached[CACHED];
    for (int round = 0; round < n_angles; round += CACHED) {
        const int count = min(CACHED, n_angles - round);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (item < count)
            cached[item] = projection[round + item];
        barrier(CLK_LOCAL_MEM_FENCE);
% if p.unroll > 1:
        #pragma unroll ${p.unroll}
% endif
        for (int q = first; q < count; q += PROJECTIONS) {
            const float4 c = cached[q];
            const int a = round + q;
% else:
    {
% if p.unroll > 1:
        #pragma unroll ${p.unroll}
% endif
        for (int a = first; a < n_angles; a += PROJECTIONS) {
% if probe:
            const float h = fx + 0.25f;
            const float row_step = row_slope;
% else:
            const float4 c = projection[a];
% endif
% endif
% if not probe:
            const float h = mad(fx, c.x, mad(fy, -c.y, c.z));
            const float row_step = ${rows_apart}.0f * c.y;   /* h moves by -${rows_apart} sin per ${rows_apart} rows */
% endif
            #pragma unroll
            for (int k = 0; k < PROJECTIONS; k++)
                sum[k] += fetch(sinogram, n_bins, mad(-(float)k, row_step, h), a);
        }
    }

    // Partial sums go to local memory in the tile's row-major order, so the reduction
    // that follows also writes the output coalesced.
    __local ${vt} partial[PROJECTIONS][${items}];
    for (int k = 0; k < PROJECTIONS; k++)
        partial[first][(qy + ${rows_apart} * k) * ${tile} + qx] = sum[k];
    barrier(CLK_LOCAL_MEM_FENCE);
    ${vt} total = partial[0][item];
    for (int k = 1; k < PROJECTIONS; k++)
        total += partial[k][item];
    const int x = first_column + get_group_id(0) * ${tile} + (item % ${tile});
    const int y = first_row + get_group_id(1) * ${tile} + (item / ${tile});
${common.store(p, "total")}
}
