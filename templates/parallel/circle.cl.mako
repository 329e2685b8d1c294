/* pybp reconstruction circle */
// circle=True: zero the pixels outside the reconstruction circle, where some
// projections missed the detector (scikit-image's iradon(circle=True) does the same).
// Each row's inside is the columns [first, stop), worked out in double on the host.
__kernel void outside_circle(
${args['outside_circle']}
{
    const int x = get_global_id(0);
    const int y = get_global_id(1);
    const int s = get_global_id(2);
    if (x < nx && y < ny && (x < inside[y].x || x >= inside[y].y))
        slices[((size_t)s * ny + y) * nx + x] = 0.0f;
}
