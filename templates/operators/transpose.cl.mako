## A tiled transpose of each layer of a volume (pybp/cl/transpose.py): cone beam's
## gather reads the volume from a transposed copy, so that the columns it walks are
## consecutive in memory.
<%def name="transpose(arguments, tile)">
// transposed = each layer of volume transposed: (layers, ny, nx) to (layers, nx, ny),
// work-item (x, y, layer). Through a TILE x TILE block of local memory, so that both
// the read and the write are consecutive (a column of a layer is one float per cache
// line); one column more keeps the block's columns on distinct banks.
#define TILE ${tile}
__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void transpose_slices(
${arguments}
{
    __local float block[TILE][TILE + 1];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int x0 = get_group_id(0) * TILE, y0 = get_group_id(1) * TILE;
    const size_t layer = (size_t)get_global_id(2) * ny * nx;
    if (x0 + tx < nx && y0 + ty < ny)
        block[ty][tx] = volume[layer + (size_t)(y0 + ty) * nx + x0 + tx];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (y0 + tx < ny && x0 + ty < nx)
        transposed[layer + (size_t)(x0 + ty) * ny + y0 + tx] = block[tx][ty];
}
</%def>
