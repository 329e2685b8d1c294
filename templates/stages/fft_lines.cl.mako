## FFTs of short lines in local memory, the building block of the transforms that do
## not fit one work-group (the FBP filter's longest rows: fft_global.cl.mako; the
## 2-D transforms of phase retrieval: paganin.cl.mako). A longer transform is made of
## two passes of short ones through global memory (the "four-step" FFT): with
## N = N1 N2, n = n1 N2 + n2 and k = k1 + N1 k2,
##     X[k] = sum_n2 W_N2^(n2 k2) W_N^(n2 k1) sum_n1 W_N1^(n1 k1) x[n],  W_M = exp(-2 pi i / M):
## transforms of length N1 along columns, a twiddle, transforms of length N2 along rows.
## The result is left in that order (k1 major): a filter permutes its response to
## match, and the inverse walks the same steps back.
<%!
    import math

    def radices(length):
        """The radices of a local FFT's stages: 2s, then 3s, then 5s."""
        found, n = [], length
        for r in (2, 3, 5):
            while n % r == 0:
                found.append(r)
                n //= r
        if n != 1:
            raise ValueError(f"FFT of {length} points: only factors 2, 3 and 5")
        return found
%>

<%def name="complex_helpers()">
inline float2 cmul(const float2 a, const float2 b)
{
    return (float2)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// W_N^e = exp(-2 pi i e / N) for any e >= 0, from a table of the first N / 2.
inline float2 twiddle(__global const float2 *table, const int n, const long e)
{
    const int m = (int)(e % n);
    return m < n / 2 ? table[m] : -table[m - n / 2];
}
</%def>

## ${name}(x, y, table, sign): `lines` lines of `length` points held in local memory x
## (line-major), y as scratch; Stockham stages of radix 2 (a runtime loop, for powers of
## two) or of radices 2, 3 and 5 (unrolled, for lengths 2^a 3^b 5^c), natural order in
## and out, each work-item taking butterflies in turn. A stage of radix r after spans of
## L points: butterfly j (k = j mod L) takes x[j + t N/r] W_(rL)^(t k), t < r, and puts
## their r-point DFT at (j - k) r + k + s L, s < r. `table`: exp(-2 pi i m /
## table_length) for m < table_length / 2, table_length an even multiple of `length`.
## sign: the exponent's, -1 forward, +1 inverse (unscaled). The result lands in x after
## an even number of stages, else in y: result_buffer() says which.
<%def name="local_fft(name, length, lines, items, table_length)">
% if length & (length - 1) == 0:
${radix2_fft(name, length, lines, items, table_length)}
% else:
${mixed_fft(name, length, lines, items, table_length)}
% endif
</%def>

<%def name="radix2_fft(name, length, lines, items, table_length)">
<% half = length // 2 %>\
void ${name}(__local float2 *x, __local float2 *y, __global const float2 *table, const float sign)
{
    __local float2 *src = x;
    __local float2 *dst = y;
    for (int span = 1; span < ${length}; span <<= 1) {
        for (int b = get_local_id(0); b < ${lines * half}; b += ${items}) {
            const int line = b / ${half};
            const int j = b - line * ${half};
            const int k = j & (span - 1);
            float2 w = table[k * (${table_length // 2} / span)];
            w.y *= -sign;  // exp(sign 2 pi i m / table_length)
            const float2 c0 = src[line * ${length} + j];
            const float2 t = cmul(src[line * ${length} + j + ${half}], w);
            const int to = line * ${length} + ((j - k) << 1) + k;
            dst[to] = c0 + t;
            dst[to + span] = c0 - t;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        __local float2 *swap = src;
        src = dst;
        dst = swap;
    }
}
</%def>

<%def name="mixed_fft(name, length, lines, items, table_length)">
void ${name}(__local float2 *x, __local float2 *y, __global const float2 *table, const float sign)
{
<% span = 1 %>\
% for stage, r in enumerate(radices(length)):
<%
    src, dst = ("x", "y") if stage % 2 == 0 else ("y", "x")
    stride = length // r
%>\
    // Stage ${stage}: radix ${r} after spans of ${span}.
    for (int b = get_local_id(0); b < ${lines * stride}; b += ${items}) {
        const int line = b / ${stride};
        const int j = b - line * ${stride};
        const int k = j % ${span};
        __local const float2 *in = ${src} + line * ${length} + j;
        __local float2 *out = ${dst} + line * ${length} + (j - k) * ${r} + k;
        float2 a[${r}];
        a[0] = in[0];
        for (int t = 1; t < ${r}; t++) {
            float2 w = twiddle(table, ${table_length}, (long)t * k * ${table_length // (r * span)});
            w.y *= -sign;
            a[t] = cmul(in[t * ${stride}], w);
        }
    % for s_ in range(r):
        out[${s_ * span}] = a[0]\
        % for t in range(1, r):
<% c, sn = math.cos(2 * math.pi * s_ * t / r), math.sin(2 * math.pi * s_ * t / r) %>\
            % if (s_ * t) % r == 0:
 + a[${t}]\
            % elif 2 * (s_ * t) % (2 * r) == r:
 - a[${t}]\
            % else:
 + cmul(a[${t}], (float2)(${"%.9ef" % c}, sign * ${"%.9ef" % sn}))\
            % endif
        % endfor
;
    % endfor
    }
    barrier(CLK_LOCAL_MEM_FENCE);
<% span *= r %>\
% endfor
}
</%def>

<%def name="result_buffer(length, x, y)">${x if len(radices(length)) % 2 == 0 else y}</%def>
