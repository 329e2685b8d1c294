## Ring removal by sorting (Vo, Atwood & Drakopoulos, Opt. Express 26, 28396, 2018,
## algorithm 3; algotom's and tomopy's remove_stripe_based_sorting): in each sinogram,
## every detector column is sorted along the angles, which turns a stripe (a column
## off by a gain or an offset) into a smooth ramp beside its neighbours'; a median
## across columns of each row of the sorted sinogram replaces it, and the values go
## back to the angles they came from. Ties sort by angle (a stable sort), so the
## result does not depend on the sorting method.
${"/* pybp ring removal by sorting: %d-point sorts, median of %d */" % (points, size)}
#define POINTS ${points}   /* n_angles rounded up to a power of two */
#define ITEMS ${items}
#define SIZE ${size}       /* the median's width, odd */
#define HALF (SIZE / 2)
#define TILE ${tile}

// Work-group (column, s): column `column` of sinogram first + s, sorted along the angles
// (bitonic, in local memory) into `sorted` and its angles into `index`, both
// (s, rank, column).
__kernel __attribute__((reqd_work_group_size(ITEMS, 1, 1)))
void sort_columns(
${args['sort_columns']}
{
    __local float keys[POINTS];
    __local int ids[POINTS];
    const int column = get_group_id(0);
    const size_t plane = (size_t)n_angles * n_bins;
    __global const float *values = sinograms + (first + get_group_id(1)) * plane + column;
    for (int i = get_local_id(0); i < POINTS; i += ITEMS) {
        keys[i] = i < n_angles ? values[(size_t)i * n_bins] : INFINITY;  // padding sorts last
        ids[i] = i;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 2; k <= POINTS; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = get_local_id(0); t < POINTS / 2; t += ITEMS) {
                const int i = ((t & ~(j - 1)) << 1) | (t & (j - 1));
                const float a = keys[i], b = keys[i + j];
                const int ia = ids[i], ib = ids[i + j];
                const bool greater = a > b || (a == b && ia > ib);
                if (greater == ((i & k) == 0)) {
                    keys[i] = b;
                    keys[i + j] = a;
                    ids[i] = ib;
                    ids[i + j] = ia;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    const size_t out = get_group_id(1) * plane + column;
    for (int r = get_local_id(0); r < n_angles; r += ITEMS) {
        sorted[out + (size_t)r * n_bins] = keys[r];
        index[out + (size_t)r * n_bins] = ids[r];
    }
}

// Column i of a row of n, mirrored at the ends as d c b a | a b c d (scipy's "reflect").
inline int reflect(int i, const int n)
{
    while (i < 0 || i >= n)
        i = i < 0 ? -i - 1 : 2 * n - i - 1;
    return i;
}

// Work-group (tile, rank, s): the median over SIZE columns of TILE columns of one row
// of sinogram s's sorted values, written back to the angles they came from.
__kernel __attribute__((reqd_work_group_size(TILE, 1, 1)))
void median_rows(
${args['median_rows']}
{
    __local float row[TILE + 2 * HALF];
    const size_t plane = (size_t)n_angles * n_bins;
    const size_t at = get_group_id(2) * plane + (size_t)get_group_id(1) * n_bins;
    const int first_column = get_group_id(0) * TILE;
    for (int t = get_local_id(0); t < TILE + 2 * HALF; t += TILE)
        row[t] = sorted[at + reflect(first_column - HALF + t, n_bins)];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int column = first_column + get_local_id(0);
    if (column >= n_bins)
        return;
    float window[SIZE];
    for (int j = 0; j < SIZE; j++)
        window[j] = row[get_local_id(0) + j];
    // The median is the value with at most HALF values below it and more than HALF at
    // or below it.
    float median = window[HALF];
    for (int i = 0; i < SIZE; i++) {
        int below = 0, at_most = 0;
        for (int j = 0; j < SIZE; j++) {
            below += window[j] < window[i];
            at_most += window[j] <= window[i];
        }
        if (below <= HALF && HALF < at_most) {
            median = window[i];
            break;
        }
    }
    sinograms[(first + get_group_id(2)) * plane + (size_t)index[at + column] * n_bins + column] = median;
}
