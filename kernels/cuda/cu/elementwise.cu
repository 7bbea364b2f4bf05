// Elementwise kernels and small helpers (grid-stride loops).

// out = a + b (b F32 or BF16); out may alias a or b.
extern "C" __global__ void k_add(float* out, const float* a, const void* b, int b_bf16, i64 n) {
	FOR_N(i, n) out[i] = a[i] + ldw(b, b_bf16, i);
}

extern "C" __global__ void k_scale(float* x, float s, i64 n) {
	FOR_N(i, n) x[i] = x[i] * s;
}

extern "C" __global__ void k_mul(float* out, const float* a, const float* b, i64 n) {
	FOR_N(i, n) out[i] = a[i] * b[i];
}

// out[N,C] += bias[C] (F32 or BF16).
extern "C" __global__ void k_add_bias(float* out, const void* bias, int bias_bf16, i64 n, int c) {
	FOR_N(i, n * (i64)c) out[i] = out[i] + ldw(bias, bias_bf16, i % c);
}

extern "C" __global__ void k_relu_fwd(float* out, const float* inp, i64 n) {
	FOR_N(i, n) {
		float x = inp[i];
		out[i] = x > 0.0f ? x : 0.0f;
	}
}

// dinp = dout where out > 0, else 0; dinp may alias dout.
extern "C" __global__ void k_relu_bwd(float* dinp, const float* dout, const float* out, i64 n) {
	FOR_N(i, n) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

// The exact (erf) GELU in double, rounded once, in the CPU backend's order.
extern "C" __global__ void k_gelu_fwd(float* out, const float* inp, i64 n) {
	FOR_N(i, n) {
		double z = (double)inp[i];
		out[i] = (float)(0.5 * z * (1.0 + erf(z * 1.4142135623730951 / 2.0)));
	}
}

extern "C" __global__ void k_gelu_bwd(float* dinp, const float* dout, const float* inp, i64 n) {
	FOR_N(i, n) {
		double z = (double)inp[i];
		double g = 0.5 * (1.0 + erf(z * 1.4142135623730951 / 2.0)) + z * 0.3989422804014327 * exp(-0.5 * z * z);
		dinp[i] = (float)((double)dout[i] * g);
	}
}

extern "C" __global__ void k_f32_to_bf16(u16* dst, const float* src, i64 n) {
	FOR_N(i, n) dst[i] = f32_to_bf16(src[i]);
}

extern "C" __global__ void k_bf16_to_f32(float* dst, const u16* src, i64 n) {
	FOR_N(i, n) dst[i] = bf16_to_f32(src[i]);
}

// c[m, 0..n) of rows ldc apart = beta·c (beta == 0: 0, NaNs dropped).
extern "C" __global__ void k_scale_matrix(float* c, int m, int n, int ldc, float beta) {
	FOR_N(i, (i64)m * n) {
		i64 at = (i / n) * ldc + i % n;
		c[at] = beta == 0.0f ? 0.0f : beta * c[at];
	}
}

// db[OC] += Σ_rows dout[N,OC], one thread per column, in double in row order.
extern "C" __global__ void k_colsum_add(float* db, const float* dout, int n, int oc) {
	FOR_N(j, (i64)oc) {
		double s = 0.0;
		for (int i = 0; i < n; i++) s += (double)dout[(i64)i * oc + j];
		db[j] = db[j] + (float)s;
	}
}

// out[N,F] = silu(gate)·up from inp[N,2F] (gate | up), silu in double
// rounded before the product, as PyTorch and the CPU backend.
extern "C" __global__ void k_swiglu_fwd(float* out, const float* inp, int n, int f) {
	FOR_N(i, (i64)n * f) {
		i64 r = i / f, j = i % f;
		double z = (double)inp[r * 2 * f + j];
		out[i] = (float)(z / (1.0 + exp(-z))) * inp[r * 2 * f + f + j];
	}
}

extern "C" __global__ void k_swiglu_bwd(float* dinp, const float* dout, const float* inp, int n, int f) {
	FOR_N(i, (i64)n * f) {
		i64 r = i / f, j = i % f;
		double z = (double)inp[r * 2 * f + j];
		double u = (double)inp[r * 2 * f + f + j];
		double s = 1.0 / (1.0 + exp(-z));
		double gy = (double)dout[i];
		dinp[r * 2 * f + j] = (float)(gy * u * s * (1.0 + z * (1.0 - s)));
		dinp[r * 2 * f + f + j] = (float)(gy * z * s);
	}
}

// SplitMix64 as a counter-based hash (kernels.Ops.DropoutForward).
__device__ __forceinline__ u64 splitmix(u64 z) {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

// out = inp·scale, scale[i] = keep_i ? keep_scale : 0 with keep_i =
// mix(key + (i+1)·γ)>>40 >= thr; out may alias inp.
extern "C" __global__ void k_dropout(float* out, float* scale, const float* inp, u64 key, u64 thr, float keep_scale, i64 n) {
	FOR_N(i, n) {
		u64 r = splitmix(key + (u64)(i + 1) * 0x9E3779B97F4A7C15ull);
		float s = (r >> 40) >= thr ? keep_scale : 0.0f;
		scale[i] = s;
		out[i] = inp[i] * s;
	}
}

// out[N,C] = table[ids[i], :] (F32 or BF16 widened); an id outside [0,V)
// gives a row of NaNs.
extern "C" __global__ void k_embedding_fwd(float* out, const int* ids, const void* table, int table_bf16, int n, int c, int v) {
	FOR_N(i, (i64)n * c) {
		i64 r = i / c, j = i % c;
		int id = ids[r];
		out[i] = (id >= 0 && id < v) ? ldw(table, table_bf16, (i64)id * c + j) : NAN_F;
	}
}

// dtable[ids[i], :] += dout[i, :] (atomic: rows with the same id add up in
// any order); ids outside [0,V) are skipped.
extern "C" __global__ void k_embedding_bwd(float* dtable, const float* dout, const int* ids, int n, int c, int v) {
	FOR_N(i, (i64)n * c) {
		i64 r = i / c, j = i % c;
		int id = ids[r];
		if (id >= 0 && id < v) atomicAdd(&dtable[(i64)id * c + j], dout[i]);
	}
}
