## The matched pair of cone-beam operators (docs/design.md, section 9): a forward
## projection A and its exact transpose A^T, bilinear interpolation on the detector.
##
## Both find where voxel (i, j, k) projects in image q with the one function
## `cone_position` below (its column's part of the position, `cone_column`, plus k times
## the matrix's third column, in `real`; where that column is (0, m6, 0) (SHARED), the
## row as the column's row0 + k step in fixed point, `cone_rows`), or with its hoisted
## form, which gives the same bits: each voxel-pixel weight comes from the same floats in
## both kernels. A^T gathers, per voxel, the bilinear sample of each image
## (zero beyond its edge pixels). A (`forward`, pybp/cone/project.py's forward_method)
## either gathers per pixel the voxels whose sample reads it, in a fixed order, where
## SHARED (`cone_gather`), or scatters each voxel into the pixels its sample reads,
## summed in 64-bit fixed point so that the order of the additions does not show
## (`cone_forward`). Voxels at or behind a source's plane (w <= 0) are left out of both.
<%namespace file="/operators/transpose.cl.mako" import="transpose"/>\
/* pybp matched cone-beam operators: forward projection and its transpose */
% if real == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
typedef ${real} real;
#define FIXED_ONE ${"0x1p32" if real == "double" else "0x1p32f"}  /* 1 in cone_rows' fixed point */
% if forward == "gather":
#define GATHER_ITEMS ${gather[0]}  /* A's work-items a group */
#define SLOTS ${gather[1]}  /* A's image rows a work-item (ROW) */
#define GATHER_COLS ${gather[2]}  /* A's image columns a group */
#define ENTRIES ${gather[3]}  /* voxel columns A lists at a time */
#define CHUNK ${gather[4]}  /* voxel columns whose profiles A makes together */
#define UNROLL ${gather[5]}  /* voxels of a column a work-item reads at once */
#define PHASES ${phases[0]}  /* a column's voxels this far apart are written together */
% else:
#define FORWARD_GROUP ${forward_group}
#define TILE_ROWS ${forward_tile[0]}
#define TILE_COLS ${forward_tile[1]}
#define TILE (TILE_ROWS * TILE_COLS)
#define PLANES ${planes}  /* voxel planes whose boxes are scattered together */
#define LANES ${lanes}  /* work-items along a row of a box */
#define MAGNITUDE_GROUP ${magnitude_group}
% endif

#define COLUMN ${column}  /* A^T: voxels along z per work-item */

// Voxel column (i, j) in image q of matrices m (12 values: voxel indices to (c w, r w,
// w)): the part of its homogeneous position that does not depend on k. A voxel's is
// that plus k times the matrix's third column, always so grouped: where that column is
// (0, m6, 0) (a circular orbit, an untilted detector: SHARED), c and w are the column's
// own for every k, exactly, and a kernel may find them once per column.
inline void cone_column(__global const real *m, const int i, const int j, real *c, real *r,
                        real *w)
{
    *c = fma(m[1], (real)j, fma(m[0], (real)i, m[3]));
    *r = fma(m[5], (real)j, fma(m[4], (real)i, m[7]));
    *w = fma(m[9], (real)j, fma(m[8], (real)i, m[11]));
}

// One coordinate of a position, h / w with reciprocal = 1 / w: false where it is beyond
// the image's bilinear reach (n pixels); else its pixel, the floor, and in *fraction
// what it exceeds that by.
inline bool cone_axis(const real h, const real reciprocal, const int n, int *whole,
                      float *fraction)
{
    const real u = h * reciprocal, u0 = floor(u);
    *fraction = (float)(u - u0);
    if (!(u0 >= -1 && u0 <= n - 1))
        return false;
    *whole = (int)u0;
    return true;
}

% if shared:
// Where SHARED, a voxel's row position is its column's row0 + k step in 64-bit fixed
// point (32 fraction bits; ConePair checks that every position lies within 2^30
// pixels): exact integer additions, so that a kernel walks a column's k in any steps
// with the same bits, and a voxel's floor is a shift, not a double's floor and two
// conversions (A^T 0.106 s on the H100 with these, 0.126 s without; A 0.152 s, 0.162
// s). row0 and step are the column's rc / w and m6 / w (1 / w its `reciprocal`),
// rounded to the nearest 2^-32.
inline long2 cone_rows(const real rc, const real m6, const real reciprocal)
{
    return (long2)(convert_long_sat_rte(rc * reciprocal * FIXED_ONE),
                   convert_long_sat_rte(m6 * reciprocal * FIXED_ONE));
}

// A fixed-point position's floor, and in *fraction what it exceeds that by, rounded to
// float: small fractions keep float's relative accuracy. (Its top 23 bits as a float's
// mantissa, with no conversion, made A^T 4% faster and A 2% slower on the H100, and
// rays through faint voxels 1.6e-6 from float64, not 4.4e-7.)
inline int cone_fixed_split(const long v, float *fraction)
{
    *fraction = convert_float((uint)v) * 0x1p-32f;
    return (int)(v >> 32);
}

