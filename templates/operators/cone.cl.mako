## The matched pair of cone-beam operators (docs/design.md, section 9): a forward
## projection A and its exact transpose A^T, distance-driven: a voxel's shadow is a box
## on the detector, and each ray through the box is as long as the voxel's chord.
##
## Both find a voxel's box and chord in image q with the functions below (`cone_across`,
## `cone_box_u`, `cone_share`, `cone_amplitude`; where the matrices' third column is
## (0, m6, 0) (SHARED), its rows in fixed point as its column's first edge plus k steps,
## `cone_edges`): each voxel-pixel weight, amplitude x row share x column share, comes
## from the same floats in both kernels (where SHARED, A^T takes a voxel's row shares
## as differences of the rows' running sums at its edges, `cone_integral`: its weights
## are A's to float's rounding of an edge's place in its row, 2^-24 of a row). A^T
## gathers, per voxel, the image under its box (zero beyond the detector). A
## (`forward`, pybp/cone/project.py's forward_method) either gathers per pixel the
## voxels whose box covers it, in a fixed order, where SHARED (`cone_gather`), or
## scatters each voxel into the pixels its box covers, summed in 64-bit fixed point so
## that the order of the additions does not show (`cone_forward`). Voxels at or behind
## a source's plane (w <= 0) are left out of both.
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
#define PHASES ${phases}  /* a column's voxels this far apart are written together */
#define BOX_ROWS ${box_rows}  /* the most rows a voxel's box covers */
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
#define SOURCE ${source}  /* an image's rays: p (a point, or minus a direction), the voxel's sides */
#define INVERSE ${inverse}  /* an image's rays through pixels (E + t D), D and E row by row */

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

// Image position (column, or row with a = 4) of the voxel-index point (x, y, z).
inline real cone_at(__global const real *m, const int a, const real x, const real y,
                    const real z)
{
    return fma(m[a + 2], z, fma(m[a + 1], y, fma(m[a], x, m[a + 3])))
        / fma(m[10], z, fma(m[9], y, fma(m[8], x, m[11])));
}

// The ray to column (i, j) (s: the image's rays, pybp/cone/project.py's tables: p, then
% if point:
// the voxel's sides x, y, z; the rays come from the point p: the ray to voxel X runs
// along X - p): the
% else:
// the voxel's sides x, y, z; the rays run along -p, parallel): the
% endif
// half-voxel step (*di, *dj) across the horizontal axis whose faces make the box along
// the image's columns, and what cone_amplitude needs of it: the ray's squared
// horizontal length and one over its length along the other axis in voxels. The faces
// whose shadows are wider make the box: x's where the ray runs more along y in voxels
// (a side s_x seen along (l_x, l_y) spans s_x |l_y|, and l = d s), for voxels of any
// sides.
inline void cone_across(__global const real *s, const int i, const int j, real *di,
                        real *dj, float *horizontal, float *scale)
{
% if point:
    const real dx = i - s[0], dy = j - s[1], lx = dx * s[3], ly = dy * s[4];
% else:
    const real dx = -s[0], dy = -s[1], lx = dx * s[3], ly = dy * s[4];
% endif
    const bool along_y = fabs(dy) > fabs(dx);
    *di = along_y ? (real)0.5 : (real)0;
    *dj = along_y ? (real)0 : (real)0.5;
    *horizontal = (float)(lx * lx + ly * ly);
    *scale = (float)(1 / fmax(fabs(dx), fabs(dy)));
}

// The ray's length through voxel k of the column: the voxel's side along the axis the
// ray runs more along (in voxels) over the cosine of the angle between them.
inline float cone_amplitude(__global const real *s, const float horizontal,
                            const float scale, const int k)
{
% if point:
    const float dz = (float)(((real)k - s[2]) * s[5]);
% else:
    const float dz = (float)(-s[2] * s[5]);
% endif
    return scale * sqrt(fma(dz, dz, horizontal));
}

// A voxel's box along the image's columns, from ua to ub (either order; pixels from the
// first pixel's centre). False where it misses the detector; else its first pixel and
// its ends from that pixel's edge.
inline bool cone_box_u(const real ua, const real ub, const int n_cols, int *first,
                       float *low, float *high)
{
    const real lo = fmin(ua, ub) + (real)0.5, hi = fmax(ua, ub) + (real)0.5;
    if (!(hi > 0 && lo < n_cols))
        return false;
    *first = max((int)floor(lo), 0);
    *low = (float)(lo - *first);
    *high = (float)(hi - *first);
    return true;
}

