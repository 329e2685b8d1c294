## The one flat-field rule of every pybp path: stages/normalize.cl.mako (parallel beam's
## normalisation) and cone/preweight.cl.mako (FDK from counts) both call these, so that a
## pixel becomes the same line integral on either (docs/design.md, section 1).
<%def name="functions(real, floor)">
// (p - dark) / (flat - dark), in ${real}: double where the device has it, for the
// filter amplifies float32's rounding of the ratio and the log several times.
inline ${real} transmission(const ${real} p, const ${real} dark, const ${real} flat)
{
    return (p - dark) / (flat - dark);
}

// -log of a transmission. One that is not positive (noise on a dark beam) becomes
// ${floor}, one that is not a number (a pixel whose flat equals its dark) 1, taken as
// transparent: either sets *replaced, for the caller to count.
inline float line_integral(${real} t, bool *replaced)
{
    if (!isfinite(t) || t <= 0) {
        t = isfinite(t) ? (${real})${floor} : (${real})1;
        *replaced = true;
    }
    return (float)(-log(t));
}

// A value given as a line integral: a NaN or Inf would spread over the result, so it
// becomes 0 and sets *replaced (the caller refuses the data before writing anything).
inline float given(const float value, bool *replaced)
{
    if (!isfinite(value)) {
        *replaced = true;
        return 0.0f;
    }
    return value;
}
</%def>
