// Random tensors, bit for bit the generator of kiln-core's random.rs: element i of seed s is one
// Philox-4x32-10 block with key (s lo, s hi) and counter (i, 0, 0, 0), in u32 arithmetic only.
//
// params: RandomParams (kernels/src/header.rs): numel, seed_lo, seed_hi, a and b (f32 bits of
// (low, high) for uniform and (mean, std) for normal); no tail.
// defines: MODE (uniform normal), WG.
#include "common.wgsl"

struct RandomParams {
    numel: u32,
    seed_lo: u32,
    seed_hi: u32,
    a: u32,
    b: u32,
}
@group(0) @binding(0) var<storage, read> params: RandomParams;

@group(0) @binding(1) var<storage, read_write> out: array<f32>;

// High and low words of a * b from 16-bit halves (every partial product fits in 32 bits).
fn mulhilo(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, a * b);
}

fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key;
    for (var round = 0u; round < 10u; round++) {
        if (round > 0u) {
            k += vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
        }
        let r0 = mulhilo(0xD2511F53u, c.x);
        let r1 = mulhilo(0xCD9E8D57u, c.z);
        c = vec4<u32>(r1.x ^ c.y ^ k.x, r1.y, r0.x ^ c.w ^ k.y, r0.y);
    }
    return c;
}

// The top 24 bits scaled to [0, 1), exact in f32.
fn unit(x: u32) -> f32 {
    return f32(x >> 8u) * (1.0 / 16777216.0);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params.numel) {
        return;
    }
    let x = philox(vec4<u32>(i, 0u, 0u, 0u), vec2<u32>(params.seed_lo, params.seed_hi));
    let a = bitcast<f32>(params.a);
    let b = bitcast<f32>(params.b);
#if MODE == uniform
    out[i] = a + (b - a) * unit(x.x);
#else
    let u1 = unit(x.x) + 1.0 / 16777216.0;
    let u2 = unit(x.y);
    out[i] = a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
#endif
}
