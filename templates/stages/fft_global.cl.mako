## FBP row filter by FFT for rows too long for one work-group's local memory: the
## four-step transform of fft_lines.cl.mako through a complex scratch buffer, three
## kernels per block of rows. As in fft.cl.mako, two real rows share one complex
## transform (the filter is real and even). N = N1 N2 points:
##   columns_forward: rows -> scratch: padding, transforms of N1 along columns (stride
##                    N2), the twiddle W_N^(n2 k1);
##   rows_filter:     transforms of N2 along rows, the product with the response
##                    (permuted to this order, scaled by 1 / N), the inverse, the
##                    conjugate twiddle;
##   columns_inverse: inverse transforms of N1 along columns -> rows, cropped and
##                    weighted.
## A pair is rows 2p and 2p + 1 of the launch.
<%namespace name="fft" file="fft_lines.cl.mako"/>
${"/* pybp FBP filter by global FFT: %d = %d x %d points, %s padding */" % (n1 * n2, n1, n2, padding)}
#define N ${n1 * n2}
#define N1 ${n1}
#define N2 ${n2}

${fft.complex_helpers()}
${fft.local_fft("fft_columns", n1, column_lines, items, n1 * n2)}
${fft.local_fft("fft_rows", n2, row_lines, items, n1 * n2)}

// Padded position i of a row: the data start at `first`, zeros or the edge values around.
inline float padded(__global const float *row, const int n_bins, const int i)
{
% if padding == "edge":
    return row[clamp(i - ${first}, 0, n_bins - 1)];
% else:
    return i < n_bins ? row[i] : 0.0f;
% endif
}

// Work-group (g, p): columns g * ${column_lines} ... of pair p of the launch's rows.
__kernel __attribute__((reqd_work_group_size(${items}, 1, 1)))
void columns_forward(
${args['columns_forward']}
{
    __local float2 x[${column_lines * n1}], y[${column_lines * n1}];
    const int pair = get_group_id(1);
    const int row_a = first_row + 2 * pair;
    const int has_b = row_a + 1 < n_rows;
    __global const float *a = rows + (size_t)row_a * n_bins;
    __global const float *b = a + n_bins;
    const int column = get_group_id(0) * ${column_lines};
    // Neighbouring work-items take neighbouring columns: reads in runs of the lines.
    for (int e = get_local_id(0); e < ${column_lines * n1}; e += ${items}) {
        const int line = e % ${column_lines}, i = e / ${column_lines};
        const int n = i * N2 + column + line;
        x[line * N1 + i] = (float2)(padded(a, n_bins, n), has_b ? padded(b, n_bins, n) : 0.0f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_columns(x, y, table, -1.0f);
    __global float2 *out = scratch + (size_t)pair * N;
    for (int e = get_local_id(0); e < ${column_lines * n1}; e += ${items}) {
        const int line = e % ${column_lines}, k1 = e / ${column_lines};
        const int n2 = column + line;
        out[k1 * N2 + n2] = cmul(${fft.result_buffer(n1, "x", "y")}[line * N1 + k1],
                                 twiddle(table, N, (long)n2 * k1));
    }
}

// Work-group (g, p): rows k1 = g * ${row_lines} ... of pair p's scratch.
__kernel __attribute__((reqd_work_group_size(${items}, 1, 1)))
void rows_filter(
${args['rows_filter']}
{
    __local float2 x[${row_lines * n2}], y[${row_lines * n2}];
    __global float2 *data = scratch + (size_t)get_group_id(1) * N;
    const int first_k1 = get_group_id(0) * ${row_lines};
    for (int e = get_local_id(0); e < ${row_lines * n2}; e += ${items})
        x[e] = data[first_k1 * N2 + e];
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_rows(x, y, table, -1.0f);
    __local float2 *spectrum = ${fft.result_buffer(n2, "x", "y")};
    __local float2 *other = ${fft.result_buffer(n2, "y", "x")};
    for (int e = get_local_id(0); e < ${row_lines * n2}; e += ${items})
        spectrum[e] *= response[first_k1 * N2 + e];
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_rows(spectrum, other, table, 1.0f);
    __local float2 *filtered = ${fft.result_buffer(n2, "spectrum", "other")};
    for (int e = get_local_id(0); e < ${row_lines * n2}; e += ${items}) {
        const int k1 = first_k1 + e / N2, n2 = e % N2;
        const float2 w = twiddle(table, N, (long)n2 * k1);
        data[first_k1 * N2 + e] = cmul(filtered[e], (float2)(w.x, -w.y));
    }
}

// Work-group (g, p) as in columns_forward; the filtered rows go to `out`.
__kernel __attribute__((reqd_work_group_size(${items}, 1, 1)))
void columns_inverse(
${args['columns_inverse']}
{
    __local float2 x[${column_lines * n1}], y[${column_lines * n1}];
    const int pair = get_group_id(1);
    const int row_a = first_row + 2 * pair;
    const int has_b = row_a + 1 < n_rows;
    const int column = get_group_id(0) * ${column_lines};
    __global const float2 *data = scratch + (size_t)pair * N;
    for (int e = get_local_id(0); e < ${column_lines * n1}; e += ${items}) {
        const int line = e % ${column_lines}, k1 = e / ${column_lines};
        x[line * N1 + k1] = data[k1 * N2 + column + line];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    fft_columns(x, y, table, 1.0f);
    const float weight_a = weights[row_a % n_angles];
    const float weight_b = weights[(row_a + 1) % n_angles];
    for (int e = get_local_id(0); e < ${column_lines * n1}; e += ${items}) {
        const int line = e % ${column_lines}, n1 = e / ${column_lines};
        const int bin = n1 * N2 + column + line - ${first};
        if (bin >= 0 && bin < n_bins) {
            const float2 v = ${fft.result_buffer(n1, "x", "y")}[line * N1 + n1];
            out[(size_t)row_a * n_bins + bin] = v.x * weight_a;
            if (has_b)
                out[(size_t)(row_a + 1) * n_bins + bin] = v.y * weight_b;
        }
    }
}