// As cone_axis, for a fixed-point position.
inline bool cone_fixed_axis(const long v, const int n, int *whole, float *fraction)
{
    *whole = cone_fixed_split(v, fraction);
    return *whole >= -1 && *whole <= n - 1;
}

% endif
// The one position function of the pair: voxel (i, j, k) of column (cc, rc, wc) in
// image m. False where it is at or behind the source's plane or beyond the image's
// bilinear reach; else its pixel (*row, *col) and the fractions.
inline bool cone_position(__global const real *m, const real cc, const real rc,
                          const real wc, const int k, const int n_rows, const int n_cols,
                          int *row, int *col, float *fr, float *fc)
{
    const real w = fma(m[10], (real)k, wc);
    if (!(w > 0))
        return false;
    const real reciprocal = 1 / w;  // one division, not two
% if shared:
    // (w is wc here: m10 is 0)
    const long2 rows = cone_rows(rc, m[6], reciprocal);
    return cone_axis(fma(m[2], (real)k, cc), reciprocal, n_cols, col, fc)
        && cone_fixed_axis(rows.s0 + k * rows.s1, n_rows, row, fr);
% else:
    return cone_axis(fma(m[2], (real)k, cc), reciprocal, n_cols, col, fc)
        && cone_axis(fma(m[6], (real)k, rc), reciprocal, n_rows, row, fr);
% endif
}

// The bilinear sample at pixel (r, c) plus the fractions, zero beyond the image's edge
// pixels. (Offsets within one image in int: a detector has far fewer than 2^31 pixels,
// and 32-bit offsets made A^T 8% faster on the H100 than size_t ones.)
inline float sample(__global const float *image, const int n_rows, const int n_cols,
                    const int r, const int c, const float fr, const float fc)
{
    const int at = r * n_cols + c;
    const bool top = r >= 0, bottom = r + 1 < n_rows, left = c >= 0, right = c + 1 < n_cols;
    const float v00 = top && left ? image[at] : 0.0f;
    const float v01 = top && right ? image[at + 1] : 0.0f;
    const float v10 = bottom && left ? image[at + n_cols] : 0.0f;
    const float v11 = bottom && right ? image[at + n_cols + 1] : 0.0f;
    return (1.0f - fr) * ((1.0f - fc) * v00 + fc * v01) + fr * ((1.0f - fc) * v10 + fc * v11);
}

