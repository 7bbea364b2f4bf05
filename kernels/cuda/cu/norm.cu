// Row kernels: one block per row, moments in double (as the CPU backend).

// LayerNorm forward: out = (x-mean)·rstd·w + b, saving mean and rstd.
// w and b may be null; F32 or BF16 (w_bf16, b_bf16).
extern "C" __global__ void k_layernorm_fwd(float* out, float* mean, float* rstd, const float* inp,
		const void* w, int w_bf16, const void* b, int b_bf16, int n, int c, float eps) {
	__shared__ double sh[32];
	int row = blockIdx.x;
	const float* x = inp + (i64)row * c;
	float* o = out + (i64)row * c;
	double s = 0.0;
	for (int j = threadIdx.x; j < c; j += blockDim.x) s += (double)x[j];
	double m = block_sum_d(s, sh) / c;
	double v = 0.0;
	for (int j = threadIdx.x; j < c; j += blockDim.x) {
		double d = (double)x[j] - m;
		v += d * d;
	}
	double r = 1.0 / sqrt(block_sum_d(v, sh) / c + (double)eps);
	if (threadIdx.x == 0) {
		mean[row] = (float)m;
		rstd[row] = (float)r;
	}
	for (int j = threadIdx.x; j < c; j += blockDim.x) {
		float y = (float)(((double)x[j] - m) * r);
		if (w) y = y * ldw(w, w_bf16, j);
		if (b) y = y + ldw(b, b_bf16, j);
		o[j] = y;
	}
}

// LayerNorm backward, dinp: dinp += rstd·(g - mean(g) - norm·mean(g·norm))
// with g = dout·w (ACCUMULATES).
extern "C" __global__ void k_layernorm_bwd_dx(float* dinp, const float* dout, const float* inp,
		const void* w, int w_bf16, const float* mean, const float* rstd, int n, int c) {
	__shared__ double sh[32];
	int row = blockIdx.x;
	const float* x = inp + (i64)row * c;
	const float* dy = dout + (i64)row * c;
	float* dx = dinp + (i64)row * c;
	double m = (double)mean[row], r = (double)rstd[row];
	double sg = 0.0, sgn = 0.0;
	for (int j = threadIdx.x; j < c; j += blockDim.x) {
		double g = (double)dy[j];
		if (w) g *= (double)ldw(w, w_bf16, j);
		sg += g;
		sgn += g * ((double)x[j] - m);
	}
	sg = block_sum_d(sg, sh) / c;
	sgn = block_sum_d(sgn, sh) * r / c;
	for (int j = threadIdx.x; j < c; j += blockDim.x) {
		double g = (double)dy[j];
		if (w) g *= (double)ldw(w, w_bf16, j);
		dx[j] = dx[j] + (float)((g - sg - ((double)x[j] - m) * r * sgn) * r);
	}
}

// LayerNorm backward, dweight and dbias (either may be null; both
// ACCUMULATE): one thread per column, in double in row order.
extern "C" __global__ void k_layernorm_bwd_dwdb(float* dw, float* db, const float* dout, const float* inp,
		const float* mean, const float* rstd, int n, int c) {
	FOR_N(j, (i64)c) {
		double aw = 0.0, ab = 0.0;
		for (int i = 0; i < n; i++) {
			double g = (double)dout[(i64)i * c + j];
			aw += g * ((double)inp[(i64)i * c + j] - (double)mean[i]) * (double)rstd[i];
			ab += g;
		}
		if (dw) dw[j] = dw[j] + (float)aw;
		if (db) db[j] = db[j] + (float)ab;
	}
}

// rms_off is the offset of normalised vector r of a head layout: g heads
// of c elements at the start of rows ld apart (the plain norm: g = 1, ld = c).
__device__ __forceinline__ i64 rms_off(int r, int g, int c, int ld) {
	return (i64)(r / g) * ld + (i64)(r % g) * c;
}

