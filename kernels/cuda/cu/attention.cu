// Causal attention (multi-head and grouped-query), the straightforward
// version: one block per (query, head, batch row), scores kept in the
// probability row it must write anyway. HS <= MAX_HS (the Go side checks).
// Hugging Face's eager semantics (kernels/cpu/attention.go): masked keys
// get probability 0; a query whose keys are all padding (position <
// the row's first real token) attends uniformly to all nk keys and passes
// no gradient to q or k.

#define MAX_HS 256
#define ATT_THREADS 128

// q of (b, i, h) is q + b·q_bstride + i·q_rstride + h·hs; key/value j of
// KV head g is k + b·kv_bstride + g·kv_hstride + j·kv_pstride. Query i is
// at position t0+i and sees keys 0..t0+i of nk = t0+tq; mask is
// [B, mstride] (null: all real). att is [B, NH, tq, nk], out [B, tq,
// o_rstride] with head h at column h·hs.
extern "C" __global__ void k_attn_fwd(float* out, float* att, const float* q, const float* k, const float* v,
		const int* mask, int tq, int t0, int nk, int nh, int nkv, int hs,
		i64 q_bstride, int q_rstride, i64 kv_bstride, i64 kv_hstride, i64 kv_pstride,
		int o_rstride, int mstride, float scale) {
	__shared__ float qs[MAX_HS];
	__shared__ float shf[32];
	__shared__ double shd[32];
	__shared__ int shi;
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	int g = h / (nh / nkv);
	int p = t0 + i;
	const int* mrow = mask ? mask + (i64)b * mstride : 0;
	int first = first_real(mrow, nk, &shi);
	float* arow = att + (((i64)b * nh + h) * tq + i) * nk;
	float* o = out + ((i64)b * tq + i) * o_rstride + (i64)h * hs;
	const float* kb = k + (i64)b * kv_bstride + (i64)g * kv_hstride;
	const float* vb = v + (i64)b * kv_bstride + (i64)g * kv_hstride;
	int nkeys;
	if (p < first) {
		// fully masked: uniform over all nk keys
		float u = 1.0f / (float)nk;
		for (int j = threadIdx.x; j < nk; j += blockDim.x) arow[j] = u;
		nkeys = nk;
	} else {
		const float* qp = q + (i64)b * q_bstride + (i64)i * q_rstride + (i64)h * hs;
		for (int d = threadIdx.x; d < hs; d += blockDim.x) qs[d] = qp[d] * scale;
		__syncthreads();
		float m = -INF_F;
		for (int j = threadIdx.x; j < nk; j += blockDim.x) {
			float s = -INF_F;
			if (j <= p && (mrow == 0 || mrow[j] != 0)) {
				const float* kj = kb + (i64)j * kv_pstride;
				float acc = 0.0f;
				for (int d = 0; d < hs; d++) acc = acc + qs[d] * kj[d];
				s = acc;
			}
			arow[j] = s;
			m = fmaxf(m, s);
		}
		m = block_max_f(m, shf);
		double sum = 0.0;
		for (int j = threadIdx.x; j < nk; j += blockDim.x) {
			float s = arow[j];
			float e = s == -INF_F ? 0.0f : expf(s - m);
			arow[j] = e;
			sum += (double)e;
		}
		float kf = (float)(1.0 / block_sum_d(sum, shd));
		for (int j = threadIdx.x; j < nk; j += blockDim.x) arow[j] = arow[j] * kf;
		nkeys = p + 1;
	}
	__syncthreads();
	for (int d = threadIdx.x; d < hs; d += blockDim.x) {
		float acc = 0.0f;
		for (int j = 0; j < nkeys; j++) acc = acc + arow[j] * vb[(i64)j * kv_pstride + d];
		o[d] = acc;
	}
}

