// One fused Adam / AdamW step (Op::AdamStep): param, grad and the two moments in, each
// contiguous from its own offset, and with SCALED a scale multiplying the gradient (gradient
// clipping's coefficient); two outputs: the new param, and exp_avg then exp_avg_sq in one
// buffer. The arithmetic mirrors the CPU backend's, in the same order. With params that is at
// most 8 storage buffers, WebGPU's guaranteed limit per shader stage.
//
// params: AdamStepParams (kernels/src/header.rs): numel, the five offsets, then f32 bits of b1,
// b2, eps, weight decay, step size (lr / (1 - b1^t)), 1 / sqrt(1 - b2^t), shrink (1 - lr wd),
// and decoupled (0/1); no tail.
// defines: WG (workgroup size), SCALED (0/1).
#include "common.wgsl"

struct AdamStepParams {
    numel: u32,
    w_offset: u32, g_offset: u32, m_offset: u32, v_offset: u32, s_offset: u32,
    beta1: u32, beta2: u32, eps: u32, weight_decay: u32,
    step_size: u32, inv_sqrt_bc2: u32, shrink: u32, decoupled: u32,
}
@group(0) @binding(0) var<storage, read> params: AdamStepParams;

@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read> m: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
#if SCALED
@group(0) @binding(5) var<storage, read> scale: array<f32>;
@group(0) @binding(6) var<storage, read_write> new_w: array<f32>;
@group(0) @binding(7) var<storage, read_write> new_mv: array<f32>;
#else
@group(0) @binding(5) var<storage, read_write> new_w: array<f32>;
@group(0) @binding(6) var<storage, read_write> new_mv: array<f32>;
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params.numel) {
        return;
    }
    let b1 = bitcast<f32>(params.beta1);
    let b2 = bitcast<f32>(params.beta2);
    var wi = w[params.w_offset + i];
    var gi = g[params.g_offset + i];
#if SCALED
    gi = gi * scale[params.s_offset];
#endif
    if (params.decoupled != 0u) {
        wi = wi * bitcast<f32>(params.shrink);
    } else {
        gi = gi + bitcast<f32>(params.weight_decay) * wi;
    }
    let mi = b1 * m[params.m_offset + i] + (1.0 - b1) * gi;
    let vi = b2 * v[params.v_offset + i] + (1.0 - b2) * (gi * gi);
    let denom = sqrt(vi) * bitcast<f32>(params.inv_sqrt_bc2) + bitcast<f32>(params.eps);
    new_w[i] = wi - mi / denom * bitcast<f32>(params.step_size);
    new_mv[i] = mi;
    new_mv[params.numel + i] = vi;
}
