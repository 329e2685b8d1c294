## Paganin phase retrieval on the device: each projection of a chunk, flat-field
## normalised (the intensity I, before -log), is padded by replicating its edges to a
## padded image of PAD_Y x PAD_X points, filtered by
##     H(fy, fx) = 1 / (1 + pi wavelength distance (delta/beta) (fy^2 + fx^2))
## (f in cycles per metre) through a 2-D FFT, and written as -log of the result, the
## margin rows left out, transposed to sinograms (row, angle, bin). Two projections
## share one complex transform (H is real and even). The rows of a padded image (PAD_X
## points) are transformed in two passes of the four-step FFT of fft_lines.cl.mako
## (A x B points: transforms of A along columns of B, then of B along rows), which
## leaves the frequencies of a row in k_a-major order; the columns (PAD_Y points) in
## one pass, which also applies H (its fx table permuted to that order) and the
## inverse. Five kernels, each a pass through the complex padded images in `scratch`.
<%namespace name="fft" file="fft_lines.cl.mako"/>
<%namespace name="flat_field" file="flat_field.cl.mako"/>
${"/* pybp Paganin phase retrieval: padded images of %d x %d = %d x (%d x %d) points */" % (pad_y, a * b, pad_y, a, b)}
#define PAD_Y ${pad_y}
#define PAD_X ${a * b}
#define A ${a}
#define B ${b}
#define PAD ((size_t)PAD_Y * PAD_X)

${fft.complex_helpers()}
${flat_field.functions("float", floor)}
${fft.local_fft("fft_a", a, a_lines, items, a * b)}
${fft.local_fft("fft_b", b, b_lines, items, a * b)}
${fft.local_fft("fft_y", pad_y, y_lines, items, pad_y)}

