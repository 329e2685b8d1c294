## ALU back-projection (paper Sect. 6): a work-group caches, for `cached_projections`
## projections at a time, the 1.5 n_s bins its n_s x n_s square needs in local memory,
## then interpolates from the cache with arithmetic instead of the texture engine.
<%namespace name="common" file="/common.cl.mako"/>\
${common.header(p, "ALU back-projection (local-memory cache)")}
<%
    n_v = p.slices_per_pass
    vt = common.attr.vector_type(n_v)
    linear = p.interpolation == "linear"
    half_cache = p.cache_storage == "half"
    # Value and difference: as halves side by side, or floats (one float2 for one slice,
    # two arrays for more).
    half_pair = half_cache and p.cache == "pair"
    pair = p.cache == "pair" and not half_pair
    packed_pair = pair and n_v == 1
    oversample = p.cache == "oversample"
    samples = p.samples_per_bin
    float_rounding = p.rounding == "float"
    fixed = p.rounding == "fixed"
    column_offsets = p.offset_cache == "hx"
    hybrid = p.texture_groups > 0
    row_step = p.row_step
    # Half caching: each cached row is a flat array of halves, read with vload_half.
    vload = "vload_half" if n_v == 1 else "vload_half%d" % n_v
    vstore = "vstore_half" if n_v == 1 else "vstore_half%d" % n_v
    pair_type = common.attr.vector_type(2 * n_v)    # value(s) .lo, difference(s) .hi
%>
// The error-free sums below need a*b+c left as written, not contracted to fma.
#pragma OPENCL FP_CONTRACT OFF

## Caching reads whole bins (the same fetch, without interpolation), or linearly
## interpolated quarter-bin samples when oversampling.
${common.fetch_function(p, interpolation="linear" if oversample else "nearest")}

% if hybrid:
## Hybrid mode: the texture engine interpolates for some work-groups (Sect. 7.1).
${common.fetch_function(p, name="filtered")}
% endif
#define SQUARE ${p.square}          /* n_s: pixels per side of a work-group's square */
#define CACHE_WIDTH ${p.cache_width * samples}      /* ${samples} sample(s) cached per bin, 1.5 n_s bins */
#define CACHED ${p.cached_projections}          /* s_d: projections cached per round */
#define ROW_ITEMS ${p.items_per_row}    /* s_t: work-items caching one projection row */
#define PIXELS ${p.pixels_per_item}          /* n_q: pixels per work-item, ${row_step} rows apart */
% if float_rounding:
// Sect. 6.6: adding 2^23 rounds a small positive float to an integer in the mantissa,
// read back with a bit cast instead of a conversion instruction.
#define MAGIC 0x1.0p23f
% elif fixed:
// Positions in the cache as unsigned 9.23 fixed-point numbers: a pixel's position is an
// integer step from its neighbour's, the bin is a shift and, for linear interpolation,
// the fraction's 23 bits OR-ed under the exponent of 1.0f are the float 1 + w, so no
// conversion instruction runs per update (Sect. 6.6 taken one step further).
#define FRACTION 0x1.0p23f
#define FRACTION_BITS 23
% endif

// Position x0 cos - y0 sin + base of a square's first pixel as a float plus the error
// of rounding it (docs/design.md, section 6). Positions reach thousands of bins, where one float32 is
// only good to about 1e-4 bin, and so is a float32 cos times thousands of pixels: cos,
// sin and base come as double-floats (hi + lo), products' errors exactly from fma,
// sums' from two-sum. Once per cached projection, so the cost does not show.
inline float two_sum(const float a, const float b, float *error)
{
    const float s = a + b;
    const float bb = s - a;
    *error += (a - (s - bb)) + (b - bb);
    return s;
}

// a - b and its rounding error, added to *error: two_sum(a, -b) spelled without
// negating b (see common.cl.mako on negation in kernels with barriers).
inline float two_diff(const float a, const float b, float *error)
{
    const float s = a - b;
    const float bb = s - a;
    *error += (a - (s - bb)) - (b + bb);
    return s;
}

