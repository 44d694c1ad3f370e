// Creation ops, one invocation per element: full, arange, eye.
//
// params: full: [numel, value bits]; arange: [numel, start bits, step bits] (as T);
//         eye: [numel, m (columns)]
// defines: MODE (full arange eye), T, WG.
#include "params.wgsl"

@group(0) @binding(1) var<storage, read_write> out: array<{{T}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params[0]) {
        return;
    }
#if MODE == full
    out[i] = bitcast<{{T}}>(params[1]);
#elif MODE == arange
    out[i] = bitcast<{{T}}>(params[1]) + {{T}}(i) * bitcast<{{T}}>(params[2]);
#elif MODE == eye
    out[i] = select({{T}}(0), {{T}}(1), i / params[1] == i % params[1]);
#endif
}