// Work-group (g, p): of pair p's padded image, row g / (B / ${a_lines}) and its columns
// b = (g % (B / ${a_lines})) * ${a_lines} ...: transforms of A points x[a B + b].
__kernel __attribute__((reqd_work_group_size(${items}, 1, 1)))
void rows_forward_a(
${args['rows_forward_a']}
{
    __local float2 x[${a_lines * a}], y[${a_lines * a}];
    const int groups = B / ${a_lines};
    const int pad_row = get_group_id(0) / groups;
    const int column = (get_group_id(0) % groups) * ${a_lines};
    const int angle = first_angle + 2 * get_group_id(1);
    const int has_b = angle + 1 < stop_angle;
    // The padded image's rows and columns beyond the chunk replicate its edge rows and bins.
    const int row = clamp(pad_row - row_shift, 0, n_rows - 1);
    __global const float *p = intensity + ((size_t)angle * n_rows + row) * n_bins;
    __global const float *q = p + (size_t)n_rows * n_bins;
    for (int e = get_local_id(0); e < ${a_lines * a}; e += ${items}) {
        const int line = e % ${a_lines}, i = e / ${a_lines};
        const int bin = clamp(i * B + column + line - first_bin, 0, n_bins - 1);
        x[line * A + i] = (float2)(p[bin], has_b ? q[bin] : 0.0f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_a(x, y, table, -1.0f);
    __global float2 *out = scratch + get_group_id(1) * PAD + (size_t)pad_row * PAD_X;
    for (int e = get_local_id(0); e < ${a_lines * a}; e += ${items}) {
        const int line = e % ${a_lines}, k = e / ${a_lines};
        const int b = column + line;
        out[k * B + b] = cmul(${fft.result_buffer(a, "x", "y")}[line * A + k],
                              twiddle(table, PAD_X, (long)b * k));
    }
}

// Work-group (g, p): ${b_lines} rows of B points from row g * ${b_lines} of pair p's padded image
// (PAD_Y * A of them), transformed forward (sign -1), or inverse (+1) and then times
// the conjugate twiddle.
__kernel __attribute__((reqd_work_group_size(${items}, 1, 1)))
void rows_b(
${args['rows_b']}
{
    __local float2 x[${b_lines * b}], y[${b_lines * b}];
    __global float2 *data = scratch + get_group_id(1) * PAD + (size_t)get_group_id(0) * ${b_lines * b};
    for (int e = get_local_id(0); e < ${b_lines * b}; e += ${items})
        x[e] = data[e];
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_b(x, y, table, (float)sign);
    for (int e = get_local_id(0); e < ${b_lines * b}; e += ${items}) {
        float2 v = ${fft.result_buffer(b, "x", "y")}[e];
        if (sign > 0) {
            const int k = (get_group_id(0) * ${b_lines} + e / B) % A;  // the line's k_a
            const float2 w = twiddle(table, PAD_X, (long)(e % B) * k);
            v = cmul(v, (float2)(w.x, -w.y));
        }
        data[e] = v;
    }
}

// Work-group (g, p): columns g * ${y_lines} ... of pair p's padded image: forward transforms of
// PAD_Y points, the product with H / (PAD_Y PAD_X), the inverse.
__kernel __attribute__((reqd_work_group_size(${items}, 1, 1)))
void columns_filter(
${args['columns_filter']}
{
    __local float2 x[${y_lines * pad_y}], y[${y_lines * pad_y}];
    __global float2 *data = scratch + get_group_id(1) * PAD;
    const int column = get_group_id(0) * ${y_lines};
    for (int e = get_local_id(0); e < ${y_lines * pad_y}; e += ${items}) {
        const int line = e % ${y_lines}, i = e / ${y_lines};
        x[line * PAD_Y + i] = data[(size_t)i * PAD_X + column + line];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_y(x, y, table_y, -1.0f);
    __local float2 *spectrum = ${fft.result_buffer(pad_y, "x", "y")};
    __local float2 *other = ${fft.result_buffer(pad_y, "y", "x")};
    for (int e = get_local_id(0); e < ${y_lines * pad_y}; e += ${items}) {
        const int line = e / PAD_Y, k = e % PAD_Y;
        spectrum[e] *= scale / (1.0f + fy2[k] + fx2[column + line]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_y(spectrum, other, table_y, 1.0f);
    for (int e = get_local_id(0); e < ${y_lines * pad_y}; e += ${items}) {
        const int line = e % ${y_lines}, i = e / ${y_lines};
        data[(size_t)i * PAD_X + column + line] =
            ${fft.result_buffer(pad_y, "spectrum", "other")}[line * PAD_Y + i];
    }
}

// Work-group (g, p) as in rows_forward_a, over the chunk's own rows only (from padded image
// row first_pad_row): inverse transforms of A points, then -log of the retrieved
// intensity into the sinograms.
__kernel __attribute__((reqd_work_group_size(${items}, 1, 1)))
void rows_inverse_a(
${args['rows_inverse_a']}
{
    __local float2 x[${a_lines * a}], y[${a_lines * a}];
    const int groups = B / ${a_lines};
    const int own_row = get_group_id(0) / groups;
    const int pad_row = first_pad_row + own_row;
    const int column = (get_group_id(0) % groups) * ${a_lines};
    const int angle = first_angle + 2 * get_group_id(1);
    const int has_b = angle + 1 < stop_angle;
    __global const float2 *data = scratch + get_group_id(1) * PAD + (size_t)pad_row * PAD_X;
    for (int e = get_local_id(0); e < ${a_lines * a}; e += ${items}) {
        const int line = e % ${a_lines}, k = e / ${a_lines};
        x[line * A + k] = data[k * B + column + line];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_a(x, y, table, 1.0f);
    __global float *out = sinograms + ((size_t)own_row * n_angles + angle) * n_bins;
    for (int e = get_local_id(0); e < ${a_lines * a}; e += ${items}) {
        const int line = e % ${a_lines}, i = e / ${a_lines};
        const int bin = i * B + column + line - first_bin;
        if (bin < 0 || bin >= n_bins)
            continue;
        const float2 v = ${fft.result_buffer(a, "x", "y")}[line * A + i];
        for (int s = 0; s < 1 + has_b; s++) {
            // No transmission left to take the log of (noise at a dark edge, say):
            // the rule of normalisation without phase retrieval, counted in rows kept.
            bool replaced = false;
            out[(size_t)s * n_bins + bin] = line_integral(s == 0 ? v.x : v.y, &replaced);
            if (replaced && own_row >= counted_first && own_row < counted_stop)
                atomic_inc(clipped);
        }
    }
}
