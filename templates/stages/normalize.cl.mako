## From detector frames to sinograms on the device (docs/architecture.md): for each chunk of
## detector rows the flat-field normalisation (p - dark) / (flat - dark), with the means
## of the darks and flats of its rows, the -log, and the transpose from projections
## (angle, row, bin) to sinograms (row, angle, bin). Bins are the fastest index on both
## sides, so reads and writes stay coalesced without a local-memory transpose.
## The arithmetic is in `real`: double where the device has it, for the FBP amplifies
## float32's rounding of the ratio and the log several times (tests/test_reconstruct.py).
${"/* pybp projections to %s: %s input, %s arithmetic */" % ("intensity" if intensity else "sinograms", raw_type, real)}
% if real == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif

<%namespace file="/stages/flat_field.cl.mako" import="functions"/>
${functions(real, floor)}

__kernel void sinograms_from_projections(
${args['sinograms_from_projections']}
{
    const int bin = get_global_id(0);
    const int angle = get_global_id(1);
    const int row = get_global_id(2);
    if (bin >= n_bins)
        return;
    const size_t pixel = (size_t)row * n_bins + bin;
    const bool counted = row >= counted_first && row < counted_stop;
    ${real} value = projections[((size_t)angle * n_rows + row) * n_bins + bin];
    if (flat_field)
        value = transmission(value, dark[pixel], flat[pixel]);
    bool replaced = false;
% if intensity:
    // For phase retrieval (paganin.cl.mako), which takes the log after its filter: the
    // intensity in the projections' own layout. A value that is not a number (a pixel
    // whose flat equals its dark) is taken as transparent and counted.
    if (!isfinite(value)) {
        value = 1;
        replaced = true;
    }
    out[((size_t)angle * n_rows + row) * n_bins + bin] = (float)value;
% else:
    // Counted in the chunk's own rows (not the margins of later stages); the caller
    // warns once (taking the log), or refuses the chunk (values as given).
    const float sample = take_log ? line_integral(value, &replaced) : given((float)value, &replaced);
    out[((size_t)row * n_angles + angle) * n_bins + bin] = sample;
% endif
    if (replaced && counted)
        atomic_inc(clipped);
}
