## Shared pieces of the back-projection kernels. Each <%def> is OpenCL with the
## parameter-dependent parts filled in; `p` is the parameter set (pybp/parallel/params.py).
##
## Negation in kernels with barriers: the kernels negate only values that are the same
## for the whole work-group, as in mad(fy, -c.y, c.z) rather than mad(-fy, c.y, c.z);
## the two are equal bit for bit. Intel's CPU OpenCL compiler (oneAPI 2026.2) keeps one
## copy per work-group of a value that crosses a barrier unless it finds the value
## depends on the work-item, and that analysis does not look through a float negation
## (LLVM's fneg): -fy, hoisted out of a loop with barriers, came out as one work-item's
## for all (docs/portability.md).
<%!
    COMPONENTS = ("x", "y", "z", "w")

    def vector_type(n):
        return "float" if n == 1 else "float%d" % n
%>

<%def name="header(p, title, fields=None)">\
/* pybp ${title}
% for name, value in p.as_dict().items():
% if fields is None or name in fields:
 *   ${name} = ${value}
% endif
% endfor
 */
</%def>


## name(sinogram, n_bins, h, p) (default `fetch`): the interpolated value of projection p at detector
## position h (bins from the first bin's centre), zero outside the detector.
## `interpolation` overrides the parameter set's (the ALU cache reads whole bins).
<%def name="fetch_function(p, name='fetch', interpolation=None)">
<%
    n = p.slices_per_pass
    vt = vector_type(n)
    linear = (interpolation or p.interpolation) == "linear"
%>\
% if p.source == "image":
<% swizzle = {1: ".x", 2: ".xy", 4: ""}[n] %>\
// Unnormalized coordinates: texel i covers [i, i+1), so its centre is at i + 0.5.
// CLK_ADDRESS_CLAMP returns zero beyond the detector edges.
__constant sampler_t ${name}_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP
    | ${"CLK_FILTER_LINEAR" if linear else "CLK_FILTER_NEAREST"};

% if p.texel_rows == 2:
// Slices 0-1 in row 2p, slices 2-3 in row 2p+1: two 64-bit fetches filter faster than
// one 128-bit fetch, and adjacent rows share texture-cache tiles.
inline float4 ${name}(__read_only image2d_t sinogram, const int n_bins, const float h, const int p)
{
    const float row = 2.0f * (float)p + 0.5f;
    return (float4)(read_imagef(sinogram, ${name}_sampler, (float2)(h + 0.5f, row)).xy,
                    read_imagef(sinogram, ${name}_sampler, (float2)(h + 0.5f, row + 1.0f)).xy);
}
% else:
inline ${vt} ${name}(__read_only image2d_t sinogram, const int n_bins, const float h, const int p)
{
    return read_imagef(sinogram, ${name}_sampler, (float2)(h + 0.5f, (float)p + 0.5f))${swizzle};
}
% endif
% else:
<%
    if p.storage == "half":
        load = "vload_half(%s, sinogram)" if n == 1 else "vload_half%d(%%s, sinogram)" % n
        ptr = "__global const half *sinogram"
    else:
        load = "sinogram[%s]"
        ptr = "__global const %s *sinogram" % vt
%>\
// No usable image: interpolate with arithmetic from global memory, zero outside.
inline ${vt} ${name}_bin(${ptr}, const int n_bins, const int i, const int p)
{
    return (i >= 0 && i < n_bins) ? ${load % "p * n_bins + i"} : (${vt})(0.0f);
}

inline ${vt} ${name}(${ptr}, const int n_bins, const float h, const int p)
{
% if linear:
    const float left = floor(h);
    const int i = (int)left;
    const ${vt} a = ${name}_bin(sinogram, n_bins, i, p);
    const ${vt} b = ${name}_bin(sinogram, n_bins, i + 1, p);
    return mad((${vt})(h - left), b - a, a);
% else:
    return ${name}_bin(sinogram, n_bins, (int)floor(h + 0.5f), p);
% endif
}
% endif
</%def>

## The pixel (x, y) of this work-item when each 4x4 square of a 16x16 tile is walked
## along a Z-order curve: 4 neighbours fetch bins at most 3 apart, and 16 of them need
## about 8 bins (Sect. 5.5, Alg. 2).
<%def name="zorder_pixel(p)">
    const int item = get_local_id(1) * ${p.group_side} + get_local_id(0);
    const int x = first_column + get_group_id(0) * ${p.group_side} + ((item >> 4) & 3) * 4 + ((item & 1) | ((item >> 1) & 2));
    const int y = first_row + get_group_id(1) * ${p.group_side} + ((item >> 6) & 3) * 4 + (((item >> 1) & 1) | ((item >> 2) & 2));
</%def>

## Write the per-slice components of `total` for pixel (x, y); later detector or angle
## pieces of the same slices add to what the first wrote.
<%def name="store(p, total)">
<% n = p.slices_per_pass %>\
    if (x < nx && y < ny) {
        const int pixel = y * nx + x;
% for s in range(n):
<% value = total if n == 1 else "%s.%s" % (total, COMPONENTS[s]) %>\
        out[(size_t)(first_plane + ${s}) * nx * ny + pixel] = accumulate ?
            out[(size_t)(first_plane + ${s}) * nx * ny + pixel] + ${value} : ${value};
% endfor
    }
</%def>