// Where a voxel's faces across (di, dj), through its centre (x, y, z), project along the
// columns (*ua, *ub), and where its top and bottom faces project along the rows (*va,
// *vb): its box. Where the detector is turned so that those faces' images run more
// along the other axis, the other way about.
inline void cone_box(__global const real *m, const real x, const real y, const real z,
                     const real di, const real dj, real *ua, real *ub, real *va, real *vb)
{
    const real step = 0.5;  // (half a voxel)
    *ua = cone_at(m, 0, x - di, y - dj, z);
    *ub = cone_at(m, 0, x + di, y + dj, z);
    *va = cone_at(m, 4, x, y, z - step);
    *vb = cone_at(m, 4, x, y, z + step);
    const real ta = cone_at(m, 4, x - di, y - dj, z), tb = cone_at(m, 4, x + di, y + dj, z);
    const real sa = cone_at(m, 0, x, y, z - step), sb = cone_at(m, 0, x, y, z + step);
    if (fabs(tb - ta) + fabs(sb - sa) > fabs(*ub - *ua) + fabs(*vb - *va)) {
        *ua = sa;
        *ub = sb;
        *va = ta;
        *vb = tb;
    }
}

// The share of pixel `first + n` a box from low to high (cone_box_u) covers.
inline float cone_share(const float low, const float high, const int n)
{
    return fmax(fmin(high, (float)(n + 1)) - fmax(low, (float)n), 0.0f);
}

// The rows of a box from position a to b (either order) of one axis, within n pixels:
// false where none; else the first and the last.
inline bool cone_span(const real a, const real b, const int n, int *first, int *last)
{
    const real lo = fmin(a, b), hi = fmax(a, b);
    if (!(hi > 0 && lo < n))
        return false;
    *first = max((int)floor(lo), 0);
    *last = min((int)ceil(hi) - 1, n - 1);
    return *first <= *last;
}

// The share of row r a box from lo to hi covers.
inline float cone_row_share(const real lo, const real hi, const int r)
{
    return (float)fmax(fmin(hi, (real)(r + 1)) - fmax(lo, (real)r), (real)0);
}

% if shared:
// Where SHARED, a voxel's row position is its column's row0 + k step in 64-bit fixed
// point (32 fraction bits; ConePair checks that every position lies within 2^30
// pixels): exact integer additions, so that a kernel walks a column's k in any steps
// with the same bits, and a voxel's rows are shifts, not a double's floor and two
// conversions. row0 and step are the column's rc / w and m6 / w (1 / w its
// `reciprocal`), rounded to the nearest 2^-32.
inline long2 cone_rows(const real rc, const real m6, const real reciprocal)
{
    return (long2)(convert_long_sat_rte(rc * reciprocal * FIXED_ONE),
                   convert_long_sat_rte(m6 * reciprocal * FIXED_ONE));
}

// The column's edges: voxel k's box along the rows runs from edge.s0 + k edge.s1 to
// edge.s0 + (k + 1) edge.s1 (fixed point, from the first pixel's edge), so that
// neighbouring voxels share an edge, bit for bit.
inline long2 cone_edges(const long2 rows)
{
    return (long2)(rows.s0 - (rows.s1 >> 1) + (1L << 31), rows.s1);
}

// The rows of voxel k's box (cone_edges), within n rows: false where none.
inline bool cone_fixed_span(const long2 edge, const int k, const int n, long *lo, long *hi,
                            int *first, int *last)
{
    const long a = edge.s0 + k * edge.s1, b = a + edge.s1;
    *lo = min(a, b);
    *hi = max(a, b);
    *first = max((int)(*lo >> 32), 0);
    *last = min((int)((*hi - 1) >> 32), n - 1);
    return *first <= *last;
}

// The share of row r a fixed-point box from lo to hi covers.
inline float cone_fixed_share(const long lo, const long hi, const int r)
{
    const long top = (long)r << 32;
    return convert_float(min(hi, top + (1L << 32)) - max(lo, top)) * 0x1p-32f;
}

