// Strided-view indexing (#include "strided.wgsl"), over the words `fn word(i: u32) -> u32` of
// the including kernel: `params.tail[i]`, the variable-length part of its typed header.

// Storage index of row-major element `i` of a view: its shape is word(shape_at..shape_at+rank),
// its offset word(view_at) and its strides word(view_at+1..view_at+1+rank).
fn strided_index(i: u32, rank: u32, shape_at: u32, view_at: u32) -> u32 {
    var at = word(view_at);
    if (rank == 1u) {
        return at + i * word(view_at + 1u);
    }
    var rem = i;
    for (var d = rank; d > 0u; d--) {
        let n = word(shape_at + d - 1u);
        at += (rem % n) * word(view_at + d);
        rem /= n;
    }
    return at;
}

// Storage indices of row-major element `i` in `views` (at most 4) views of one shape, the first
// view at word(view_at) and each next one 1 + rank words further: one pass of integer
// divisions serves them all (the divisions cost more than the memory access they address).
fn strided_indices(i: u32, rank: u32, shape_at: u32, view_at: u32, views: u32) -> vec4<u32> {
    let step = 1u + rank;
    var at = vec4<u32>(0u);
    for (var v = 0u; v < views; v++) {
        at[v] = word(view_at + v * step);
    }
    var rem = i;
    for (var d = rank; d > 1u; d--) {
        let n = word(shape_at + d - 1u);
        let c = rem % n;
        rem /= n;
        for (var v = 0u; v < views; v++) {
            at[v] += c * word(view_at + v * step + d);
        }
    }
    // what remains is the outermost coordinate (i < numel)
    if (rank > 0u) {
        for (var v = 0u; v < views; v++) {
            at[v] += rem * word(view_at + v * step + 1u);
        }
    }
    return at;
}
