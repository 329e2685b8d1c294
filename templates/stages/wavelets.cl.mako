## Münch et al.'s Fourier-wavelet ring removal (pybp/stages/wavelets.py) on a block of
## sinograms, each a plane of its own in every buffer (work-item z: the sinogram):
## `place` pads the sinograms along the angles with zeros; `dwt` and `idwt` are one
## level of PyWavelets' symmetric-mode transforms along rows or columns of any strided
## plane; `damp_sums` and `damp_apply` take its Gaussian low-pass along the angles out of a level's vertical
## details; `crop` writes the result back into the sinograms.
## Products are summed as `x * y + z`, which compilers contract to one FMA where the
## hardware has it: PoCL made each mad() a call of its own, and the stage took 2.4x
## as long on a CPU (fw_speed.py@82c47bc --kernels).
${"/* pybp Fourier-wavelet ring removal: %d taps, at most %d frequencies */" % (len(dec_lo), freqs)}
#define TAPS ${len(dec_lo)}
#define FREQS ${freqs}
<%def name="table(name, values)">__constant float ${name}[TAPS] = {${", ".join("%.17gf" % v for v in values)}};</%def>
${table("dec_lo", dec_lo)}
${table("dec_hi", dec_hi)}
${table("rec_lo", rec_lo)}
${table("rec_hi", rec_hi)}

// Index i mirrored into [0, n) as d c b a | a b c d, as often as needed.
inline int mirror(int i, const int n)
{
    while (i < 0 || i >= n)
        i = i < 0 ? -i - 1 : 2 * n - i - 1;
    return i;
}

