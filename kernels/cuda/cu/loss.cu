// Losses over logits[N,V]: one block per row, log-sum-exp with the row
// max, the exponentials summed in double.

// row_lse returns m and Σ exp(x-m) of a row (every thread).
__device__ void row_lse(const float* x, int v, float* m_out, double* s_out, float* shf, double* shd) {
	float m = -INF_F;
	for (int j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, x[j]);
	m = block_max_f(m, shf);
	double s = 0.0;
	for (int j = threadIdx.x; j < v; j += blockDim.x) s += (double)expf(x[j] - m);
	*s_out = block_sum_d(s, shd);
	*m_out = m;
}

// losses[i] = -log softmax(logits[i])[targets[i]], 0 for ignored rows,
// NaN for a target outside [0,V).
extern "C" __global__ void k_crossentropy_fwd(float* losses, const float* logits, const int* targets, int n, int v, int ignore) {
	__shared__ double shd[32];
	__shared__ float shf[32];
	int row = blockIdx.x;
	int t = targets[row];
	if (t == ignore) {
		if (threadIdx.x == 0) losses[row] = 0.0f;
		return;
	}
	const float* x = logits + (i64)row * v;
	float m;
	double s;
	row_lse(x, v, &m, &s, shf, shd);
	if (threadIdx.x == 0) losses[row] = (t >= 0 && t < v) ? (float)((double)m + log(s) - (double)x[t]) : NAN_F;
}

// dlogits[i,:] = dlosses[i]·(softmax - onehot(target)), zero for ignored
// rows; dlogits may alias logits.
extern "C" __global__ void k_crossentropy_bwd(float* dlogits, const float* dlosses, const float* logits, const int* targets,
		int n, int v, int ignore) {
	__shared__ double shd[32];
	__shared__ float shf[32];
	int row = blockIdx.x;
	int t = targets[row];
	float* dx = dlogits + (i64)row * v;
	if (t == ignore) {
		for (int j = threadIdx.x; j < v; j += blockDim.x) dx[j] = 0.0f;
		return;
	}
	const float* x = logits + (i64)row * v;
	float m = -INF_F;
	for (int j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, x[j]);
	m = block_max_f(m, shf);
	double s = 0.0;
	for (int j = threadIdx.x; j < v; j += blockDim.x) {
		float e = expf(x[j] - m);
		dx[j] = e;
		s += (double)e;
	}
	s = block_sum_d(s, shd);
	float g = dlosses[row];
	float k = (float)((double)g / s);
	bool ok = t >= 0 && t < v;
	for (int j = threadIdx.x; j < v; j += blockDim.x) dx[j] = ok ? dx[j] * k : NAN_F;
	__syncthreads();
	if (threadIdx.x == 0 && ok) dx[t] = dx[t] - g;
}

// out[i] = log softmax(logits[i])[ids[i]] (NaN for an id outside [0,V)).
extern "C" __global__ void k_logprob_gather(float* out, const float* logits, const int* ids, int n, int v) {
	__shared__ double shd[32];
	__shared__ float shf[32];
	int row = blockIdx.x;
	int t = ids[row];
	const float* x = logits + (i64)row * v;
	float m;
	double s;
	row_lse(x, v, &m, &s, shf, shd);
	if (threadIdx.x == 0) out[row] = (t >= 0 && t < v) ? (float)((double)x[t] - (double)m - log(s)) : NAN_F;
}
