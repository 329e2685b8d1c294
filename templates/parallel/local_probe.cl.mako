## The local-memory ceiling (`pybp bench`): loads of ${width} bytes per second
## that local memory serves when nothing else limits them. Each work-item reads its own
## element and the ${loads - 1} after it, consecutive work-items reading consecutive
## elements (no bank conflicts), from a start that moves each round so that no load can
## be hoisted out of the loop; the sums keep the loads from being dropped.
<%
    vt = "float" if lanes == 1 else "float%d" % lanes
%>\
/* pybp local-memory probe: ${width}-byte loads */
#define ITEMS ${items}
#define LOADS ${loads}          /* per round, unrolled: a constant offset from one address */
#define SPAN ${span}           /* elements the start moves over (a power of two) */

__kernel __attribute__((reqd_work_group_size(ITEMS, 1, 1)))
void local_loads(
${args['local_loads']}
{
    __local ${vt} cache[SPAN + ITEMS + LOADS];
    const int item = get_local_id(0);
    for (int b = item; b < SPAN + ITEMS + LOADS; b += ITEMS)
        cache[b] = (${vt})((float)b);
    barrier(CLK_LOCAL_MEM_FENCE);
    // Four sums, so that no chain of dependent additions holds the loads back.
    ${vt} sum0 = (${vt})(0.0f), sum1 = sum0, sum2 = sum0, sum3 = sum0;
    for (int round = 0; round < rounds; round++) {
        const __local ${vt} *from = cache + ((round * 7) & (SPAN - 1)) + item;
        #pragma unroll
        for (int k = 0; k < LOADS; k += 4) {
            sum0 += from[k];
            sum1 += from[k + 1];
            sum2 += from[k + 2];
            sum3 += from[k + 3];
        }
    }
    const ${vt} sum = (sum0 + sum1) + (sum2 + sum3);
% if lanes == 1:
    out[get_global_id(0)] = sum;
% else:
    out[get_global_id(0)] = ${" + ".join("sum.s%d" % i for i in range(lanes))};
% endif
}