% endif
// A^T: work-item (i, j, column) sums, for COLUMN voxels along z from k0, each image
// under each voxel's box times the box's shares of its pixels and the voxel's
// amplitude, in registers.
% if shared:
// Where SHARED, a column's box along the image's columns is each of its voxels', and
// its voxels' boxes along the rows follow one another: the work-item sums the image
// under the box along each row its COLUMN voxels cover, once (into its own places of
// local memory, AT_ROWS + 1 of them: no barrier) as running totals, and a voxel's sum
// is their integral between its box's edges, each edge found once for its two voxels
// (cone_integral: two reads and a few flops a voxel, whatever its rows, where each row's
// share took its own 64-bit arithmetic and read: A^T 0.528 -> 0.437 s on the H100,
// docs/benchmarks.md). Each row's sum is independent of the others', so their reads
// overlap (one row at a time, each voxel's own, made A^T 12x the
// bilinear pair's time on the H200): the rows go AT_BATCH at a time, each batch's reads
// issued together, a batch past the last row reading that row again (its sums beyond
// the voxels' rows are never read), so that no read waits on the test of its row. (One
// at a time, a CPU's, the loop is the one before, with no clamp: PoCL ran it no slower.)
#define AT_ROWS ${at_rows}  /* the most rows a work-item's voxels cover */
#define AT_BATCH ${at_batch}  /* rows whose sums a work-item makes at once */
#define AT_COLS ${at_cols}  /* the most image columns a box covers */
#define AT_ITEMS ${backward_items}  /* work-items a group */

