// Creation ops, one invocation per element: full, arange, eye.
//
// params (kernels/src/header.rs), one struct per mode, no tail: full: FullParams (numel,
// value bits); arange: ArangeParams (numel, start and step bits, as T); eye: EyeParams (numel,
// columns).
// defines: MODE (full arange eye), T, WG.
#include "common.wgsl"

#if MODE == full
struct FullParams {
    numel: u32,
    value: u32,
}
@group(0) @binding(0) var<storage, read> params: FullParams;
#elif MODE == arange
struct ArangeParams {
    numel: u32,
    start: u32,
    step: u32,
}
@group(0) @binding(0) var<storage, read> params: ArangeParams;
#elif MODE == eye
struct EyeParams {
    numel: u32,
    columns: u32,
}
@group(0) @binding(0) var<storage, read> params: EyeParams;
#endif

@group(0) @binding(1) var<storage, read_write> out: array<{{T}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params.numel) {
        return;
    }
#if MODE == full
    out[i] = bitcast<{{T}}>(params.value);
#elif MODE == arange
    out[i] = bitcast<{{T}}>(params.start) + {{T}}(i) * bitcast<{{T}}>(params.step);
#elif MODE == eye
    out[i] = select({{T}}(0), {{T}}(1), i / params.columns == i % params.columns);
#endif
}