// Backward, queries: one block per (i, h, b) of a packed qkv[B,T,W], W =
// (NH+2·NKV)·HS. dsum[b,h,i] = Σ_j p_j·(dout_i·v_j) (double, rounded);
// dq_i = Σ_j p_j·(dout_i·v_j - dsum)·scale·k_j, zero for a fully masked
// row. Overwrites the q part of dqkv.
extern "C" __global__ void k_attn_bwd_q(float* dqkv, float* dsum, const float* dout, const float* qkv, const float* att,
		const int* mask, int t, int nh, int nkv, int hs, float scale) {
	__shared__ float dy[MAX_HS];
	__shared__ float ds[ATT_THREADS];
	__shared__ double shd[32];
	__shared__ int shi;
	int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
	int g = h / (nh / nkv);
	i64 w = (i64)(nh + 2 * nkv) * hs;
	const int* mrow = mask ? mask + (i64)b * t : 0;
	int first = first_real(mrow, t, &shi);
	float* dq = dqkv + ((i64)b * t + i) * w + (i64)h * hs;
	const float* kb = qkv + (i64)b * t * w + (i64)(nh + g) * hs;
	const float* vb = qkv + (i64)b * t * w + (i64)(nh + nkv + g) * hs;
	const float* arow = att + (((i64)b * nh + h) * t + i) * t;
	if (i < first) {
		for (int d = threadIdx.x; d < hs; d += blockDim.x) dq[d] = 0.0f;
		if (threadIdx.x == 0) dsum[((i64)b * nh + h) * t + i] = 0.0f;
		return;
	}
	const float* dyp = dout + ((i64)b * t + i) * ((i64)nh * hs) + (i64)h * hs;
	for (int d = threadIdx.x; d < hs; d += blockDim.x) dy[d] = dyp[d];
	__syncthreads();
	double s = 0.0;
	for (int j = threadIdx.x; j <= i; j += blockDim.x) {
		float pj = arow[j];
		if (pj != 0.0f) {
			const float* vj = vb + (i64)j * w;
			float dp = 0.0f;
			for (int d = 0; d < hs; d++) dp = dp + dy[d] * vj[d];
			s += (double)pj * (double)dp;
		}
	}
	float D = (float)block_sum_d(s, shd);
	if (threadIdx.x == 0) dsum[((i64)b * nh + h) * t + i] = D;
	float acc0 = 0.0f, acc1 = 0.0f; // dq[d0], dq[d1] (hs <= 2·ATT_THREADS)
	int d0 = threadIdx.x, d1 = threadIdx.x + blockDim.x;
	for (int base = 0; base <= i; base += blockDim.x) {
		int j = base + threadIdx.x;
		float dsj = 0.0f;
		if (j <= i) {
			float pj = arow[j];
			if (pj != 0.0f) {
				const float* vj = vb + (i64)j * w;
				float dp = 0.0f;
				for (int d = 0; d < hs; d++) dp = dp + dy[d] * vj[d];
				dsj = pj * (dp - D) * scale;
			}
		}
		ds[threadIdx.x] = dsj;
		__syncthreads();
		int cnt = imin((int)blockDim.x, i + 1 - base);
		for (int jj = 0; jj < cnt; jj++) {
			float x = ds[jj];
			const float* kj = kb + (i64)(base + jj) * w;
			if (d0 < hs) acc0 = acc0 + x * kj[d0];
			if (d1 < hs) acc1 = acc1 + x * kj[d1];
		}
		__syncthreads();
	}
	if (d0 < hs) dq[d0] = acc0;
	if (d1 < hs) dq[d1] = acc1;
}

