// Reductions down the columns of a [rows, cols] view, x[offset + r * row_stride + c]: a linear
// layer's bias gradient ([16384, 384] summed to [384]). A workgroup takes 32 adjacent columns
// (of V: vec4s with VEC4) and one chunk of `chunk_rows` rows. Its 8 row lanes each fold every
// 8th row of the chunk, four loads in flight, so a warp reads 32 adjacent values of one row;
// then lane 0 folds the 8 lanes' values in order. Chunk k's result for column c goes to
// out[k * cols + c]: the partials, which a second launch reduces the same way in one chunk.
//
// params: ColumnsParams (kernels/src/header.rs): cols, row_stride and offset in units of V;
// scale: f32 bits multiplying each result (a mean's 1 / rows on its last launch).
// defines: OP (sum prod max min mean; mean sums and scales), T, LOWEST/HIGHEST (identity of
// max/min as WGSL expressions of T), VEC4.
#include "common.wgsl"
#include "vec.wgsl"

struct ColumnsParams {
    cols: u32,
    rows: u32,
    row_stride: u32,
    offset: u32,
    chunk_rows: u32,
    scale: u32,
}
@group(0) @binding(0) var<storage, read> params: ColumnsParams;
@group(0) @binding(1) var<storage, read> x: array<V>;
@group(0) @binding(2) var<storage, read_write> out: array<V>;

const LANES: u32 = 8u;
var<workgroup> lanes: array<V, 256>;

fn identity() -> V {
#if OP == prod
    return V({{T}}(1));
#elif OP == max
    return V({{LOWEST}});
#elif OP == min
    return V({{HIGHEST}});
#else
    return V({{T}}(0));
#endif
}

fn combine(a: V, b: V) -> V {
#if OP == prod
    return a * b;
#elif OP == max
    return max(a, b);
#elif OP == min
    return min(a, b);
#else
    return a + b;
#endif
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wid.x * 32u + lid % 32u;
    let lane = lid / 32u;
    let first = wid.y * params.chunk_rows;
    let end = min(first + params.chunk_rows, params.rows);
    let stride = params.row_stride;
    var acc = identity();
    if (c < params.cols) {
        let at = params.offset + c;
        var r = first + lane;
        for (; r + 3u * LANES < end; r += 4u * LANES) {
            let v0 = x[at + r * stride];
            let v1 = x[at + (r + LANES) * stride];
            let v2 = x[at + (r + 2u * LANES) * stride];
            let v3 = x[at + (r + 3u * LANES) * stride];
            acc = combine(combine(acc, v0), v1);
            acc = combine(combine(acc, v2), v3);
        }
        for (; r < end; r += LANES) {
            acc = combine(acc, x[at + r * stride]);
        }
    }
    lanes[lid] = acc;
    workgroupBarrier();
    if (lane == 0u && c < params.cols) {
        var total = lanes[lid];
        for (var l = 1u; l < LANES; l++) {
            total = combine(total, lanes[lid + 32u * l]);
        }
#if OP == mean
        total *= bitcast<f32>(params.scale);
#endif
        out[wid.y * params.cols + c] = total;
    }
}
