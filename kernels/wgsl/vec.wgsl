// Shared by the kernels that read their input as V (#include "vec.wgsl"): a vec4 of T when the
// VEC4 define is set (runs contiguous from multiples of 4), else T; W is V's width.
#if VEC4
alias V = vec4<{{T}}>;
const W: u32 = 4u;
#else
alias V = {{T}};
const W: u32 = 1u;
#endif
