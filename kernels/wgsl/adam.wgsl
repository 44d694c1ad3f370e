// One fused Adam / AdamW step (Op::AdamStep): param, grad and the two moments in, each
// contiguous from its own offset; three outputs: the new param, exp_avg and exp_avg_sq. The
// arithmetic mirrors the CPU backend's, in the same order. With params that is 8 storage
// buffers, WebGPU's guaranteed limit per shader stage.
//
// params: [n, w offset, g offset, m offset, v offset, then f32 bits of: b1, b2, eps, weight
// decay, step size (lr / (1 - b1^t)), 1 / sqrt(1 - b2^t), shrink (1 - lr wd), decoupled (0/1)]
// defines: WG (workgroup size).
#include "params.wgsl"

@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> m: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
@group(0) @binding(5) var<storage, read_write> new_w: array<f32>;
@group(0) @binding(6) var<storage, read_write> new_m: array<f32>;
@group(0) @binding(7) var<storage, read_write> new_v: array<f32>;

fn constant(k: u32) -> f32 {
    return bitcast<f32>(params[5u + k]);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    let n = params[0];
    if (i >= n) {
        return;
    }
    let b1 = constant(0u);
    let b2 = constant(1u);
    var wi = w[params[1] + i];
    var gi = g[params[2] + i];
    if (params[12] != 0u) {
        wi = wi * constant(6u);
    } else {
        gi = gi + constant(3u) * wi;
    }
    let mi = b1 * m[params[3] + i] + (1.0 - b1) * gi;
    let vi = b2 * v[params[4] + i] + (1.0 - b2) * (gi * gi);
    let denom = sqrt(vi) * constant(5u) + constant(2u);
    new_w[i] = wi - mi / denom * constant(4u);
    new_m[i] = mi;
    new_v[i] = vi;
}