// Backward, keys and values: one block per (j, g, b), key j of KV head g,
// summing over the NH/NKV query heads of the group and every query i:
// dv_j = Σ p_ij·dout_i, dk_j = Σ ds_ij·q_i with ds_ij = p_ij·(dout_i·v_j -
// dsum_i)·scale (0 for a fully masked query). Overwrites the k and v parts.
extern "C" __global__ void k_attn_bwd_kv(float* dqkv, const float* dout, const float* qkv, const float* att,
		const float* dsum, const int* mask, int t, int nh, int nkv, int hs, float scale) {
	__shared__ float vj[MAX_HS];
	__shared__ float ps[ATT_THREADS];
	__shared__ float ds[ATT_THREADS];
	__shared__ int hi_[ATT_THREADS];
	__shared__ int shi;
	int j = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
	int rep = nh / nkv;
	i64 w = (i64)(nh + 2 * nkv) * hs;
	i64 cq = (i64)nh * hs;
	const int* mrow = mask ? mask + (i64)b * t : 0;
	int first = first_real(mrow, t, &shi);
	const float* xb = qkv + (i64)b * t * w;
	const float* vp = xb + (i64)j * w + (i64)(nh + nkv + g) * hs;
	for (int d = threadIdx.x; d < hs; d += blockDim.x) vj[d] = vp[d];
	__syncthreads();
	float dk0 = 0.0f, dk1 = 0.0f, dv0 = 0.0f, dv1 = 0.0f;
	int pairs = rep * t; // (r, i) with query head h = g·rep + r
	for (int base = 0; base < pairs; base += blockDim.x) {
		int x = base + threadIdx.x;
		float px = 0.0f, dsx = 0.0f;
		int hx = 0;
		if (x < pairs) {
			int r = x / t, i = x % t;
			int h = g * rep + r;
			hx = h * t + i;
			px = att[(((i64)b * nh + h) * t + i) * t + j];
			if (px != 0.0f && i >= first) {
				const float* dyi = dout + ((i64)b * t + i) * cq + (i64)h * hs;
				float dp = 0.0f;
				for (int d = 0; d < hs; d++) dp = dp + dyi[d] * vj[d];
				dsx = px * (dp - dsum[((i64)b * nh + h) * t + i]) * scale;
			}
		}
		ps[threadIdx.x] = px;
		ds[threadIdx.x] = dsx;
		hi_[threadIdx.x] = hx;
		__syncthreads();
		int cnt = imin((int)blockDim.x, pairs - base);
		for (int y = 0; y < cnt; y++) {
			float py = ps[y];
			if (py == 0.0f) continue;
			float dsy = ds[y];
			int h = hi_[y] / t, i = hi_[y] % t;
			const float* qi = xb + (i64)i * w + (i64)h * hs;
			const float* dyi = dout + ((i64)b * t + i) * cq + (i64)h * hs;
			int d0 = threadIdx.x, d1 = threadIdx.x + blockDim.x;
			if (d0 < hs) {
				dk0 = dk0 + dsy * qi[d0];
				dv0 = dv0 + py * dyi[d0];
			}
			if (d1 < hs) {
				dk1 = dk1 + dsy * qi[d1];
				dv1 = dv1 + py * dyi[d1];
			}
		}
		__syncthreads();
	}
	float* dk = dqkv + ((i64)b * t + j) * w + (i64)(nh + g) * hs;
	float* dv = dqkv + ((i64)b * t + j) * w + (i64)(nh + nkv + g) * hs;
	int d0 = threadIdx.x, d1 = threadIdx.x + blockDim.x;
	if (d0 < hs) { dk[d0] = dk0; dv[d0] = dv0; }
	if (d1 < hs) { dk[d1] = dk1; dv[d1] = dv1; }
}

// Writes the key and value heads of qkv[B,tn,W] into the caches at
// positions t0..: element (b, g, pos, d) of a cache is at b·c_bstride +
// g·c_hstride + pos·c_pstride + d.
extern "C" __global__ void k_kv_cache_write(float* kc, float* vc, const float* qkv, int b, int tn, int t0,
		int nh, int nkv, int hs, i64 c_bstride, i64 c_hstride, i64 c_pstride) {
	i64 w = (i64)(nh + 2 * nkv) * hs;
	FOR_N(x, (i64)b * tn * nkv * hs) {
		i64 d = x % hs, g = (x / hs) % nkv, i = (x / ((i64)hs * nkv)) % tn, bi = x / ((i64)hs * nkv * tn);
		const float* src = qkv + (bi * tn + i) * w;
		i64 at = bi * c_bstride + g * c_hstride + (t0 + i) * c_pstride + d;
		kc[at] = src[(nh + g) * hs + d];
		vc[at] = src[(nh + nkv + g) * hs + d];
	}
}

// RoPE in place on the first nh heads of hs elements of rows x[N,ld]
// (rotate_half pairs i, i+hs/2; cos/sin [maxPos, hs/2]); inverse != 0 is
// the transpose (the backward). A position outside the table gives NaNs.
extern "C" __global__ void k_rope(float* x, const int* pos, const float* cosb, const float* sinb,
		int n, int nh, int hs, int ld, int max_pos, int inverse) {
	int h2 = hs / 2;
	FOR_N(e, (i64)n * nh * h2) {
		i64 i = e % h2, k = (e / h2) % nh, r = e / ((i64)h2 * nh);
		int p = pos[r];
		float* a = x + r * ld + k * hs;
		if (p < 0 || p >= max_pos) {
			a[i] = NAN_F;
			a[i + h2] = NAN_F;
			continue;
		}
		float c = cosb[(i64)p * h2 + i], s = sinb[(i64)p * h2 + i];
		float a1 = a[i], a2 = a[i + h2];
		if (inverse) {
			a[i] = a1 * c + a2 * s;
			a[i + h2] = a2 * c - a1 * s;
		} else {
			a[i] = a1 * c - a2 * s;
			a[i + h2] = a2 * c + a1 * s;
		}
	}
}
