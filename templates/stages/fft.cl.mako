## FBP row filter by FFT. The filter is real and even, so two real rows share one
## complex transform: with z = a + i b, ifft(fft(z) H) = (a * h) + i (b * h), and the
## real and imaginary parts are the two filtered rows. One work-group transforms one
## pair of rows in local memory: loads, a radix-2 Stockham FFT, the product with the
## filter's response, the inverse, and stores, with no pass through global memory in
## between. The pair is rows 2p and 2p + 1 of the launch. The rows can be filtered in
## place: a group reads its two rows whole before it writes them (with a global fence
## between, where edge padding reads bins that other work-items write).
${"/* pybp FBP filter by FFT: %d points, %d work-items, %s padding, %s exchange */" % (size, items, padding, "paired" if paired else "split")}
#define N ${size}                   /* padded row length, a power of two */
#define ITEMS ${items}              /* work-items per transform */
#define POINTS ${size // items}     /* values each work-item holds: indices item + m ITEMS */
#define HALF_POINTS ${size // items // 2}

// Value of padded position i of a row: the data start at `first`, zeros or the edge
// values around them.
inline float padded(__global const float *row, const int n_bins, const int i)
{
% if padding == "edge":
    return row[clamp(i - ${first}, 0, n_bins - 1)];
% else:
    return i < n_bins ? row[i] : 0.0f;
% endif
}

__kernel __attribute__((reqd_work_group_size(ITEMS, 1, 1)))
void filter_rows(
${args['filter_rows']}
{
% if paired:
    __local float2 scratch[N];
% else:
    __local float scratch[N];
% endif
    const int item = get_local_id(0);
    const int row_a = first_row + 2 * get_group_id(0);
    const int row_b = row_a + 1;
    const int has_b = row_b < n_rows;
    __global const float *a = rows + (size_t)row_a * n_bins;
    __global const float *b = rows + (size_t)row_b * n_bins;

    float2 v[POINTS];
    #pragma unroll
    for (int m = 0; m < POINTS; m++) {
        const int i = item + m * ITEMS;
        v[m] = (float2)(padded(a, n_bins, i), has_b ? padded(b, n_bins, i) : 0.0f);
    }
% if padding == "edge":
    // In place (out == rows), work-items read the edge bins that others write at the
    // end; local fences do not order global memory, so this one does (Oclgrind found
    // the race). With zero padding each work-item reads only the bins it writes.
    barrier(CLK_GLOBAL_MEM_FENCE);
% endif

    // A forward transform, the product with the response, and the inverse: radix-2
    // Stockham stages on v[m] = x[item + m ITEMS], natural order in and out. Each
    // stage's butterflies pair x[j] and x[j + N/2], which the same work-item holds;
    // their results go to other work-items through `scratch`: whole values where 2N
    // floats fit the device's local memory, else one component at a time (N floats,
    // two more barriers per stage).
    for (int pass = 0; pass < 2; pass++) {
        const float sign = pass == 0 ? -1.0f : 1.0f;  // forward, inverse (unscaled)
        for (int span = 1; span < N; span <<= 1) {
            int target[HALF_POINTS];
            #pragma unroll
            for (int m = 0; m < HALF_POINTS; m++) {
                const int j = item + m * ITEMS;
                const int k = j & (span - 1);
                const float2 w = twiddles[k * (N / 2 / span)] * (float2)(1.0f, sign);
                const float2 c = v[m + HALF_POINTS];
                const float2 t = (float2)(c.x * w.x - c.y * w.y, c.x * w.y + c.y * w.x);
                v[m + HALF_POINTS] = v[m] - t;
                v[m] += t;
                target[m] = ((j - k) << 1) + k;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
% if paired:
            #pragma unroll
            for (int m = 0; m < HALF_POINTS; m++) {
                scratch[target[m]] = v[m];
                scratch[target[m] + span] = v[m + HALF_POINTS];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            #pragma unroll
            for (int m = 0; m < POINTS; m++)
                v[m] = scratch[item + m * ITEMS];
% else:
            #pragma unroll
            for (int m = 0; m < HALF_POINTS; m++) {
                scratch[target[m]] = v[m].x;
                scratch[target[m] + span] = v[m + HALF_POINTS].x;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            #pragma unroll
            for (int m = 0; m < POINTS; m++)
                v[m].x = scratch[item + m * ITEMS];
            barrier(CLK_LOCAL_MEM_FENCE);
            #pragma unroll
            for (int m = 0; m < HALF_POINTS; m++) {
                scratch[target[m]] = v[m].y;
                scratch[target[m] + span] = v[m + HALF_POINTS].y;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            #pragma unroll
            for (int m = 0; m < POINTS; m++)
                v[m].y = scratch[item + m * ITEMS];
% endif
        }
        if (pass == 0) {
            #pragma unroll
            for (int m = 0; m < POINTS; m++)
                v[m] *= response[item + m * ITEMS];
        }
    }

    const float weight_a = weights[row_a % n_angles];
    const float weight_b = weights[row_b % n_angles];
    #pragma unroll
    for (int m = 0; m < POINTS; m++) {
        const int bin = item + m * ITEMS - ${first};
        if (bin >= 0 && bin < n_bins) {
            out[(size_t)row_a * n_bins + bin] = v[m].x * weight_a;
            if (has_b)
                out[(size_t)row_b * n_bins + bin] = v[m].y * weight_b;
        }
    }
}
