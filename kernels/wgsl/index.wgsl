// Data movement driven by an index tensor, one invocation per output element (deterministic,
// no atomics): gather and index_select (which differ only in how the index view is strided),
// scatter_add (each output element sums the sources aimed at it) and one_hot.
//
// params (kernels/src/header.rs), one struct per mode:
//   gather (and index_select): GatherParams: numel, rank (r), axis, axis_len;
//     tail: shape_out[r], x view, index view
//   scatter_add: ScatterAddParams: numel, rank (r), axis, chunk (index positions per
//     invocation: invocation c * numel + o sums chunk c for output o, chunk 0 with x into it);
//     tail: shape_out[r], shape_index[r], x view, index view, src view
//   one_hot: OneHotParams: numel, classes, index_offset; no tail
// A view is offset, strides[r]. Out-of-range indices read as 0 and scatter nowhere.
// defines: MODE (gather scatter_add one_hot), T (data), IDX (i32 or u32), WG.
#include "common.wgsl"

#if MODE == one_hot
struct OneHotParams {
    numel: u32,
    classes: u32,
    index_offset: u32,
}
@group(0) @binding(0) var<storage, read> params: OneHotParams;
#else
#if MODE == scatter_add
struct ScatterAddParams {
    numel: u32,
    rank: u32,
    axis: u32,
    chunk: u32,
    tail: array<u32>,
}
@group(0) @binding(0) var<storage, read> params: ScatterAddParams;
#else
struct GatherParams {
    numel: u32,
    rank: u32,
    axis: u32,
    axis_len: u32,
    tail: array<u32>,
}
@group(0) @binding(0) var<storage, read> params: GatherParams;
#endif

fn word(i: u32) -> u32 {
    return params.tail[i];
}
#include "strided.wgsl"
#endif

#if MODE == one_hot
@group(0) @binding(1) var<storage, read> index: array<{{IDX}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;
#elif MODE == scatter_add
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> index: array<{{IDX}}>;
@group(0) @binding(3) var<storage, read> src: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> out: array<{{T}}>;
#else
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> index: array<{{IDX}}>;
@group(0) @binding(3) var<storage, read_write> out: array<{{T}}>;
#endif

// (one_hot's header has no tail, hence no word())
#if MODE != one_hot
// Coordinate of row-major element i along `axis` of the shape at word(shape_at..).
fn coord(i: u32, rank: u32, shape_at: u32, axis: u32) -> u32 {
    var inner = 1u;
    for (var d = axis + 1u; d < rank; d++) {
        inner *= word(shape_at + d);
    }
    return (i / inner) % word(shape_at + axis);
}
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
#if MODE == scatter_add
    let slot = group_index(wid, nwg) * {{WG}}u + lid;
    let len = word(params.rank + params.axis);
    let first = (slot / params.numel) * params.chunk;
    // chunk 0 always runs: it carries x even where the index axis is empty
    if (slot >= params.numel && first >= len) {
        return;
    }
    let i = slot % params.numel;
#else
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params.numel) {
        return;
    }
#endif
#if MODE == one_hot
    let classes = params.classes;
    let k = i32(index[params.index_offset + i / classes]);
    out[i] = select({{T}}(0), {{T}}(1), k == i32(i % classes));
#elif MODE == gather
    let rank = params.rank;
    let axis = params.axis;
    let x_at = rank;
    let index_at = x_at + 1u + rank;
    let k = i32(index[strided_index(i, rank, 0u, index_at)]);
    if (k < 0 || k >= i32(params.axis_len)) {
        out[i] = {{T}}(0);
        return;
    }
    let c = coord(i, rank, 0u, axis);
    let stride = word(x_at + 1u + axis);
    // the offset of i with its axis coordinate replaced by k (strides are applied mod 2^32)
    out[i] = x[strided_index(i, rank, 0u, x_at) - c * stride + u32(k) * stride];
#else
    let rank = params.rank;
    let axis = params.axis;
    let shape_at = 0u;
    let ishape_at = shape_at + rank;
    let x_at = ishape_at + rank;
    let index_at = x_at + 1u + rank;
    let src_at = index_at + 1u + rank;
    var v = select({{T}}(0), x[strided_index(i, rank, shape_at, x_at)], first == 0u);
    // the coordinates of i must lie inside the index tensor outside `axis`
    var rem = i;
    var inside = true;
    var index_base = word(index_at);
    var src_base = word(src_at);
    for (var d = rank; d > 0u; d--) {
        let n = word(shape_at + d - 1u);
        let cd = rem % n;
        rem /= n;
        if (d - 1u != axis) {
            inside = inside && cd < word(ishape_at + d - 1u);
            index_base += cd * word(index_at + d);
            src_base += cd * word(src_at + d);
        }
    }
    if (inside) {
        let c = i32(coord(i, rank, shape_at, axis));
        for (var j = first; j < min(first + params.chunk, len); j++) {
            if (i32(index[index_base + j * word(index_at + 1u + axis)]) == c) {
                v += src[src_base + j * word(src_at + 1u + axis)];
            }
        }
    }
    out[slot] = v;
#endif
}
