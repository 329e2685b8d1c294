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
// (s, column, rank): each work-group writes one contiguous run. (Written as (s, rank,
// column), each value a 32-byte sector of its own, the sort took 0.31 ms a 2048^2
// sinogram on the H100. Neither reading the column contiguously after a tiled
// transpose nor keeping 4 or 8 positions per work-item in registers, as 64-bit keys
// of value and angle, made it faster there: 0.25-0.27 ms.)
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
    const size_t out = get_group_id(1) * plane + (size_t)column * n_angles;
    for (int r = get_local_id(0); r < n_angles; r += ITEMS) {
        sorted[out + r] = keys[r];
        index[out + r] = ids[r];
    }
}

// Column i of a row of n, mirrored at the ends as d c b a | a b c d (scipy's "reflect").
inline int reflect(int i, const int n)
{
    while (i < 0 || i >= n)
        i = i < 0 ? -i - 1 : 2 * n - i - 1;
    return i;
}

// Work-item (rank, pair, s): the medians over SIZE columns (mirrored at the ends) of
// rank `rank` of sinogram s's sorted columns 2 pair and 2 pair + 1, written back to the
// angles they came from. The two windows share SIZE - 1 columns: with m and M their
// HALF-th and (HALF + 1)-th smallest, the median of a window is its own column's value
// clamped to [m, M]. m and M come from a partial selection sort (compare and swap) of
// the shared values, so the medians are values of the window, equal to the
// reference's bit for bit. Neighbouring work-items take neighbouring ranks: each read
// of the window is one contiguous run.
__kernel __attribute__((reqd_work_group_size(TILE, 1, 1)))
void median_rows(
${args['median_rows']}
{
    const int rank = get_global_id(0), column = 2 * get_global_id(1);
    if (rank >= n_angles)
        return;
    const size_t plane = (size_t)n_angles * n_bins;
    __global const float *ranks = sorted + get_global_id(2) * plane + rank;
    // Straight-line code on scalars, compares rather than fmin/fmax (IEEE calls on
    // PoCL, several times slower there).
% for j in range(size + 1):
    float w${j} = ranks[(size_t)reflect(column - HALF + ${j}, n_bins) * n_angles];
% endfor
    // The shared values are w1 ... w${size - 1}: put the HALF + 1 smallest in place.
    float low;
% for i in range(1, size // 2 + 2):
%   for j in range(i + 1, size):
    low = w${j} < w${i} ? w${j} : w${i}; w${j} = w${j} < w${i} ? w${i} : w${j}; w${i} = low;
%   endfor
% endfor
    // w${size // 2}, w${size // 2 + 1}: the shared values' HALF-th and (HALF + 1)-th smallest.
    __global const int *angles = index + get_global_id(2) * plane + rank;
    __global float *out = sinograms + (first + get_global_id(2)) * plane;
    const float m = w${size // 2}, M = w${size // 2 + 1};
    w0 = w0 < m ? m : w0;
    out[(size_t)angles[(size_t)column * n_angles] * n_bins + column] = w0 < M ? w0 : M;
    if (column + 1 < n_bins) {
        w${size} = w${size} < m ? m : w${size};
        out[(size_t)angles[(size_t)(column + 1) * n_angles] * n_bins + column + 1] =
            w${size} < M ? w${size} : M;
    }
}
