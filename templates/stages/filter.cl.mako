## FBP row filter: linear convolution of each projection with the real-space taps of
## the padded Fourier filter, times the projection's angular weight. It equals the
## padded FFT product exactly and needs no FFT library, so it runs on any device.
## Taps: kernel[d + n_bins - 1] for offsets d in (-n_bins, n_bins). Edge padding adds
## the row's first and last values times the taps that meet the padding (`edges`).
${"/* pybp FBP row filter, tile %d, %s padding */" % (tile, padding)}
#define TILE ${tile}

__kernel __attribute__((reqd_work_group_size(TILE, 1, 1)))
void filter_rows(
${args['filter_rows']}
{
    const int row = first_row + get_group_id(1);
    const int first = get_group_id(0) * TILE;
    const int item = get_local_id(0);
    __local float values[TILE];
    __local float window[2 * TILE];
    float sum = 0.0f;
    for (int j0 = 0; j0 < n_bins; j0 += TILE) {
        values[item] = j0 + item < n_bins ? rows[(size_t)row * n_bins + j0 + item] : 0.0f;
        // Taps for offsets i - j with i in this tile of outputs and j in this tile of inputs.
        for (int t = item; t < 2 * TILE - 1; t += TILE) {
            const int g = first - j0 - TILE + 1 + t + n_bins - 1;
            window[t] = (g >= 0 && g < 2 * n_bins - 1) ? taps[g] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = 0; j < TILE; j++)
            sum = mad(values[j], window[item - j + TILE - 1], sum);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int i = first + item;
    if (i < n_bins) {
% if padding == "edge":
        const size_t start = (size_t)row * n_bins;
        sum = mad(rows[start], edges[i], mad(rows[start + n_bins - 1], edges[n_bins + i], sum));
% endif
        out[(size_t)(row - first_row) * n_bins + i] = sum * weights[row % n_angles];
    }
}
