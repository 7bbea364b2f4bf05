// AdamW and the gradient norm.

// adamw_apply is kernels/cpu's adamWUpdate.apply: PyTorch's float32
// operation order, lerp as a double FMA rounded to float.
__device__ __forceinline__ void adamw_apply(float* pp, float g, float* mp, float* vp, float gs, float decay, float w1,
		float w2, float b2, float bc2s, float neg_step, float eps) {
	float p = *pp, m = *mp, v = *vp;
	if (gs != 1.0f) g = g * gs;
	p = p * decay;
	float d = g - m;
	if (fabsf(w1) < 0.5f) m = (float)fma((double)w1, (double)d, (double)m);
	else m = (float)fma((double)(w1 - 1.0f), (double)d, (double)g);
	float t1 = v * b2;
	float t2 = w2 * g;
	t2 = t2 * g;
	v = t1 + t2;
	float denom = __fsqrt_rn(v) / bc2s + eps;
	float upd = neg_step * m;
	*pp = p + upd / denom;
	*mp = m;
	*vp = v;
}

extern "C" __global__ void k_adamw(float* params, const float* grads, float* m, float* v, i64 n, float gs, float decay,
		float w1, float w2, float b2, float bc2s, float neg_step, float eps) {
	FOR_N(i, n) adamw_apply(&params[i], grads[i], &m[i], &v[i], gs, decay, w1, w2, b2, bc2s, neg_step, eps);
}

// join_master / split_master are kernels/cpu's JoinMaster / SplitMaster.
__device__ __forceinline__ float join_master(u16 hi, u16 lo) {
	u32 h = hi;
	if (lo > 0x8000u) h--;
	return __uint_as_float((h << 16) | lo);
}
__device__ __forceinline__ void split_master(float w, u16* hi, u16* lo) {
	u32 bits = __float_as_uint(w);
	u16 h = f32_to_bf16(w), l = (u16)bits;
	if (l == 0x8000u && h != (u16)(bits >> 16)) l = 0x8001u;
	*hi = h;
	*lo = l;
}

// AdamW on fp32 masters split into bf16 params and low halves (two per
// u32 of lo): one thread per pair of elements, which share a word of lo.
extern "C" __global__ void k_adamw_bf16(u16* params, u32* lo, const float* grads, float* m, float* v, i64 n, float gs,
		float decay, float w1, float w2, float b2, float bc2s, float neg_step, float eps) {
	FOR_N(k, (n + 1) / 2) {
		u32 word = lo[k];
		for (int e = 0; e < 2; e++) {
			i64 i = 2 * k + e;
			if (i >= n) break;
			u16 l = (u16)(word >> (16 * e));
			float w = join_master(params[i], l);
			adamw_apply(&w, grads[i], &m[i], &v[i], gs, decay, w1, w2, b2, bc2s, neg_step, eps);
			u16 h;
			split_master(w, &h, &l);
			params[i] = h;
			word = (word & ~(0xffffu << (16 * e))) | ((u32)l << (16 * e));
		}
		lo[k] = word;
	}
}

// partial[blockIdx.x] = Σ x² over the block's grid-stride share, in double
// (each square exact in double).
extern "C" __global__ void k_sumsq_partial(double* partial, const float* x, i64 n) {
	__shared__ double sh[32];
	double s = 0.0;
	FOR_N(i, n) {
		double a = (double)x[i];
		s += a * a;
	}
	s = block_sum_d(s, sh);
	if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = Σ partial[0..np) in one block.
extern "C" __global__ void k_sum_d(double* out, const double* partial, int np) {
	__shared__ double sh[32];
	double s = 0.0;
	for (int i = threadIdx.x; i < np; i += blockDim.x) s += partial[i];
	s = block_sum_d(s, sh);
	if (threadIdx.x == 0) out[0] = s;
}