// A^T: work-item (i, j, column) sums each image's bilinear sample for COLUMN voxels
// along z from k0, in registers.
__kernel void cone_backward(
${args['cone_backward']}
{
    const int i = get_global_id(0), j = get_global_id(1);
    const int k0 = first_plane + get_global_id(2) * COLUMN;
    if (i >= nx || j >= ny || k0 >= nz)
        return;
    float sums[COLUMN];
    #pragma unroll
    for (int n = 0; n < COLUMN; n++)
        sums[n] = 0.0f;
    for (int q = 0; q < n_angles; q++) {
        __global const real *m = matrices + 12 * q;
        __global const float *image = projections + (size_t)q * n_rows * n_cols;
        real cc, rc, wc;
        cone_column(m, i, j, &cc, &rc, &wc);
% if shared:
        // the column's c and w are each voxel's: its image column and 1 / w once
        if (!(wc > 0))
            continue;
        const real reciprocal = 1 / wc;
        int c;
        float fc;
        if (!cone_axis(cc, reciprocal, n_cols, &c, &fc))
            continue;
        const long2 rows = cone_rows(rc, m[6], reciprocal);
        long v = rows.s0 + k0 * rows.s1;
        #pragma unroll
        for (int n = 0; n < COLUMN; n++, v += rows.s1) {
            int r;
            float fr;
            if (cone_fixed_axis(v, n_rows, &r, &fr))
                sums[n] += sample(image, n_rows, n_cols, r, c, fr, fc);
        }
% else:
        #pragma unroll
        for (int n = 0; n < COLUMN; n++) {
            int r, c;
            float fr, fc;
            if (cone_position(m, cc, rc, wc, k0 + n, n_rows, n_cols, &r, &c, &fr, &fc))
                sums[n] += sample(image, n_rows, n_cols, r, c, fr, fc);
        }
% endif
    }
    #pragma unroll
    for (int n = 0; n < COLUMN; n++)
        if (k0 + n < nz)
            volume[((size_t)(k0 + n) * ny + j) * nx + i] = sums[n];
}

% if real == "double":
#define BOX_MARGIN 1e-6  /* voxels: positions in double are good to 1e-12 of thousands */
#define U_MARGIN 1e-6  /* pixels, likewise */
% else:
#define BOX_MARGIN 0.05f  /* voxels: positions in float, to 1e-7 of thousands of pixels */
#define U_MARGIN 0.01f  /* pixels, likewise */
% endif
% if forward == "gather":

${transpose(args['transpose_slices'], tile)}

// A where SHARED: a gather, each pixel the sum of the voxels whose bilinear sample reads
// it, with the weights the sample gives it, added in one fixed order (no atomics; the
// same bits whatever the work-group's shape). Work-group (columns, rows, image) takes a
// band of BAND image rows from r0 on GATHER_COLS image columns; each work-item owns
// SLOTS rows of it (ROW: ROWS neighbours at a time) and their sums.
//
// A voxel column's image column u is its voxels' (SHARED), so the voxel columns whose
// sample reads image column c are those with floor(u) = c - 1 (weight fc) and c (weight
// 1 - fc): two "half strips". For each half strip vc in turn, the group lists its voxel
// columns in local memory (along the axis a the strip runs along, then b), and takes
// them CHUNK at a time in two steps:
// - the columns' profiles: the group's work-items take each column's voxels in the
//   band's reach (neighbouring work-items neighbouring k, UNROLL each), each finding its
//   exact row r (`cone_rows`, as `cone_position`) and putting (1 - fr) x at row r of the
//   column's profile and fr x at row r + 1 (of `below`, a second profile, where split).
//   Voxels k of one phase (k % PHASES) lie PHASES apart, far enough that their images
//   are two rows apart (one profile) or one (split; pybp/cone/project.py's
//   gather_phases): no two work-items write one place in a phase, and the phases follow
//   one another, each place's terms in phase order.
// - each work-item adds, for each of its rows, each column's profile there times 1 - fc
//   toward column vc and fc toward vc + 1, in the list's order, and clears it.
// Pixel (r, vc) is its sums from half strip vc plus those from half strip vc - 1.
//
// `columns` is the volume transposed (ny nx, nz): a voxel column's planes consecutive,
// so that neighbouring work-items read neighbouring floats.
#define BAND (SLOTS * GATHER_ITEMS)
// a column's voxels k of phase k % PHASES, from k0 on: the phase is k's alone, so that
// a place's terms come in one order whatever the band's rows
#define FIRST_OF_PHASE(k0, phase) ((k0) + ((phase) - (k0) % PHASES + PHASES) % PHASES)
<% rows = gather[6] %>\
#define ROWS ${rows}  /* neighbouring rows a work-item reads at once (ROW) */
// a profile's places: the band's rows, and a margin of ROWS places on either side (rows
// -1 and BAND: the writers need not test for them)
#define PLACES (BAND + 2 * ROWS)
#define ROW(n) (ROWS * (item + GATHER_ITEMS * ((n) / ROWS)) + (n) % ROWS)  /* slot n's row in the band */
<% vector = "float%d" % rows if rows > 1 else "float" %>\
// A's gather: the voxels work-item `item` reads of the listed columns e0 ... e0 + CHUNK
// - 1 (of `entries`) in round `round` of phase `phase`, 0 where there is none.
inline void gather_reads(float values[CHUNK][UNROLL], __global const float *columns,
                         __local const int *listed, __local const int2 *listed_k,
                         const int e0, const int entries, const int phase, const int round,
                         const int item, const int nz)
{
    #pragma unroll
    for (int e = 0; e < CHUNK; e++) {
        const int column = e0 + e < entries ? listed[e0 + e] : -1;
        const int2 ks = listed_k[min(e0 + e, ENTRIES - 1)];
        #pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int k = FIRST_OF_PHASE(ks.s0, phase)
                + PHASES * (item + GATHER_ITEMS * (round * UNROLL + u));
            values[e][u] = column >= 0 && k <= ks.s1 ? columns[(size_t)column * nz + k] : 0.0f;
        }
    }
}

