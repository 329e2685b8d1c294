/* pybp device probe */
// Does the device build and run a kernel, and do its profiling timers tell the truth
// (pybp/cl/device.py, probe): each item halves and adds 1 ``n`` times, exact in float,
// so the result is known; ``n`` grows until the wall clock can judge the timer.
__kernel void count(__global float *out, const int n)
{
    float value = (float)get_global_id(0);
    for (int k = 0; k < n; k++)
        value = mad(value, 0.5f, 1.0f);     /* exact: halving, then adding 1 */
    out[get_global_id(0)] = value;
}
