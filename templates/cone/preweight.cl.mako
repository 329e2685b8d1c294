## FDK's pre-weighting, in place, before the row filter: each pixel times the cosine of
## its ray to the detector's normal (the source's depth over the ray's length) and its
## column's weight (angular weight over the isocentre pitch; Parker's for short scans).
/* pybp cone-beam FDK pre-weighting */

__kernel void cone_preweight(
${args['cone_preweight']}
{
    const int c = get_global_id(0), row = get_global_id(1), q = get_global_id(2);
    if (c >= n_cols || row >= n_rows)
        return;
    const int projection = first_projection + q;
    __global const float *f = frames + ${frame_values} * projection;
    const float r = first_row + row;
    const float3 ray = (float3)(f[0], f[1], f[2]) + c * (float3)(f[3], f[4], f[5])
                       + r * (float3)(f[6], f[7], f[8]);
    const size_t at = ((size_t)q * row_stride + row) * n_cols + c;
    images[at] *= f[9] / length(ray) * column_weights[(size_t)projection * n_cols + c];
}
