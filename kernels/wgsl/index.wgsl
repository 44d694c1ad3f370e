// Data movement driven by an index tensor, one invocation per output element (deterministic,
// no atomics): gather and index_select (which differ only in how the index view is strided),
// scatter_add (each output element sums the sources aimed at it) and one_hot.
//
// params: gather/index_select: [numel, rank, axis, axis_len, shape_out[r], x view, index view]
//         scatter_add: [numel, rank, axis, 0, shape_out[r], shape_index[r], x view, index view,
//                       src view]
//         one_hot: [numel, classes, index offset]
// A view is offset, strides[r]. Out-of-range indices read as 0 and scatter nowhere.
// defines: MODE (gather scatter_add one_hot), T (data), IDX (i32 or u32), WG.
#include "params.wgsl"

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

// Coordinate of row-major element i along `axis` of the shape at params[shape_at..].
fn coord(i: u32, rank: u32, shape_at: u32, axis: u32) -> u32 {
    var inner = 1u;
    for (var d = axis + 1u; d < rank; d++) {
        inner *= params[shape_at + d];
    }
    return (i / inner) % params[shape_at + axis];
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params[0]) {
        return;
    }
#if MODE == one_hot
    let classes = params[1];
    let k = i32(index[params[2] + i / classes]);
    out[i] = select({{T}}(0), {{T}}(1), k == i32(i % classes));
#elif MODE == gather
    let rank = params[1];
    let axis = params[2];
    let x_at = 4u + rank;
    let index_at = x_at + 1u + rank;
    let k = i32(index[strided_index(i, rank, 4u, index_at)]);
    if (k < 0 || k >= i32(params[3])) {
        out[i] = {{T}}(0);
        return;
    }
    let c = coord(i, rank, 4u, axis);
    let stride = params[x_at + 1u + axis];
    // the offset of i with its axis coordinate replaced by k (strides are applied mod 2^32)
    out[i] = x[strided_index(i, rank, 4u, x_at) - c * stride + u32(k) * stride];
#else
    let rank = params[1];
    let axis = params[2];
    let shape_at = 4u;
    let ishape_at = shape_at + rank;
    let x_at = ishape_at + rank;
    let index_at = x_at + 1u + rank;
    let src_at = index_at + 1u + rank;
    var v = x[strided_index(i, rank, shape_at, x_at)];
    // the coordinates of i must lie inside the index tensor outside `axis`
    var rem = i;
    var inside = true;
    var index_base = params[index_at];
    var src_base = params[src_at];
    for (var d = rank; d > 0u; d--) {
        let n = params[shape_at + d - 1u];
        let cd = rem % n;
        rem /= n;
        if (d - 1u != axis) {
            inside = inside && cd < params[ishape_at + d - 1u];
            index_base += cd * params[index_at + d];
            src_base += cd * params[src_at + d];
        }
    }
    if (inside) {
        let c = i32(coord(i, rank, shape_at, axis));
        for (var j = 0u; j < params[ishape_at + axis]; j++) {
            if (i32(index[index_base + j * params[index_at + 1u + axis]]) == c) {
                v += src[src_base + j * params[src_at + 1u + axis]];
            }
        }
    }
    out[i] = v;
#endif
}