// The integral of a column's rows' sums from row r0's edge (`top`) to row position v
// (fixed point, within top ... bottom: beyond, the rows are outside the image or the
// column), from their running totals, `totals`' places 0 ... last, each a float and
// its rounding error (so that the difference of two is good to float's rounding of
// itself, not of the totals: a faint voxel under bright rows of its column keeps its
// own accuracy): as the same pair, the total at the nearer of its row's edges and the
// fraction of its row's sum from there (the fraction from the nearer edge, so that its
// float is good to its own rounding: an edge a hair above a bright row's end takes a
// hair of it, not float's 2^-25 of it).
inline float2 cone_integral(__local const float2 (*totals)[AT_ITEMS], const int item,
                            const long v, const long top, const long bottom, const int last)
{
    const long at = clamp(v, top, bottom) - top;
    const int d = (int)(at >> 32);
    const uint part = (uint)at;  // the place in row d, in 2^-32
    const bool lower = part > 0x80000000u;  // nearer its row's far edge (d < last)
    const float fraction = convert_float(lower ? 0u - part : part) * 0x1p-32f;
    const float2 low = totals[d][item], high = totals[min(d + 1, last)][item];
    const float row = (high.s0 - low.s0) + (high.s1 - low.s1);
    return lower ? (float2)(high.s0, fma(-fraction, row, high.s1))
                 : (float2)(low.s0, fma(fraction, row, low.s1));
}
% endif
__kernel void cone_backward(
${args['cone_backward']}
{
    const int i = get_global_id(0), j = get_global_id(1);
    const int k0 = first_plane + get_global_id(2) * COLUMN;
% if shared:
    __local float2 totals[AT_ROWS + 1][AT_ITEMS];
    const int item = get_local_id(1) * get_local_size(0) + get_local_id(0);
% endif
    if (i >= nx || j >= ny || k0 >= nz)
        return;
    float sums[COLUMN];
    #pragma unroll
    for (int n = 0; n < COLUMN; n++)
        sums[n] = 0.0f;
    for (int q = 0; q < n_angles; q++) {
        __global const real *m = matrices + 12 * q, *s = sources + SOURCE * q;
        __global const float *image = projections + (size_t)q * n_rows * n_cols;
        real di, dj;
        float horizontal, scale;
        cone_across(s, i, j, &di, &dj, &horizontal, &scale);
% if shared:
        real cc, rc, wc;
        cone_column(m, i, j, &cc, &rc, &wc);
        int c0;
        float low, high;
        if (!(wc > 0) || !cone_box_u(cone_at(m, 0, i - di, j - dj, 0),
                                     cone_at(m, 0, i + di, j + dj, 0), n_cols, &c0, &low, &high))
            continue;
        const int widths = min((int)ceil(high), n_cols - c0);
        const long2 edge = cone_edges(cone_rows(rc, m[6], 1 / wc));
        // the rows of the voxels k0 ... k_end - 1
        long lo, hi;
        int r0, r1;
        const int k_end = min(k0 + COLUMN, nz);
        {
            const long a = edge.s0 + k0 * edge.s1, b = edge.s0 + k_end * edge.s1;
            lo = min(a, b);
            hi = max(a, b);
            r0 = max((int)(lo >> 32), 0);
            r1 = min((int)((hi - 1) >> 32), n_rows - 1);
        }
        if (r0 > r1)  // (the voxels' boxes all above or below the image)
            continue;
        float shares[AT_COLS];  // the box's share of each of its image columns, once
        #pragma unroll
        for (int c = 0; c < AT_COLS; c++)
            shares[c] = c < widths ? cone_share(low, high, c) : 0.0f;
        float2 running = (float2)(0.0f);  // the rows' sums so far, and its rounding error
        totals[0][item] = running;
        for (int d0 = 0; d0 < AT_ROWS; d0 += AT_BATCH) {
            if (r0 + d0 > r1)
                break;
            float under[AT_BATCH];
            #pragma unroll
            for (int d = 0; d < AT_BATCH; d++) {
                const int r = AT_BATCH > 1 ? min(r0 + d0 + d, r1) : r0 + d0 + d;
                __global const float *row = image + r * n_cols + c0;
                under[d] = 0.0f;
                #pragma unroll
                for (int c = 0; c < AT_COLS; c++)
                    if (c < widths)
                        under[d] = fma(shares[c], row[c], under[d]);
            }
            #pragma unroll
            for (int d = 0; d < AT_BATCH; d++)
                if (d0 + d < AT_ROWS) {
                    // (Knuth's two-sum: the addition's rounding error, exactly)
                    const float total = running.s0 + under[d], part = total - running.s0;
                    running = (float2)(total, running.s1 + ((running.s0 - (total - part))
                                                            + (under[d] - part)));
                    totals[d0 + d + 1][item] = running;
                }
        }
        // The column's image at row position v, the integral of the rows' sums from row
        // r0's edge to v, is totals interpolated at v (linear within a row); a voxel's
        // sum is the difference of it at its box's edges, and each edge is its two
        // voxels', found once.
        const long top = (long)r0 << 32, bottom = (long)(r1 + 1) << 32;
        const int last = r1 - r0 + 1;
        float2 before = cone_integral(totals, item, edge.s0 + k0 * edge.s1, top, bottom,
                                      last);
        #pragma unroll
        for (int n = 0; n < COLUMN; n++) {
            const float2 after = cone_integral(totals, item,
                                               edge.s0 + (k0 + n + 1) * edge.s1, top, bottom,
                                               last);
            const float sum = (after.s0 - before.s0) + (after.s1 - before.s1);
            if (k0 + n < nz)
                sums[n] = fma(cone_amplitude(s, horizontal, scale, k0 + n),
                              edge.s1 > 0 ? sum : -sum, sums[n]);
            before = after;
        }
% else:
        #pragma unroll
        for (int n = 0; n < COLUMN; n++) {
            const int k = k0 + n;
            int c0, r_first, r_last;
            float low, high;
            if (k >= nz || !(fma(m[10], (real)k, fma(m[9], (real)j, fma(m[8], (real)i, m[11]))) > 0))
                continue;
            real ua, ub, va, vb;
            cone_box(m, i, j, k, di, dj, &ua, &ub, &va, &vb);
            va += (real)0.5;
            vb += (real)0.5;
            if (!cone_box_u(ua, ub, n_cols, &c0, &low, &high)
                    || !cone_span(va, vb, n_rows, &r_first, &r_last))
                continue;
            const int widths = min((int)ceil(high), n_cols - c0);
            const real lo = fmin(va, vb), hi = fmax(va, vb);
            float sum = 0.0f;
            for (int r = r_first; r <= r_last; r++) {
                __global const float *row = image + r * n_cols + c0;
                float under = 0.0f;
                for (int c = 0; c < widths; c++)
                    under = fma(cone_share(low, high, c), row[c], under);
                sum = fma(cone_row_share(lo, hi, r), under, sum);
            }
            sums[n] = fma(cone_amplitude(s, horizontal, scale, k), sum, sums[n]);
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

// A where SHARED: a gather, each pixel the sum of the voxels whose box covers it, with
// the weights A^T gives them, added in one fixed order (no atomics; the same bits
// whatever the work-group's shape). Work-group (columns, rows, image) takes a band of
// BAND image rows from r0 on GATHER_COLS image columns; each work-item owns SLOTS rows
// of it (ROW: ROWS neighbours at a time) and their sums.
//
// A voxel column's box along the image's columns is its voxels' (SHARED). The group
// lists the voxel columns whose box covers some of its image columns (their centres
// within u_reach of them: the strip between two lines; then each judged by its box,
// `cone_box_u`) in local memory (along the axis a the strip runs along, then b), and
// takes them CHUNK at a time in two steps (a column's profile made once for all the
// image columns its box covers in the group: each image column apart made 2.7x the
// profiles on the standard case):
// - the columns' profiles: the group's work-items take each column's voxels in the
//   band's reach (neighbouring work-items neighbouring k, UNROLL each), each finding its
//   box's rows (`cone_edges`, as A^T) and adding its value times its amplitude times
//   the box's share of each row to the column's profile there. Voxels k of one phase
//   (k % PHASES) lie PHASES apart, far enough that their boxes share no row
//   (pybp/cone/project.py's gather_phases): no two work-items write one place in a
//   phase, and the phases follow one another, each place's terms in phase order.
// - each work-item adds, for each of its rows, each column's profile there times the
//   box's share of each image column, in the list's order, and clears it.
//
// `columns` is the volume transposed (ny nx, nz): a voxel column's planes consecutive,
// so that neighbouring work-items read neighbouring floats.
#define BAND (SLOTS * GATHER_ITEMS)
// a column's voxels k of phase k % PHASES, from k0 on: the phase is k's alone, so that
// a place's terms come in one order whatever the band's rows
#define FIRST_OF_PHASE(k0, phase) ((k0) + ((phase) - (k0) % PHASES + PHASES) % PHASES)
<% rows = gather[6] %>\
#define ROWS ${rows}  /* neighbouring rows a work-item reads at once (ROW) */
// a profile's places: the band's rows, and a margin of ROWS places on either side (so
// that the places of a reader's rows are aligned)
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
    __local int listed[ENTRIES];  // a voxel column j nx + i, or -1: its box misses c
    __local long2 listed_edges[ENTRIES];  // its cone_edges
    __local int2 listed_k[ENTRIES];  // the k whose boxes may reach the band: first, last
    __local float2 listed_box[ENTRIES];  // its box's ends from its first image column
    __local int listed_first[ENTRIES];  // that column
    __local float2 listed_ray[ENTRIES];  // cone_amplitude's horizontal and scale
    __local int scan[GATHER_ITEMS];
    // a column's profile: at row r, the sum of its voxels' values times their
    // amplitudes times their boxes' shares of row r. Declared as ROWS rows a ${vector},
    // so that a reader's rows are one aligned access; the writers see them as floats.
    __local ${vector} profile_rows[CHUNK][BAND / ROWS + 2];
    __local float (*const profile)[PLACES] = (__local float (*)[PLACES])profile_rows;
    const int item = get_local_id(0);
    const int c0 = get_group_id(0) * GATHER_COLS, c_end = min(c0 + GATHER_COLS, n_cols);
    const int r0 = get_group_id(1) * BAND;
    const int q = first_angle + get_group_id(2);
    __global const real *m = matrices + 12 * q, *s = sources + SOURCE * q;
    const real m6 = m[6];
    for (int n = item; n < CHUNK * PLACES; n += GATHER_ITEMS)
        profile[n / PLACES][n % PLACES] = 0.0f;
    {
        float here[GATHER_COLS][SLOTS];  // toward image columns c0, c0 + 1, ...
        #pragma unroll
        for (int cc = 0; cc < GATHER_COLS; cc++)
            #pragma unroll
            for (int n = 0; n < SLOTS; n++)
                here[cc][n] = 0.0f;
        // The lines u = t are (m0 - t m8) i + (m1 - t m9) j + m3 - t m11 = 0. The strip
        // between t0 and t1 runs along a = i where the normal of the detector's middle
        // line is nearer the j axis (each i then meets a line at one j = b), else along
        // a = j: a choice of the image's alone, so that a pixel's voxel columns come in
        // one order in every group whatever its columns.
        const real t_mid = (n_cols - 1) * (real)0.5;
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
            const real t0 = c0 - (real)0.5 - u_reach - U_MARGIN;
            const real t1 = c_end - (real)0.5 + u_reach + U_MARGIN;
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
                    real cc, rc, wc, di, dj;
                    float horizontal, scale, low = 0.0f, high = 0.0f;
                    cone_column(m, i, j, &cc, &rc, &wc);
                    cone_across(s, i, j, &di, &dj, &horizontal, &scale);
                    int first_col = 0;
                    const bool hits = wc > 0
                        && cone_box_u(cone_at(m, 0, i - di, j - dj, 0),
                                      cone_at(m, 0, i + di, j + dj, 0), n_cols, &first_col,
                                      &low, &high);
                    // (the box covers some of the group's columns)
                    const bool covers = hits && first_col < c_end
                        && first_col + (int)ceil(high) > c0;
                    listed[at] = covers ? j * nx + i : -1;
                    listed_edges[at] = cone_edges(cone_rows(rc, m6, 1 / wc));
                    listed_box[at] = (float2)(low, high);
                    listed_first[at] = first_col;
                    listed_ray[at] = (float2)(horizontal, scale);
                    // k at row position v is v slope + intercept, slope = w / m6 and
                    // intercept = -rc / m6: an estimate, in float, widened by its
                    // rounding (rows from -1 to n_rows) and by a voxel (its box's half
                    // height), of the k whose boxes reach the band (r0 <= r < r0 +
                    // BAND); every k where it overflows
                    const float slope = wc / m6, intercept = -rc / m6;
                    const float slack =
                        1.01f + 1e-5f * (fabs(slope) * (n_rows + 1) + fabs(intercept));
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
                                const long2 edge = listed_edges[e0 + e];
                                const float2 ray = listed_ray[e0 + e];
                                const int2 ks = listed_k[e0 + e];
                                const int k0 = FIRST_OF_PHASE(ks.s0, phase)
                                    + PHASES * (item + GATHER_ITEMS * round * UNROLL);
                                #pragma unroll
                                for (int u = 0; u < UNROLL; u++) {
                                    // k grows with u: past the column's last voxel, the
                                    // rest are too (a warp all past skips the work)
                                    const int k = k0 + PHASES * GATHER_ITEMS * u;
                                    if (k > ks.s1)
                                        break;
                                    long lo, hi;
                                    int r_first, r_last;
                                    if (!cone_fixed_span(edge, k, n_rows, &lo, &hi, &r_first,
                                                         &r_last))
                                        continue;
                                    const float x = values[e][u]
                                        * cone_amplitude(s, ray.s0, ray.s1, k);
                                    // the band's rows of the box (the places after the
                                    // margin). (A loop of at most BOX_ROWS: with its
                                    // bound min(r_last, ...) instead, NVIDIA's compiler
                                    // (CUDA 13.0) wrote rows past the box where CHUNK > 1
                                    // and a group has more than one work-item.)
                                    const int r_low = max(r_first, r0);
                                    const int r_high = min(r_last, r0 + BAND - 1);
                                    for (int d = 0; d < BOX_ROWS; d++) {
                                        const int r = r_low + d;
                                        if (r > r_high)
                                            break;
                                        profile[e][r - r0 + ROWS] += cone_fixed_share(lo, hi, r) * x;
                                    }
                                }
                            }
                        }
                        barrier(CLK_LOCAL_MEM_FENCE);  // a phase's places written
                    }
                    for (int e = e0; e < min(e0 + CHUNK, entries); e++) {
                        if (listed[e] < 0)
                            continue;
                        // the box's share of each of the group's columns (only where it
                        // covers one: a non-finite profile stays out of the others)
                        const float2 box = listed_box[e];
                        float shares[GATHER_COLS];
                        #pragma unroll
                        for (int cc = 0; cc < GATHER_COLS; cc++)
                            shares[cc] = c0 + cc < c_end
                                ? cone_share(box.s0, box.s1, c0 + cc - listed_first[e]) : 0.0f;
                        // ROWS neighbouring rows at a time: one read and one write
                        #pragma unroll
                        for (int n = 0; n < SLOTS; n += ROWS) {
                            const int at = 1 + ROW(n) / ROWS;  // (after the margin)
                            const ${vector} p = profile_rows[e - e0][at];
                            profile_rows[e - e0][at] = 0.0f;
                            #pragma unroll
                            for (int cc = 0; cc < GATHER_COLS; cc++) {
                                if (!(shares[cc] > 0))
                                    continue;
% for t in range(rows):
<% part = "p.s%d" % t if rows > 1 else "p" %>\
                                here[cc][n + ${t}] = fma(shares[cc], ${part}, here[cc][n + ${t}]);
% endfor
                            }
                        }
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);  // the profiles read and cleared
                }
            }
        }
        #pragma unroll
        for (int cc = 0; cc < GATHER_COLS; cc++)
            #pragma unroll
            for (int n = 0; n < SLOTS; n++) {
                const int r = r0 + ROW(n);
                if (r < n_rows && c0 + cc < c_end)
                    projections[((size_t)q * n_rows + r) * n_cols + c0 + cc] = here[cc][n];
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
// pixel's terms add to more than the volume's L1 norm times the largest amplitude (a
// voxel reaches a pixel once, with a weight of at most its amplitude, below
// 2^amplitude_bits), so with L1 < 2^e and shift = 60 - e - amplitude_bits no sum
// overflows, and each term is good to 2^-60 of that bound (float32's own rounding is
// 2^-24 of the term). The norm is summed in a fixed order: MAGNITUDE_GROUPS partial
// sums, then one group's tree.
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
        shift[0] = isfinite(total) ? clamp(60 - exponent - amplitude_bits, -100, 100) : -100;
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

// A voxel's terms into the pixels of one row of its box that are in the tile: row r,
// the box's columns from c0 (low and high its ends from there, cone_box_u; both from
// the tile's first pixel), x its value times its amplitude times the box's share of the
// row; a non-finite voxel marks them instead.
inline void scatter_row(volatile __local uint *sums, __local uchar *nonfinite, const float x,
                        const int r, const int c0, const float low, const float high,
                        const float scale)
{
    const int c_end = min(c0 + (int)ceil(high), TILE_COLS);
    for (int c = max(c0, 0); c < c_end; c++) {
        if (!isfinite(x))
            nonfinite[r * TILE_COLS + c] = 1;
        else
            add_term(sums, r * TILE_COLS + c,
                     convert_long_rte(cone_share(low, high, c - c0) * x * scale));
    }
}

// A: work-group (tile column, tile row, image) adds, into its TILE_ROWS x TILE_COLS
// pixels, each voxel whose box covers them, with the weights A^T gives them: a
// voxel-driven scatter, so each voxel's box is found once per image (less the margins
// of the candidates below), not once per pixel and plane. The candidates are the voxels
// of the window's preimage, the window the tile's pixels widened by the reach of a
// box's ends from its centre (u_reach, v_reach): the rays through the window's corners
// (rays: voxel-index points x = w d - s, d = inverse(M) (c, r, 1), s = inverse(M) m4)
// meet each plane along the tile's central ray's steepest axis in a quadrilateral; the
// voxels of the boxes bounding those of PLANES planes at a time, widened by BOX_MARGIN
// for the rounding of the corners, are the candidates, and each is judged by its own
// box, so the rounding of a window never changes a weight.
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
    const float fixed_scale = ldexp(1.0f, shift[0]);
    __global const real *m = matrices + 12 * q, *s = sources + SOURCE * q;
    // the ray through pixel (c, r): the voxel-index points E (c, r, 1) + t D (c, r, 1)
    __global const real *t = inverses + INVERSE * q, *e = t + 9;
    const int size[3] = {nx, ny, nz};
    // The window: the centres of the boxes that may cover a pixel of the tile.
    // (within the image: a window far beyond it makes the corner rays diverge)
    const real left = c0 - (real)0.5 - u_reach;
    const real right = min(c0 + TILE_COLS, n_cols) - (real)0.5 + u_reach;
    const real top = r0 - (real)0.5 - v_reach;
    const real bottom = min(r0 + TILE_ROWS, n_rows) - (real)0.5 + v_reach;
    // The central ray's direction picks the axis.
    real d[3];
    for (int a = 0; a < 3; a++)
        d[a] = t[3 * a] * ((real)0.5 * (left + right)) + t[3 * a + 1] * ((real)0.5 * (top + bottom))
             + t[3 * a + 2];
    const int axis = fabs(d[0]) >= fabs(d[1]) && fabs(d[0]) >= fabs(d[2]) ? 0
                   : fabs(d[1]) >= fabs(d[2]) ? 1 : 2;
    const int a1 = axis == 0 ? 1 : 0, a2 = axis == 2 ? 1 : 2;
    // A corner ray E + t D meets plane p at t = (p - E_axis) / D_axis: its other two
    // indices are lines in p, x = p slope + offset, found once here (in local memory,
    // not in registers held through the loops below).
    __local real lines[4][4];  // per corner: slope1, offset1, slope2, offset2
    __local int meets[4];  // the sign of the corner ray along the axis
    if (item < 4) {
        const real cc = item & 1 ? right : left, rr = item & 2 ? bottom : top;
        const real along = t[3 * axis] * cc + t[3 * axis + 1] * rr + t[3 * axis + 2];
        const real k1 = (t[3 * a1] * cc + t[3 * a1 + 1] * rr + t[3 * a1 + 2]) / along;
        const real k2 = (t[3 * a2] * cc + t[3 * a2 + 1] * rr + t[3 * a2 + 2]) / along;
        const real e0 = e[3 * axis] * cc + e[3 * axis + 1] * rr + e[3 * axis + 2];
        meets[item] = along > 0 ? 1 : along < 0 ? -1 : 0;
        lines[item][0] = k1;
        lines[item][1] = (e[3 * a1] * cc + e[3 * a1 + 1] * rr + e[3 * a1 + 2]) - e0 * k1;
        lines[item][2] = k2;
        lines[item][3] = (e[3 * a2] * cc + e[3 * a2 + 1] * rr + e[3 * a2 + 2]) - e0 * k2;
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
            // its box along the columns and 1 / w once, then its voxels along z (a2)
            // whose centres lie within the window's rows (v is linear in k), each
            // judged by its own box.
            for (int plane = p + item / LANES; plane < p + planes;
                    plane += FORWARD_GROUP / LANES)
                for (int v1 = (int)first1 + item % LANES; v1 <= (int)last1; v1 += LANES) {
                    const int i = axis == 0 ? plane : v1, j = axis == 0 ? v1 : plane;
                    real cc, rc, wc, di, dj;
                    float horizontal, scale, low, high;
                    cone_column(m, i, j, &cc, &rc, &wc);
                    cone_across(s, i, j, &di, &dj, &horizontal, &scale);
                    int first_col;
                    if (!(wc > 0)
                            || !cone_box_u(cone_at(m, 0, i - di, j - dj, 0),
                                           cone_at(m, 0, i + di, j + dj, 0), n_cols,
                                           &first_col, &low, &high)
                            || first_col >= c0 + TILE_COLS || first_col + ceil(high) <= c0)
                        continue;
                    const long2 edge = cone_edges(cone_rows(rc, m[6], 1 / wc));
                    int k_first = (int)first2, k_last = (int)last2;
                    if (m[6] != 0) {
                        const real k_top = (top * wc - rc) * per_row;
                        const real k_bottom = (bottom * wc - rc) * per_row;
                        const real low_k = floor(fmin(k_top, k_bottom)) - 1;
                        const real high_k = ceil(fmax(k_top, k_bottom)) + 1;
                        k_first = max(k_first, (int)fmax(low_k, (real)-1));
                        k_last = min(k_last, (int)fmin(high_k, (real)nz));
                    }
                    for (int k = max(k_first, 0); k <= min(k_last, nz - 1); k++) {
                        long lo, hi;
                        int r_first, r_last;
                        if (!cone_fixed_span(edge, k, n_rows, &lo, &hi, &r_first, &r_last)
                                || r_last < r0 || r_first >= r0 + TILE_ROWS)
                            continue;
                        const float x = volume[((size_t)k * ny + j) * nx + i]
                            * cone_amplitude(s, horizontal, scale, k);
                        for (int r = max(r_first, r0); r <= min(r_last, r0 + TILE_ROWS - 1); r++)
                            scatter_row(sums, nonfinite, cone_fixed_share(lo, hi, r) * x,
                                        r - r0, first_col - c0, low, high, fixed_scale);
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
                if (!(fw > 0) || uc < left - slack || uc > right + slack
                        || ur < top - slack || ur > bottom + slack)
                    continue;
                real di, dj;
                float horizontal, scale, low, high;
                cone_across(s, i, j, &di, &dj, &horizontal, &scale);
                int first_col, r_first, r_last;
                real ua, ub, va, vb;
                cone_box(m, i, j, k, di, dj, &ua, &ub, &va, &vb);
                va += (real)0.5;
                vb += (real)0.5;
                if (!cone_box_u(ua, ub, n_cols, &first_col, &low, &high)
                        || first_col >= c0 + TILE_COLS || first_col + ceil(high) <= c0)
                    continue;
                if (!cone_span(va, vb, n_rows, &r_first, &r_last) || r_last < r0
                        || r_first >= r0 + TILE_ROWS)
                    continue;
                const real lo = fmin(va, vb), hi = fmax(va, vb);
                const float x = volume[((size_t)k * ny + j) * nx + i]
                    * cone_amplitude(s, horizontal, scale, k);
                for (int r = max(r_first, r0); r <= min(r_last, r0 + TILE_ROWS - 1); r++)
                    scatter_row(sums, nonfinite, cone_row_share(lo, hi, r) * x, r - r0,
                                first_col - c0, low, high, fixed_scale);
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