__kernel __attribute__((reqd_work_group_size(GATHER_ITEMS, 1, 1)))
void cone_gather(
${args['cone_gather']}
{
    __local int listed[ENTRIES];  // a voxel column j nx + i, or -1: not of the half strip
    __local long2 listed_rows[ENTRIES];  // its row0 and step (cone_rows)
    __local int2 listed_k[ENTRIES];  // the k whose rows may reach the band: first, last
    __local float listed_fc[ENTRIES];  // its fc
    __local int scan[GATHER_ITEMS];
% if phases[1]:
    // split: a column's profile at row r, (1 - fr) x of its voxel at row r; below, fr x
    // of its voxel at row r - 1. Declared as ROWS rows a ${vector}, so that a reader's
    // rows are one aligned access; the writers see them as floats.
    __local ${vector} profile_rows[CHUNK][BAND / ROWS + 2], below_rows[CHUNK][BAND / ROWS + 2];
    __local float (*const below)[PLACES] = (__local float (*)[PLACES])below_rows;
% else:
    // a column's profile: at row r, (1 - fr) x of its voxel at row r plus fr x of its
    // voxel at row r - 1. Declared as ROWS rows a ${vector}, so that a reader's rows are
    // one aligned access; the writers see them as floats.
    __local ${vector} profile_rows[CHUNK][BAND / ROWS + 2];
    __local float (*const below)[PLACES] = (__local float (*)[PLACES])profile_rows;
% endif
    __local float (*const profile)[PLACES] = (__local float (*)[PLACES])profile_rows;
    const int item = get_local_id(0);
    const int c0 = get_group_id(0) * GATHER_COLS, c_end = min(c0 + GATHER_COLS, n_cols);
    const int r0 = get_group_id(1) * BAND;
    const int q = first_angle + get_group_id(2);
    __global const real *m = matrices + 12 * q;
    const real m6 = m[6];
    for (int n = item; n < CHUNK * PLACES; n += GATHER_ITEMS)
        profile[n / PLACES][n % PLACES] = below[n / PLACES][n % PLACES] = 0.0f;
    // the last half strip's sums toward the column it shares with this one, each
    // work-item's own (in local memory, not registers: the kernel's registers bound how
    // many groups run at once)
    __local float previous[SLOTS][GATHER_ITEMS];
    #pragma unroll
    for (int n = 0; n < SLOTS; n++)
        previous[n][item] = 0.0f;
    // Neighbouring groups share a half strip (vc = the right one's c0 - 1), so odd
    // groups take theirs from right to left: the two read the one they share at about
    // one time, its voxels once from memory into the cache.
    const bool leftward = get_group_id(0) % 2;
    for (int step = 0; step <= c_end - c0; step++) {
        const int vc = leftward ? c_end - 1 - step : c0 - 1 + step;
        float here[SLOTS], after[SLOTS];  // toward columns vc and vc + 1
        #pragma unroll
        for (int n = 0; n < SLOTS; n++)
            here[n] = after[n] = 0.0f;
        // The lines u = t are (m0 - t m8) i + (m1 - t m9) j + m3 - t m11 = 0. The half
        // strip between t0 and t1 runs along a = i where their normal is nearer the j
        // axis (each i then meets a line at one j = b), else along a = j: a choice of
        // the strip's alone, so that its voxel columns come in one order in every group.
        const real t_mid = vc + 0.5;
        const bool along_i = fabs(m[1] - t_mid * m[9]) >= fabs(m[0] - t_mid * m[8]);
        const int na = along_i ? nx : ny;
        for (int a0 = 0; a0 < na; a0 += GATHER_ITEMS) {
            // line a's candidates b, first ... last, and their places in the list. As
            // w > 0 on the whole volume (ConeGeometry refuses one reaching a source's
            // plane), u - t has the sign of beta_t (b - b_t), beta_t = mb - t wb and b_t
            // the line's crossing: where beta_t has one sign from t0 to t1, the strip's b
            // on line a lie between the two lines' crossings. (Else, the lines near
            // parallel to the b axis, every b is a candidate.)
            const int a = a0 + item, nb = along_i ? ny : nx;
            const real t0 = vc - U_MARGIN, t1 = vc + 1 + U_MARGIN;
            const real mb = along_i ? m[1] : m[0], wb = along_i ? m[9] : m[8];
            const real beta0 = mb - t0 * wb, beta1 = mb - t1 * wb;
            int first = 0, last = a < na ? nb - 1 : -1;
            if (a < na && ((beta0 > 0 && beta1 > 0) || (beta0 < 0 && beta1 < 0))) {
                const real ma = along_i ? m[0] : m[1], wa = along_i ? m[8] : m[9];
                const real b0 = -fma(ma - t0 * wa, (real)a, m[3] - t0 * m[11]) / beta0;
                const real b1 = -fma(ma - t1 * wa, (real)a, m[3] - t1 * m[11]) / beta1;
                const real low = fmax(ceil(fmin(b0, b1) - BOX_MARGIN), (real)0);
                const real high = fmin(floor(fmax(b0, b1) + BOX_MARGIN), (real)(nb - 1));
                first = low <= high ? (int)low : 0;
                last = low <= high ? (int)high : -1;
            }
            const int count = last - first + 1;
            barrier(CLK_LOCAL_MEM_FENCE);  // the last chunk's total read
            scan[item] = count;
            for (int width = 1; width < GATHER_ITEMS; width *= 2) {  // inclusive sums
                barrier(CLK_LOCAL_MEM_FENCE);
                const int preceding = item >= width ? scan[item - width] : 0;
                barrier(CLK_LOCAL_MEM_FENCE);
                scan[item] += preceding;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            const int total = scan[GATHER_ITEMS - 1], offset = scan[item] - count;
            for (int piece = 0; piece < total; piece += ENTRIES) {
                barrier(CLK_LOCAL_MEM_FENCE);  // the last piece's list read
                const int b_end = min(last, first + piece + ENTRIES - 1 - offset);
                for (int b = max(first, first + piece - offset); b <= b_end; b++) {
                    const int at = offset + b - first - piece;  // its place in the list
                    const int i = along_i ? a : b, j = along_i ? b : a;
                    real cc, rc, wc;
                    cone_column(m, i, j, &cc, &rc, &wc);
                    const real reciprocal = 1 / wc;
                    int col = -2;
                    float fc = 0.0f;
                    const bool in = wc > 0 && cone_axis(cc, reciprocal, n_cols, &col, &fc)
                        && col == vc;
                    listed[at] = in ? j * nx + i : -1;
                    listed_rows[at] = cone_rows(rc, m6, reciprocal);
                    listed_fc[at] = fc;
                    // k at row position v is v slope + intercept, slope = w / m6 and
                    // intercept = -rc / m6: an estimate, in float, widened by its
                    // rounding (rows from -1 to n_rows), of the k whose rows r reach
                    // the band (r0 - 1 <= r < r0 + BAND); every k where it overflows
                    const float slope = wc / m6, intercept = -rc / m6;
                    const float slack =
                        0.01f + 1e-5f * (fabs(slope) * (n_rows + 1) + fabs(intercept));
                    const float k_top = fma((float)(r0 - 1), slope, intercept);
                    const float k_bottom = fma((float)(r0 + BAND), slope, intercept);
                    listed_k[at] = isfinite(slope) && isfinite(intercept)
                        ? (int2)(max(convert_int_sat_rtp(fmin(k_top, k_bottom) - slack), 0),
                                 min(convert_int_sat_rtn(fmax(k_top, k_bottom) + slack), nz - 1))
                        : (int2)(0, nz - 1);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                const int entries = min(ENTRIES, total - piece);
                for (int e0 = 0; e0 < entries; e0 += CHUNK) {
                    // the profiles of columns e0 ... e0 + CHUNK - 1, UNROLL voxels of each a
                    // work-item at a time, all read before any is placed (the reads'
                    // latency, not their number, is what a column's profile costs)
                    const int reach = PHASES * GATHER_ITEMS * UNROLL;  // k a round covers
                    int rounds = 0;
                    #pragma unroll
                    for (int e = 0; e < CHUNK; e++)
                        if (e0 + e < entries && listed[e0 + e] >= 0)
                            rounds = max(rounds, (listed_k[e0 + e].s1 - listed_k[e0 + e].s0
                                                  + reach) / reach);
                    for (int phase = 0; phase < PHASES; phase++) {
                        for (int round = 0; round < rounds; round++) {
                            float values[CHUNK][UNROLL];
                            gather_reads(values, columns, listed, listed_k, e0, entries,
                                         phase, round, item, nz);
                            #pragma unroll
                            for (int e = 0; e < CHUNK; e++) {
                                if (e0 + e >= entries || listed[e0 + e] < 0)
                                    continue;
                                const long2 rows = listed_rows[e0 + e];
                                const int2 ks = listed_k[e0 + e];
                                const int k0 = FIRST_OF_PHASE(ks.s0, phase)
                                    + PHASES * (item + GATHER_ITEMS * round * UNROLL);
                                const long v_k0 = rows.s0 + k0 * rows.s1;
                                const long v_step = (long)(PHASES * GATHER_ITEMS) * rows.s1;
                                #pragma unroll
                                for (int u = 0; u < UNROLL; u++) {
                                    // k grows with u: past the column's last voxel, the
                                    // rest are too (a warp all past skips the work)
                                    if (k0 + PHASES * GATHER_ITEMS * u > ks.s1)
                                        break;
                                    float fr;
                                    const int v0 = cone_fixed_split(v_k0 + u * v_step, &fr);
                                    if (!(v0 >= r0 - 1 && v0 < r0 + BAND))
                                        continue;
                                    // rows r and r + 1, r from -1 to BAND - 1: the places
                                    // of the profiles' margins hold rows -1 and BAND
                                    const int at = v0 - r0 + ROWS;
                                    // the first phase writes each place once (cleared
                                    // before); a later one adds to what an earlier wrote
                                    if (phase == 0) {
                                        profile[e][at] = (1.0f - fr) * values[e][u];
                                        below[e][at + 1] = fr * values[e][u];
                                    } else {
                                        profile[e][at] += (1.0f - fr) * values[e][u];
                                        below[e][at + 1] += fr * values[e][u];
                                    }
                                }
                            }
                        }
                        barrier(CLK_LOCAL_MEM_FENCE);  // a phase's places written
                    }
                    for (int e = e0; e < min(e0 + CHUNK, entries); e++) {
                        if (listed[e] < 0)
                            continue;
                        const float fc = listed_fc[e];
                        // ROWS neighbouring rows at a time: one read and one write
                        #pragma unroll
                        for (int n = 0; n < SLOTS; n += ROWS) {
                            const int at = 1 + ROW(n) / ROWS;  // (after the margin)
% if phases[1]:
                            const ${vector} s = profile_rows[e - e0][at] + below_rows[e - e0][at];
                            below_rows[e - e0][at] = 0.0f;
% else:
                            const ${vector} s = profile_rows[e - e0][at];
% endif
                            profile_rows[e - e0][at] = 0.0f;
% for t in range(rows):
<% part = "s.s%d" % t if rows > 1 else "s" %>\
                            here[n + ${t}] = fma(1.0f - fc, ${part}, here[n + ${t}]);
                            after[n + ${t}] = fma(fc, ${part}, after[n + ${t}]);
% endfor
                        }
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);  // the profiles read and cleared
                }
            }
        }
        // pixel (r, c) is here[n] of half strip c plus after[n] of half strip c - 1, the
        // one of the two found first held in `previous`
        #pragma unroll
        for (int n = 0; n < SLOTS; n++) {
            const int r = r0 + ROW(n);
            if (leftward) {
                if (vc + 1 < c_end && r < n_rows)
                    projections[((size_t)q * n_rows + r) * n_cols + vc + 1] =
                        previous[n][item] + after[n];
                previous[n][item] = here[n];
            } else {
                if (vc >= c0 && r < n_rows)
                    projections[((size_t)q * n_rows + r) * n_cols + vc] =
                        here[n] + previous[n][item];
                previous[n][item] = after[n];
            }
        }
    }
}
% else:

// The sum of a group's part[], in a fixed order (a tree), for every work-item.
inline float group_sum(__local float *part, const int item)
{
    for (int width = MAGNITUDE_GROUP / 2; width > 0; width /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (item < width)
            part[item] += part[item + width];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return part[0];
}

// The scale of A's sums. A adds its terms as 64-bit integers in local memory, so that
// the sum of a pixel is one number whatever order the work-items add in (float atomics
// would give other bits on each run). A term is weight * voxel * 2^shift, rounded; no
// pixel's terms add to more than the volume's L1 norm (a voxel reaches a pixel once,
// with a weight of at most 1), so with L1 < 2^e and shift = 60 - e no sum overflows, and
// each term is good to 2^-60 of the L1 norm (float32's own rounding is 2^-24 of the
// term). The norm is summed in a fixed order: MAGNITUDE_GROUPS partial sums, then one
// group's tree.
__kernel __attribute__((reqd_work_group_size(MAGNITUDE_GROUP, 1, 1)))
void cone_magnitude(
${args['cone_magnitude']}
{
    __local float part[MAGNITUDE_GROUP];
    const int item = get_local_id(0);
    float sum = 0.0f;
    for (size_t n = get_global_id(0); n < size; n += get_global_size(0))
        sum += fabs(volume[n]);
    part[item] = sum;
    const float total = group_sum(part, item);  // (every work-item: it holds barriers)
    if (item == 0)
        parts[get_group_id(0)] = total;
}

__kernel __attribute__((reqd_work_group_size(MAGNITUDE_GROUP, 1, 1)))
void cone_shift(
${args['cone_shift']}
{
    __local float part[MAGNITUDE_GROUP];
    const int item = get_local_id(0);
    part[item] = item < n_parts ? parts[item] : 0.0f;
    const float total = group_sum(part, item);
    if (item == 0) {
        int exponent = 0;
        if (isfinite(total))
            frexp(total, &exponent);  // total < 2^exponent
        // (an infinite or NaN norm: the smallest scale; each non-finite voxel is caught
        // by A itself)
        shift[0] = isfinite(total) ? clamp(60 - exponent, -100, 100) : -100;
    }
}

// A pixel's sum as two 32-bit words TILE apart, added to with 32-bit local atomics (a
// low word's carry into the high one): addition modulo 2^64 in any order gives the one
// sum. (64-bit atomics on one word were slower on the H100: 8-byte words put twice the
// lanes on a bank.)
inline void add_term(volatile __local uint *sums, const int n, const long term)
{
    const uint low = (uint)term;
    const uint before = atomic_add(sums + n, low);
    atomic_add(sums + TILE + n, (uint)(term >> 32) + (before + low < before ? 1u : 0u));
}

// A voxel's terms into the pixels of its 2 x 2 block (row, col its first, in the tile)
// that are in the tile; a non-finite voxel marks them instead.
inline void scatter(volatile __local uint *sums, __local uchar *nonfinite, const float x,
                    const int row, const int col, const float fr, const float fc,
                    const float scale)
{
    for (int n = 0; n < 4; n++) {
        const int r = row + (n >> 1), c = col + (n & 1);
        if (r < 0 || r >= TILE_ROWS || c < 0 || c >= TILE_COLS)
            continue;
        if (!isfinite(x))
            nonfinite[r * TILE_COLS + c] = 1;
        else
            add_term(sums, r * TILE_COLS + c, convert_long_rte(
                (n & 2 ? fr : 1.0f - fr) * (n & 1 ? fc : 1.0f - fc) * x * scale));
    }
}

// A: work-group (tile column, tile row, image) adds, into its TILE_ROWS x TILE_COLS
// pixels, each voxel whose bilinear sample reads them, with the weight the sample gives
// them: a voxel-driven scatter, so each voxel's position is found once per image (less
// the margins of the boxes below), not once per pixel and plane. The voxels are those of
// the tile's window preimage: the rays through the window's corners (rays: voxel-index
// points x = w d - s, d = inverse(M) (c, r, 1), s = inverse(M) m4) meet each plane along
// the tile's central ray's steepest axis in a quadrilateral; the voxels of the boxes
// bounding those of PLANES planes at a time, widened by BOX_MARGIN for the rounding of
// the corners, are the candidates, and each is judged by `cone_position` itself (or its
// hoisted form), so the rounding of a box never changes a weight.
#define REJECT 0.01f  /* pixels beyond the window a float position may stray */
__kernel __attribute__((reqd_work_group_size(FORWARD_GROUP, 1, 1)))
void cone_forward(
${args['cone_forward']}
{
    __local uint sums[2 * TILE];  // low words, then high words
    __local uchar nonfinite[TILE];
    const int item = get_local_id(0);
    const int c0 = get_group_id(0) * TILE_COLS, r0 = get_group_id(1) * TILE_ROWS;
    const int q = first_angle + get_group_id(2);
    for (int n = item; n < TILE; n += FORWARD_GROUP) {
        sums[n] = sums[TILE + n] = 0;
        nonfinite[n] = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float scale = ldexp(1.0f, shift[0]);
    __global const real *m = matrices + 12 * q;
    __global const real *t = inverses + 12 * q;  // inverse(M) row by row, then s
    const int size[3] = {nx, ny, nz};
    // The window: the positions whose bilinear sample reads a pixel of the tile.
    // (within the image: a window far beyond it makes the corner rays diverge)
    const real left = c0 - 1, right = min(c0 + TILE_COLS, n_cols);
    const real top = r0 - 1, bottom = min(r0 + TILE_ROWS, n_rows);
    // The central ray's direction picks the axis.
    real d[3];
    for (int a = 0; a < 3; a++)
        d[a] = t[3 * a] * (0.5 * (left + right)) + t[3 * a + 1] * (0.5 * (top + bottom))
             + t[3 * a + 2];
    const int axis = fabs(d[0]) >= fabs(d[1]) && fabs(d[0]) >= fabs(d[2]) ? 0
                   : fabs(d[1]) >= fabs(d[2]) ? 1 : 2;
    const int a1 = axis == 0 ? 1 : 0, a2 = axis == 2 ? 1 : 2;
    const real s_axis = t[9 + axis], s1 = t[9 + a1], s2 = t[9 + a2];
    // A corner ray meets plane p at w = (p + s_axis) / d_axis: its other two indices
    // are lines in p, x = p slope + offset, found once here (in local memory, not in
    // registers held through the loops below).
    __local real lines[4][4];  // per corner: slope1, offset1, slope2, offset2
    __local int meets[4];  // the sign of the corner ray along the axis
    if (item < 4) {
        const real cc = item & 1 ? right : left, rr = item & 2 ? bottom : top;
        const real along = t[3 * axis] * cc + t[3 * axis + 1] * rr + t[3 * axis + 2];
        const real k1 = (t[3 * a1] * cc + t[3 * a1 + 1] * rr + t[3 * a1 + 2]) / along;
        const real k2 = (t[3 * a2] * cc + t[3 * a2 + 1] * rr + t[3 * a2 + 2]) / along;
        meets[item] = along > 0 ? 1 : along < 0 ? -1 : 0;
        lines[item][0] = k1;
        lines[item][1] = s_axis * k1 - s1;
        lines[item][2] = k2;
        lines[item][3] = s_axis * k2 - s2;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Where the corner rays all run one way along the axis, a plane's voxels of the
    // window's preimage lie within their four points (a plane behind the source gives a
    // box whose voxels all fail w > 0 below); else the preimage is unbounded in a plane,
    // and every voxel of it is a candidate.
    const bool bounded = meets[0] != 0 && meets[1] == meets[0] && meets[2] == meets[0]
        && meets[3] == meets[0];
% if shared:
    const real per_row = 1 / m[6];  // (a range of k, widened by a voxel: not exact)
% endif
    for (int p = 0; p < size[axis]; p += PLANES) {
        const int planes = min(PLANES, size[axis] - p);
        real low1 = 0, high1 = size[a1] - 1, low2 = 0, high2 = size[a2] - 1;
        if (bounded) {
            low1 = low2 = INFINITY;
            high1 = high2 = -INFINITY;
        }
        for (int n = 0; bounded && n < 8; n++) {
            const int plane = n & 1 ? p + planes - 1 : p;  // a line's extremes: its ends
            const real x1 = plane * lines[n / 2][0] + lines[n / 2][1];
            const real x2 = plane * lines[n / 2][2] + lines[n / 2][3];
            low1 = fmin(low1, x1); high1 = fmax(high1, x1);
            low2 = fmin(low2, x2); high2 = fmax(high2, x2);
        }
        // the box's voxels, within the volume (the bounds compared in real: no overflow)
        const real first1 = fmax(ceil(low1 - BOX_MARGIN), (real)0);
        const real last1 = fmin(floor(high1 + BOX_MARGIN), (real)(size[a1] - 1));
        const real first2 = fmax(ceil(low2 - BOX_MARGIN), (real)0);
        const real last2 = fmin(floor(high2 + BOX_MARGIN), (real)(size[a2] - 1));
        if (!(first1 <= last1 && first2 <= last2))
            continue;
% if shared:
        if (axis != 2) {
            // A column (plane, v1) of the batch a work-item, LANES neighbours along v1:
            // its image column and 1 / w once, then its voxels along z (a2) within the
            // rows its image rows cross in the window (v is linear in k), each judged by
            // its exact row.
            for (int plane = p + item / LANES; plane < p + planes;
                    plane += FORWARD_GROUP / LANES)
                for (int v1 = (int)first1 + item % LANES; v1 <= (int)last1; v1 += LANES) {
                    const int i = axis == 0 ? plane : v1, j = axis == 0 ? v1 : plane;
                    real cc, rc, wc;
                    cone_column(m, i, j, &cc, &rc, &wc);
                    if (!(wc > 0))
                        continue;
                    const real reciprocal = 1 / wc;
                    int vc;
                    float fc;
                    if (!cone_axis(cc, reciprocal, n_cols, &vc, &fc) || vc < left
                            || vc >= right)
                        continue;
                    const long2 rows = cone_rows(rc, m[6], reciprocal);
                    int k_first = (int)first2, k_last = (int)last2;
                    if (m[6] != 0) {
                        const real k_top = (top * wc - rc) * per_row;
                        const real k_bottom = (bottom * wc - rc) * per_row;
                        const real low = floor(fmin(k_top, k_bottom)) - 1;
                        const real high = ceil(fmax(k_top, k_bottom)) + 1;
                        k_first = max(k_first, (int)fmax(low, (real)-1));
                        k_last = min(k_last, (int)fmin(high, (real)nz));
                    }
                    for (int k = k_first; k <= k_last; k++) {
                        int vr;
                        float fr;
                        if (!cone_fixed_axis(rows.s0 + k * rows.s1, n_rows, &vr, &fr)
                                || vr < top || vr >= bottom)
                            continue;
                        scatter(sums, nonfinite, volume[((size_t)k * ny + j) * nx + i],
                                vr - r0, vc - c0, fr, fc, scale);
                    }
                }
            continue;
        }
% endif
        // LANES neighbouring work-items take neighbouring voxels of a row of a box (along
        // a1), the group's rows of LANES the rows (a2) of its PLANES boxes in turn
        const int n2 = (int)(last2 - first2) + 1;
        int plane = p, v2 = (int)first2 + item / LANES;
        while (true) {
            for (; v2 > (int)last2; v2 -= n2)  // on to the next plane's rows
                plane++;
            if (plane >= p + planes)
                break;
            for (int v1 = (int)first1 + item % LANES; v1 <= (int)last1; v1 += LANES) {
                const int i = axis == 0 ? plane : v1;
                const int j = axis == 1 ? plane : axis == 0 ? v1 : v2;
                const int k = axis == 2 ? plane : v2;
                real cc, rc, wc;
                cone_column(m, i, j, &cc, &rc, &wc);
                // in float first, to pass over the voxels clearly outside the window
                // without the exact divisions (slack: REJECT pixels and 8x float's
                // relative error)
                const float fw = (float)fma(m[10], (real)k, wc), inverse = 1.0f / fw;
                const float uc = (float)fma(m[2], (real)k, cc) * inverse;
                const float ur = (float)fma(m[6], (real)k, rc) * inverse;
                const float slack = REJECT + 1e-6f * (fabs(uc) + fabs(ur));
                if (!(fw > 0) || uc < left - slack || uc >= right + slack
                        || ur < top - slack || ur >= bottom + slack)
                    continue;
                int vr, vc;
                float fr, fc;
                if (!cone_position(m, cc, rc, wc, k, n_rows, n_cols, &vr, &vc, &fr, &fc)
                        || vc < left || vc >= right || vr < top || vr >= bottom)
                    continue;
                scatter(sums, nonfinite, volume[((size_t)k * ny + j) * nx + i], vr - r0,
                        vc - c0, fr, fc, scale);
            }
            v2 += FORWARD_GROUP / LANES;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float unscale = ldexp(1.0f, -shift[0]);
    for (int n = item; n < TILE; n += FORWARD_GROUP) {
        const int r = r0 + n / TILE_COLS, c = c0 + n % TILE_COLS;
        const long sum = (long)(((ulong)sums[TILE + n] << 32) | sums[n]);
        if (r < n_rows && c < n_cols)
            projections[((size_t)q * n_rows + r) * n_cols + c] =
                nonfinite[n] ? NAN : convert_float_rte(sum) * unscale;
    }
}
% endif
