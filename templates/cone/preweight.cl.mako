## FDK's pre-weighting, in place, before the row filter: with flat_field, detector counts
## (read from `counts`, of the integer type `raw`, where they went up as integers; else
## from the images themselves, as floats) first become line integrals, -log((p - dark) / (flat - dark)) with the means of the
## flats and darks (in `real`: double where the device has it, as in normalisation for
## parallel beam); then each pixel times the cosine of its ray to the detector's normal
## (the source's depth over the ray's length) and its column's weight (angular weight
## over the isocentre pitch; Parker's for short scans). Not `weighted` (the plain
## back-projection): the line integrals' check alone.
/* pybp cone-beam ${"FDK pre-weighting" if weighted else "check of line integrals"}${", from counts" if flat_field else ""} */
% if real == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

<%namespace file="/stages/flat_field.cl.mako" import="functions"/>
${functions(real, floor)}

% if weighted:
// The cosine of the ray through pixel (row r, column c) of `projection` to the detector's
// normal (the source's depth over the ray's length), times the column's weight.
inline float fdk_weight(__global const float *poses, __global const float *column_weights,
                        const int projection, const float r, const int c, const int n_cols)
{
    __global const float *f = poses + ${pose_values} * projection;
    const float3 ray = (float3)(f[0], f[1], f[2]) + c * (float3)(f[3], f[4], f[5])
                       + r * (float3)(f[6], f[7], f[8]);
    return f[9] / length(ray) * column_weights[(size_t)projection * n_cols + c];
}
% endif

__kernel void cone_preweight(
${args['cone_preweight']}
{
    const int c = get_global_id(0), row = get_global_id(1), q = get_global_id(2);
    if (c >= n_cols || row >= row_stride)
        return;
    const size_t at = ((size_t)q * row_stride + row) * n_cols + c;
    if (row >= n_rows) {  // the zero row after an odd window: the FFT's pair (a window
        images[at] = 0.0f;  // from a store comes without it)
        return;
    }
    bool replaced = false;
% if flat_field:
    const size_t pixel = (size_t)(first_row + row) * n_cols + c;
    const float sample = line_integral(transmission(${"counts" if raw else "images"}[at],
                                                    dark[pixel], flat[pixel]), &replaced);
% else:
    // Line integrals as given: a NaN or Inf is counted, and the caller refuses the data
    // before a slab is written.
    const float sample = given(images[at], &replaced);
% endif
    if (replaced && row >= counted_first && row < counted_stop)  // each pixel in one slab
        atomic_inc(replaced_count);
% if weighted:
    images[at] = sample * fdk_weight(poses, column_weights, first_projection + q,
                                     first_row + row, c, n_cols);
% else:
    images[at] = sample;
% endif
}
