// gochat CUDA kernels: common definitions. The .cu files of this folder
// are concatenated in name order into one NVRTC program (this one first),
// compiled with --fmad=false so that every product and sum is rounded as
// written (the CPU backend's order where a kernel must match it bit for
// bit). Header-free: NVRTC ships no headers, so the types and bf16
// conversions are spelled out here. Every kernel is extern "C" (the Go
// side looks it up by name) and takes 64-bit element counts where a
// buffer may pass 2^31 elements.

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define INF_F __int_as_float(0x7f800000)
#define NAN_F __int_as_float(0x7fc00000)

// bf16_to_f32 widens a bfloat16 (exact).
__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

// f32_to_bf16 rounds to the nearest bfloat16, ties to even; NaNs stay NaN
// (quiet), as kernels/cpu.ToBF16 does.
__device__ __forceinline__ u16 f32_to_bf16(float f) {
	u32 b = __float_as_uint(f);
	if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
	b += 0x7fffu + ((b >> 16) & 1u);
	return (u16)(b >> 16);
}

// ldw loads element i of an operand that is F32 (bf == 0) or BF16.
__device__ __forceinline__ float ldw(const void* p, int bf, i64 i) {
	return bf ? bf16_to_f32(((const u16*)p)[i]) : ((const float*)p)[i];
}

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// grid-stride loop over [0, n)
#define FOR_N(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

__device__ __forceinline__ double warp_sum_d(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
__device__ __forceinline__ float warp_sum_f(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
__device__ __forceinline__ float warp_max_f(float v) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// Block reductions: every thread of the block (blockDim.x a multiple of 32,
// at most 1024) calls them and gets the result. sh is __shared__ scratch of
// 32 elements; the leading barrier lets a block reuse it back to back.
__device__ double block_sum_d(double v, double* sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum_d(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	if (w == 0) {
		double x = lane < nw ? sh[lane] : 0.0;
		x = warp_sum_d(x);
		if (lane == 0) sh[0] = x;
	}
	__syncthreads();
	return sh[0];
}

__device__ float block_max_f(float v, float* sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max_f(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	if (w == 0) {
		float x = lane < nw ? sh[lane] : -INF_F;
		x = warp_max_f(x);
		if (lane == 0) sh[0] = x;
	}
	__syncthreads();
	return sh[0];
}

// first_real returns the index of the first j < nk with mask[j] != 0, or
// nk when there is none (mask null: 0). Every thread of the block calls it.
__device__ int first_real(const int* mask, int nk, int* sh) {
	if (mask == 0) return 0;
	__syncthreads();
	if (threadIdx.x == 0) *sh = nk;
	__syncthreads();
	for (int j = threadIdx.x; j < nk; j += blockDim.x)
		if (mask[j] != 0) atomicMin(sh, j);
	__syncthreads();
	return *sh;
}