// RMSNorm forward over rows = N·g vectors: rstd = 1/sqrt(mean(x²)+eps)
// rounded to float, out = float(x·rstd)·w.
extern "C" __global__ void k_rmsnorm_fwd(float* out, float* rstd, const float* inp, const void* w, int w_bf16,
		int rows, int g, int c, int ld, float eps) {
	__shared__ double sh[32];
	int r = blockIdx.x;
	i64 at = rms_off(r, g, c, ld);
	const float* x = inp + at;
	float* o = out + at;
	double s = 0.0;
	for (int j = threadIdx.x; j < c; j += blockDim.x) s += (double)x[j] * (double)x[j];
	float r32 = (float)(1.0 / sqrt(block_sum_d(s, sh) / c + (double)eps));
	if (threadIdx.x == 0) rstd[r] = r32;
	for (int j = threadIdx.x; j < c; j += blockDim.x) {
		float y = x[j] * r32;
		if (w) y = y * ldw(w, w_bf16, j);
		o[j] = y;
	}
}

// RMSNorm backward, dinp: rstd·g - x·rstd³·Σ(g·x)/c with g = dout·w;
// accumulate != 0 adds (RMSNormBackward), else overwrites
// (HeadRMSNormBackward; dinp may alias dout: the row is read before the
// barrier inside the reduction and each element is then read and written
// by the same thread).
extern "C" __global__ void k_rmsnorm_bwd_dx(float* dinp, const float* dout, const float* inp, const void* w, int w_bf16,
		const float* rstd, int rows, int g, int c, int ld, int accumulate) {
	__shared__ double sh[32];
	int r = blockIdx.x;
	i64 at = rms_off(r, g, c, ld);
	const float* x = inp + at;
	const float* dy = dout + at;
	float* dx = dinp + at;
	double s = (double)rstd[r];
	double sgn = 0.0;
	for (int j = threadIdx.x; j < c; j += blockDim.x) {
		double gj = (double)dy[j];
		if (w) gj *= (double)ldw(w, w_bf16, j);
		sgn += gj * (double)x[j];
	}
	sgn = block_sum_d(sgn, sh);
	double k = s * s * s * sgn / c;
	for (int j = threadIdx.x; j < c; j += blockDim.x) {
		double gj = (double)dy[j];
		if (w) gj *= (double)ldw(w, w_bf16, j);
		float d = (float)(s * gj - (double)x[j] * k);
		dx[j] = accumulate ? dx[j] + d : d;
	}
}

// RMSNorm backward, dweight[c] += Σ over vectors of dout·x·rstd (one
// thread per column, double, in vector order).
extern "C" __global__ void k_rmsnorm_bwd_dw(float* dw, const float* dout, const float* inp, const float* rstd,
		int rows, int g, int c, int ld) {
	FOR_N(j, (i64)c) {
		double a = 0.0;
		for (int r = 0; r < rows; r++) {
			i64 at = rms_off(r, g, c, ld) + j;
			a += (double)dout[at] * (double)inp[at] * (double)rstd[r];
		}
		dw[j] = dw[j] + (float)a;
	}
}

// Softmax of each row of inp[N,C]; out may alias inp.
extern "C" __global__ void k_softmax_fwd(float* out, const float* inp, int n, int c) {
	__shared__ double shd[32];
	__shared__ float shf[32];
	int row = blockIdx.x;
	const float* x = inp + (i64)row * c;
	float* o = out + (i64)row * c;
	float m = -INF_F;
	for (int j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, x[j]);
	m = block_max_f(m, shf);
	double s = 0.0;
	for (int j = threadIdx.x; j < c; j += blockDim.x) {
		float e = expf(x[j] - m);
		o[j] = e;
		s += (double)e;
	}
	float k = (float)(1.0 / block_sum_d(s, shd));
	for (int j = threadIdx.x; j < c; j += blockDim.x) o[j] = o[j] * k;
}
