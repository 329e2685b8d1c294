/* pybp image format probe */
// Can an image of ${channels} channel(s) be sampled (pybp/cl/device.py,
// usable_image_formats)? Some runtimes list formats they cannot allocate, and PoCL 3.0
// copies single-channel half images faithfully but samples garbage from them.
__constant sampler_t nearest = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;
__kernel void sample(__read_only image2d_t image, __global float *out)
{
    const int x = get_global_id(0), y = get_global_id(1);
    const float4 texel = read_imagef(image, nearest, (float2)(x + 0.5f, y + 0.5f));
    __global float *to = out + (y * get_global_size(0) + x) * ${channels};
    /* Only the image's channels: Oclgrind's checker takes the others for undefined. */
    to[0] = texel.x;
% if channels > 1:
    to[1] = texel.y;
% endif
% if channels > 2:
    to[2] = texel.z;
    to[3] = texel.w;
% endif
}