inline float square_origin(const int x0, const int y0, const float8 c, float *error)
{
    const float x = (float)x0, y = (float)y0;
    const float px = x * c.s0;
    const float py = y * c.s1;
    // fma(-x, c, p) is exactly -(x c - p), the product's rounding error negated.
    *error = (fma(-y, c.s1, py) - fma(-x, c.s0, px)) + ((x * c.s4 - y * c.s5) + c.s3);
    return two_sum(two_diff(px, py, error), c.s2, error);
}

__kernel __attribute__((reqd_work_group_size(${p.items}, 1, 1)))
void backproject(
${args['backproject']}
{
    const int item = get_local_id(0);
    const int x0 = first_column + get_group_id(0) * SQUARE;
    const int y0 = first_row + get_group_id(1) * SQUARE;
    // Accumulation: 16 work-items walk a 4x4 square in Z-order, squares lie along x and
    // ${p.square_rows_in_flight} row(s) of them are covered at once (Sect. 6.3, Fig. 13).
    const int lx = ((item >> 4) % ${p.squares_per_row}) * 4 + ((item & 1) | ((item >> 1) & 2));
    const int ly = ((item >> 4) / ${p.squares_per_row}) * 4 + (((item >> 1) & 1) | ((item >> 2) & 2));
% if hybrid:
    // Hybrid (Sect. 7.1): ${p.texture_groups} of every ${p.hybrid_period} work-groups, by linear index, take the
    // texture path over the same pixels; the branch is uniform per work-group and this
    // path has no barrier. The index is the square's in the whole slice, so a launch
    // over a tile of it splits the work as one launch over the slice does.
    if (((y0 / SQUARE) * ((nx + SQUARE - 1) / SQUARE) + x0 / SQUARE) % ${p.hybrid_period} < ${p.texture_groups}) {
        ${vt} total[PIXELS];
        for (int k = 0; k < PIXELS; k++)
            total[k] = (${vt})(0.0f);
        const float fx = (float)(x0 + lx);
        const float fy = (float)(y0 + ly);
% if p.unroll > 1:
        #pragma unroll ${p.unroll}
% endif
        for (int a = 0; a < n_angles; a++) {
            const float4 c = projection[a].s0123;
            const float h = mad(fx, c.x, mad(fy, -c.y, c.z));
            const float step = ${row_step}.0f * c.y;
            #pragma unroll
            for (int k = 0; k < PIXELS; k++)
                total[k] += filtered(sinogram, n_bins, mad(-(float)k, step, h), a);
        }
        const int x = x0 + lx;
        for (int k = 0; k < PIXELS; k++) {
            const int y = y0 + ly + k * ${row_step};
${common.store(p, "total[k]")}
        }
        return;
    }
% endif
    // Caching: ROW_ITEMS work-items fill one projection row.
    const int row_item = item % ROW_ITEMS;
    const int row_group = item / ROW_ITEMS;

    // Per cached projection: cos, sin, the position of the square's first pixel counted
    // from the first cached bin (small, so float32 keeps it exact, docs/design.md, section 6), and the
    // step between a work-item's pixels.
    __local float4 geometry[CACHED];
    __local float first_bins[CACHED];   /* h_m: the first cached bin, per projection */
% if column_offsets:
    __local float column_offset[CACHED][SQUARE];   /* h_x: x cos + the square's offset */
% endif
% if packed_pair:
    __local float2 cache[CACHED][CACHE_WIDTH];      /* value, next value - value */
% elif pair:
    __local ${vt} cache[CACHED][CACHE_WIDTH];       /* values */
    __local ${vt} slope[CACHED][CACHE_WIDTH];       /* next value - value */
% elif half_pair:
    // Per bin, ${n_v} value(s) then ${n_v} difference(s) to the next bin, as halves (stored as
    // ushort: declaring half arrays needs cl_khr_fp16, pointers do not): one
    // ${16 * n_v}-bit load per update (Sect. 6.7 with Sect. 6.4's pair).
    __local ushort cache[CACHED][CACHE_WIDTH * ${2 * n_v}];
% elif half_cache:
    // Halves stored as ushort: declaring half arrays needs cl_khr_fp16, pointers do not.
    __local ushort cache[CACHED][CACHE_WIDTH * ${n_v}];  /* read with ${vload} (Sect. 6.7) */
% else:
    __local ${vt} cache[CACHED][CACHE_WIDTH];
% endif

    ${vt} sum[PIXELS];
    for (int k = 0; k < PIXELS; k++)
        sum[k] = (${vt})(0.0f);

    for (int round = 0; round < n_angles; round += CACHED) {
        const int count = min(CACHED, n_angles - round);
        barrier(CLK_LOCAL_MEM_FENCE);
        // Each cached projection's geometry, by one work-item (CACHED <= 64 < items):
        // computed once rather than by every work-item caching its row.
        if (item < count) {
            const float8 c = projection[round + item];
            float error;
            const float first_pixel = square_origin(x0, y0, c, &error);
            // The lowest position any pixel of the square reaches, less one bin of
            // margin so that rounding never indexes below the cache (Sect. 6.1: c_m).
            const float lowest = (SQUARE - 1) * fmin(fmin(0.0f, c.x), fmin(0.0f - c.y, c.x - c.y));
            const float first_bin = floor(first_pixel + lowest) - 1.0f;
            // first_pixel - first_bin: exact once positions pass twice the cache width
            // (Sterbenz), else rounded at the result's own ulp; w: the step between a
            // work-item's pixels, ${row_step} rows apart${", fixed point" if fixed else ""}.
            const float4 g = ${samples}.0f * (float4)(c.x, c.y, (first_pixel - first_bin) + error, 0.0f);
% if fixed:
            geometry[item] = (float4)(g.xyz, as_float(convert_int_rte(${row_step}.0f * g.y * FRACTION)));
% else:
            geometry[item] = (float4)(g.xyz, ${row_step}.0f * g.y);
% endif
            first_bins[item] = first_bin;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = row_group; r < count; r += ${p.items // p.items_per_row}) {
            const float first_bin = first_bins[r];
% if column_offsets:
            // Sect. 6.8: each column's offset, so one FMA per projection finds a pixel.
            const float4 g = geometry[r];
            for (int x = row_item; x < SQUARE; x += ROW_ITEMS)
                column_offset[r][x] = mad((float)x, g.x, g.z);
% endif
            for (int b = row_item; b < CACHE_WIDTH; b += ROW_ITEMS) {
% if oversample:
                // Geometry is in 1/${samples} bins: sample b sits at bin b / ${samples}.
                const ${vt} value = fetch(sinogram, n_bins, first_bin + ${repr(1.0 / samples)}f * (float)b, round + r);
% else:
                const ${vt} value = fetch(sinogram, n_bins, first_bin + (float)b, round + r);
% endif
% if pair or half_pair:
                const ${vt} next = fetch(sinogram, n_bins, first_bin + (float)(b + 1), round + r);
% if fixed:
                // Interpolation computes (1 + w) d + (value - d), d = next - value.
                const ${vt} base = value - (next - value);
% else:
                const ${vt} base = value;
% endif
% if half_pair:
                vstore_half${2 * n_v}((${pair_type})(base, next - value), b, (__local half *)cache[r]);
% elif packed_pair:
                cache[r][b] = (float2)(base, next - value);
% else:
                cache[r][b] = base;
                slope[r][b] = next - value;
% endif
% elif half_cache:
                ${vstore}(value, b, (__local half *)cache[r]);
% else:
                cache[r][b] = value;
% endif
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
% if p.unroll > 1:
        #pragma unroll ${p.unroll}
% endif
        for (int r = 0; r < count; r++) {
            const float4 g = geometry[r];
% if column_offsets:
            const float t0 = mad((float)ly, -g.y, column_offset[r][lx]);
% else:
            const float t0 = mad((float)lx, g.x, mad((float)ly, -g.y, g.z));
% endif
% if fixed:
            // t0 >= 1, so t0 * 2^23 is a whole float: the conversion is exact.
            const uint t0_fixed = convert_uint(t0 * FRACTION)${"" if linear and not oversample else " + (1u << (FRACTION_BITS - 1))"};
            const uint step = as_uint(g.w);
% else:
            const float step = g.w;
% endif
            #pragma unroll
            for (int k = 0; k < PIXELS; k++) {
% if fixed:
                const uint t = t0_fixed - (uint)k * step;   /* position in the cache, fixed point */
% else:
                // Position in the cache; k = 0 spelled out, as mad(-0, step, t0) is kept.
                const float t = k ? mad(-(float)k, step, t0) : t0;
% endif
% if linear and not oversample:
% if fixed:
                const int i = t >> FRACTION_BITS;
                // Positions stay below 128 bins (bits 30 and 31 clear), so OR-ing in 1.0f's
                // bits sets the exponent whatever bins bits 23-29 hold: one instruction.
                const float w1 = as_float(t | 0x3f800000u);   /* 1 + w */
% elif float_rounding:
                const float whole = (t - 0.5f) + MAGIC;
                const int i = as_int(whole) - as_int(MAGIC);
                const float w = t - (whole - MAGIC);
% else:
                const int i = (int)t;                        /* t >= 1: truncation floors */
                const float w = t - (float)i;
% endif
% if half_pair:
                const ${pair_type} e = vload_half${2 * n_v}(i, (const __local half *)cache[r]);
                sum[k] += mad((${vt})(${"w1" if fixed else "w"}), e.hi, e.lo);
% elif packed_pair:
                const float2 e = cache[r][i];
                sum[k] += mad(${"w1" if fixed else "w"}, e.y, e.x);
% elif pair:
                sum[k] += mad((${vt})(${"w1" if fixed else "w"}), slope[r][i], cache[r][i]);
% elif half_cache:
                const __local half *row = (const __local half *)cache[r];
                const ${vt} a = ${vload}(i, row);
                sum[k] += mad((${vt})(${"w1 - 1.0f" if fixed else "w"}), ${vload}(i + 1, row) - a, a);
% else:
                const ${vt} a = cache[r][i];
                sum[k] += mad((${vt})(${"w1 - 1.0f" if fixed else "w"}), cache[r][i + 1] - a, a);
% endif
% else:
% if fixed:
                const int i = t >> FRACTION_BITS;            /* half a bin was added to t0 */
% elif float_rounding and not half_cache:
                // t + MAGIC's bits are MAGIC's plus the bin. In unsigned (wrapping)
                // arithmetic the compiler may distribute the scaling and fold MAGIC's bits
                // into the row's address: one shift-and-add per update is left.
                const uint offset = (as_uint(t + MAGIC) - as_uint(MAGIC)) * sizeof(${vt});
% elif float_rounding:
                const int i = as_int(t + MAGIC) - as_int(MAGIC);
% else:
                const int i = (int)(t + 0.5f);
% endif
% if float_rounding and not half_cache:
                sum[k] += *(const __local ${vt} *)((const __local char *)cache[r] + offset);
% elif half_cache:
                sum[k] += ${vload}(i, (const __local half *)cache[r]);
% else:
                sum[k] += cache[r][i];
% endif
% endif
            }
        }
    }

    const int x = x0 + lx;
    for (int k = 0; k < PIXELS; k++) {
        const int y = y0 + ly + k * ${row_step};
${common.store(p, "sum[k]")}
    }
}