__kernel void place(
${args['place']}
{
    const int bin = get_global_id(0), row = get_global_id(1);
    if (bin >= n_bins || row >= rows)
        return;
    const int angle = row - first_row;
    out[get_global_id(2) * out_plane + (size_t)row * n_bins + bin] = angle >= 0 && angle < n_angles
        ? sinograms[(first + get_global_id(2)) * (size_t)n_angles * n_bins + (size_t)angle * n_bins + bin]
        : 0.0f;
}

// One level along the rows or the columns of an in_rows x in_cols plane: the
// approximation into `lo`, the detail into `hi` (out_rows x out_cols). A kernel for
// each direction, and the coefficients whose taps all lie inside the signal summed
// without mirroring: a runtime axis and the mirror's loop in every tap kept CPU
// runtimes from vectorising the work-items (the same sums, in the same order).
% for name, along in (("rows", True), ("columns", False)):
<% at = "line[%s]" if along else "line[(size_t)(%s) * in_stride]" %>
__kernel __attribute__((reqd_work_group_size(${group[0]}, ${group[1]}, 1)))
void dwt_${name}(
${args['dwt_' + name]}
{
    const int x = get_global_id(0), y = get_global_id(1);
    if (x >= out_cols || y >= out_rows)
        return;
    __global const float *plane = in + get_global_id(2) * in_plane;
%   if along:
    const int n = in_cols, o = x;
    __global const float *line = plane + (size_t)y * in_stride;
%   else:
    const int n = in_rows, o = y;
    __global const float *line = plane + x;
%   endif
    float low = 0.0f, high = 0.0f;
    if (2 * o + 2 - TAPS >= 0 && 2 * o + 1 < n) {
        for (int j = 0; j < TAPS; j++) {
            const float v = ${at % "2 * o + 1 - j"};
            low += dec_lo[j] * v;
            high += dec_hi[j] * v;
        }
    } else {
        for (int j = 0; j < TAPS; j++) {
            const float v = ${at % "mirror(2 * o + 1 - j, n)"};
            low += dec_lo[j] * v;
            high += dec_hi[j] * v;
        }
    }
    const size_t out = get_global_id(2) * out_plane + (size_t)y * out_stride + x;
    lo[out] = low;
    hi[out] = high;
}

// The inverse of dwt_${name}: `m` coefficients of `lo` and `hi` (the first m of each
// line: an approximation may hold one more) give out_rows x out_cols values.
__kernel __attribute__((reqd_work_group_size(${group[0]}, ${group[1]}, 1)))
void idwt_${name}(
${args['idwt_' + name]}
{
    const int x = get_global_id(0), y = get_global_id(1);
    if (x >= out_cols || y >= out_rows)
        return;
    const size_t base = get_global_id(2) * in_plane;
%   if along:
    const int n = x;
    const size_t line = base + (size_t)y * in_stride;
%   else:
    const int n = y;
    const size_t line = base + x;
%   endif
    const int parity = (n + TAPS) & 1;  // the taps j with n + TAPS - 2 - j even
    float sum = 0.0f;
    if ((n + TAPS - 2 - parity) / 2 < m) {  // every coefficient it takes exists
        for (int j = parity; j < TAPS; j += 2) {
            const size_t at = line + ${"" if along else "(size_t)"}((n + TAPS - 2 - j) / 2)${"" if along else " * in_stride"};
            sum = lo[at] * rec_lo[j] + (hi[at] * rec_hi[j] + sum);
        }
    } else {
        for (int j = parity; j < TAPS; j += 2) {
            const int k = (n + TAPS - 2 - j) / 2;
            if (k < m) {
                const size_t at = line + ${"" if along else "(size_t)"}k${"" if along else " * in_stride"};
                sum = lo[at] * rec_lo[j] + (hi[at] * rec_hi[j] + sum);
            }
        }
    }
    out[get_global_id(2) * out_plane + (size_t)y * out_stride + x] = sum;
}
% endfor

// Column x of a level's vertical details (rows x cols) less its low-pass along the
// angles: sum over k < n_freqs of gain[k] (A_k cos + B_k sin) with A_k, B_k its
// cosine and sine sums at frequency k (tables n_freqs x rows). Each column's rows are
// cut into `parts` (work-items of their own: a level has a few hundred columns, too
// few to fill a GPU alone): damp_sums writes each part's sums, damp_apply adds them
// up and takes the low-pass out of its part's rows.
inline int part_rows(const int rows, const int parts)
{
    return (rows + parts - 1) / parts;
}

__kernel void damp_sums(
${args['damp_sums']}
{
    const int x = get_global_id(0), part = get_global_id(1);
    if (x >= cols)
        return;
    __global const float *column = details + get_global_id(2) * plane + x;
    const int length = part_rows(rows, parts);
    const int first = part * length, stop = min(rows, first + length);
    float a[FREQS], b[FREQS];
    for (int k = 0; k < FREQS; k++)
        a[k] = b[k] = 0.0f;
    for (int i = first; i < stop; i++) {
        const float v = column[(size_t)i * stride];
        for (int k = 0; k < n_freqs; k++) {
            a[k] += v * cosines[k * rows + i];
            b[k] += v * sines[k * rows + i];
        }
    }
    __global float *out = sums + ((get_global_id(2) * parts + part) * 2 * FREQS) * (size_t)cols + x;
    for (int k = 0; k < n_freqs; k++) {
        out[(size_t)k * cols] = a[k];
        out[(size_t)(FREQS + k) * cols] = b[k];
    }
}

__kernel void damp_apply(
${args['damp_apply']}
{
    const int x = get_global_id(0), part = get_global_id(1);
    if (x >= cols)
        return;
    __global float *column = details + get_global_id(2) * plane + x;
    __global const float *partial = sums + get_global_id(2) * parts * 2 * FREQS * (size_t)cols + x;
    float a[FREQS], b[FREQS];
    for (int k = 0; k < n_freqs; k++) {
        a[k] = b[k] = 0.0f;
        for (int p = 0; p < parts; p++) {  // in the order of one column's sums
            a[k] += partial[(size_t)(p * 2 * FREQS + k) * cols];
            b[k] += partial[(size_t)(p * 2 * FREQS + FREQS + k) * cols];
        }
        a[k] *= gain[k];
        b[k] *= gain[k];
    }
    const int length = part_rows(rows, parts);
    const int first = part * length, stop = min(rows, first + length);
    for (int i = first; i < stop; i++) {
        float low = 0.0f;
        for (int k = 0; k < n_freqs; k++)
            low = a[k] * cosines[k * rows + i] + (b[k] * sines[k * rows + i] + low);
        column[(size_t)i * stride] -= low;
    }
}

__kernel void crop(
${args['crop']}
{
    const int bin = get_global_id(0), angle = get_global_id(1);
    if (bin >= n_bins || angle >= n_angles)
        return;
    sinograms[(first + get_global_id(2)) * (size_t)n_angles * n_bins + (size_t)angle * n_bins + bin] =
        result[get_global_id(2) * plane + (size_t)(angle + first_row) * stride + bin];
}
