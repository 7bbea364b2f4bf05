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

// Flash attention (kernels.FlashAttention) over a packed qkv[B,T,W], W =
// (NH+2·NKV)·HS: never a [T,T] buffer. The forward keeps lse[B,NH,T], the
// log-sum-exp of each query's scores; the backward recomputes the
// probabilities p = exp(s - lse) tile by tile. A fully masked query (i <
// first) scores 0 at every one of the T keys (lse = log T, p = 1/T) and
// passes no gradient to q or k. Tiles hold FLASH_TQ queries and FLASH_TK
// keys (FLASH_TQB queries in the dK/dV kernel) of up to MAX_HS elements in
// shared memory; the arithmetic is plain fp32 with double row sums, as the
// kernels above.

#define FLASH_TQ 8
#define FLASH_TK 8
#define FLASH_TQB 4
#define FLASH_THREADS 128

// flash_sees reports whether query i sees key j: every key for a fully
// masked query, else the real keys up to its position.
__device__ __forceinline__ int flash_sees(int i, int j, int first, const int* mrow) {
	if (i < first) return 1;
	return j <= i && (mrow == 0 || mrow[j] != 0);
}

// Forward: one block per (query tile, head h, batch row b); the key tiles
// of KV head h/(NH/NKV) from 0 to the tile's last position (to T when the
// tile holds a fully masked query), with the online softmax: per row the
// running max m, the running sum l (double) and the unnormalised output,
// rescaled by exp(m_old - m_new) when the max grows. Overwrites out
// [B,T,NH·HS] and lse [B,NH,T] = m + log l.
extern "C" __global__ void k_flash_fwd(float* out, float* lse, const float* qkv, const int* mask,
		int t, int nh, int nkv, int hs, float scale) {
	__shared__ float qs[FLASH_TQ * MAX_HS];  // scaled queries
	__shared__ float kv[FLASH_TK * MAX_HS];  // the key tile, then the value tile
	__shared__ float acc[FLASH_TQ * MAX_HS]; // unnormalised outputs
	__shared__ float pt[FLASH_TQ][FLASH_TK]; // scores, then exp(s - m)
	__shared__ float rmax[FLASH_TQ], alpha[FLASH_TQ];
	__shared__ double rsum[FLASH_TQ];
	__shared__ int shi;
	int i0 = blockIdx.x * FLASH_TQ, h = blockIdx.y, b = blockIdx.z;
	int g = h / (nh / nkv);
	i64 w = (i64)(nh + 2 * nkv) * hs;
	const int* mrow = mask ? mask + (i64)b * t : 0;
	int first = first_real(mrow, t, &shi);
	const float* xb = qkv + (i64)b * t * w;
	int nq = imin(FLASH_TQ, t - i0);
	for (int e = threadIdx.x; e < FLASH_TQ * hs; e += blockDim.x) {
		int r = e / hs, d = e % hs;
		qs[e] = r < nq ? xb[(i64)(i0 + r) * w + (i64)h * hs + d] * scale : 0.0f;
		acc[e] = 0.0f;
	}
	if (threadIdx.x < FLASH_TQ) {
		rmax[threadIdx.x] = -INF_F;
		rsum[threadIdx.x] = 0.0;
	}
	int nk = i0 < first ? t : i0 + nq;
	for (int j0 = 0; j0 < nk; j0 += FLASH_TK) {
		int nj = imin(FLASH_TK, nk - j0);
		__syncthreads(); // the previous tile's readers of kv and pt are done
		for (int e = threadIdx.x; e < FLASH_TK * hs; e += blockDim.x) {
			int c = e / hs, d = e % hs;
			kv[e] = c < nj ? xb[(i64)(j0 + c) * w + (i64)(nh + g) * hs + d] : 0.0f;
		}
		__syncthreads();
		for (int x = threadIdx.x; x < FLASH_TQ * FLASH_TK; x += blockDim.x) {
			int r = x / FLASH_TK, c = x % FLASH_TK, i = i0 + r, j = j0 + c;
			float s = -INF_F;
			if (r < nq && c < nj && flash_sees(i, j, first, mrow)) {
				s = 0.0f;
				if (i >= first) {
					for (int d = 0; d < hs; d++) s = s + qs[r * hs + d] * kv[c * hs + d];
				}
			}
			pt[r][c] = s;
		}
		__syncthreads();
		if (threadIdx.x < FLASH_TQ) {
			int r = threadIdx.x;
			float mo = rmax[r], mn = mo;
			for (int c = 0; c < FLASH_TK; c++) mn = fmaxf(mn, pt[r][c]);
			float al = 1.0f;
			if (mn == -INF_F) { // nothing seen yet
				for (int c = 0; c < FLASH_TK; c++) pt[r][c] = 0.0f;
			} else {
				al = mo == -INF_F ? 0.0f : expf(mo - mn);
				double sum = 0.0;
				for (int c = 0; c < FLASH_TK; c++) {
					float s = pt[r][c];
					float e = s == -INF_F ? 0.0f : expf(s - mn);
					pt[r][c] = e;
					sum += (double)e;
				}
				rsum[r] = rsum[r] * (double)al + sum;
				rmax[r] = mn;
			}
			alpha[r] = al;
		}
		__syncthreads(); // the key tile's readers are done
		for (int e = threadIdx.x; e < FLASH_TK * hs; e += blockDim.x) {
			int c = e / hs, d = e % hs;
			kv[e] = c < nj ? xb[(i64)(j0 + c) * w + (i64)(nh + nkv + g) * hs + d] : 0.0f;
		}
		__syncthreads();
		for (int e = threadIdx.x; e < FLASH_TQ * hs; e += blockDim.x) {
			int r = e / hs, d = e % hs;
			float a = acc[e] * alpha[r];
			for (int c = 0; c < FLASH_TK; c++) a = a + pt[r][c] * kv[c * hs + d];
			acc[e] = a;
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < nq * hs; e += blockDim.x) {
		int r = e / hs, d = e % hs;
		out[((i64)b * t + i0 + r) * ((i64)nh * hs) + (i64)h * hs + d] = acc[e] * (float)(1.0 / rsum[r]);
	}
	if ((int)threadIdx.x < nq) {
		int r = threadIdx.x;
		lse[((i64)b * nh + h) * t + i0 + r] = (float)((double)rmax[r] + log(rsum[r]));
	}
}

// Backward, queries: one block per (query tile, head h, batch row b), two
// sweeps over the key tiles 0..the tile's last position. The first sums
// D_i = Σ_j p_ij·(dout_i·v_j) (double; written to dsum[B,NH,T] for the
// dK/dV kernel), the second dq_i = Σ_j p_ij·(dout_i·v_j - D_i)·scale·k_j.
// A fully masked query gets dq = 0 and D = 0. Overwrites the q part of
// dqkv.
extern "C" __global__ void k_flash_bwd_dq(float* dqkv, float* dsum, const float* dout, const float* qkv, const float* lse,
		const int* mask, int t, int nh, int nkv, int hs, float scale) {
	__shared__ float qs[FLASH_TQ * MAX_HS];  // scaled queries
	__shared__ float dys[FLASH_TQ * MAX_HS]; // their output gradients
	__shared__ float ks[FLASH_TK * MAX_HS];
	__shared__ float vs[FLASH_TK * MAX_HS];
	__shared__ float dq[FLASH_TQ * MAX_HS];
	__shared__ float pt[FLASH_TQ][FLASH_TK]; // p, then ds
	__shared__ float dpt[FLASH_TQ][FLASH_TK];
	__shared__ float ls[FLASH_TQ], dl[FLASH_TQ];
	__shared__ double dacc[FLASH_TQ];
	__shared__ int shi;
	int i0 = blockIdx.x * FLASH_TQ, h = blockIdx.y, b = blockIdx.z;
	int g = h / (nh / nkv);
	i64 w = (i64)(nh + 2 * nkv) * hs, cq = (i64)nh * hs;
	const int* mrow = mask ? mask + (i64)b * t : 0;
	int first = first_real(mrow, t, &shi);
	const float* xb = qkv + (i64)b * t * w;
	int nq = imin(FLASH_TQ, t - i0);
	for (int e = threadIdx.x; e < FLASH_TQ * hs; e += blockDim.x) {
		int r = e / hs, d = e % hs;
		qs[e] = r < nq ? xb[(i64)(i0 + r) * w + (i64)h * hs + d] * scale : 0.0f;
		dys[e] = r < nq ? dout[((i64)b * t + i0 + r) * cq + (i64)h * hs + d] : 0.0f;
		dq[e] = 0.0f;
	}
	if (threadIdx.x < FLASH_TQ) {
		int r = threadIdx.x;
		ls[r] = r < nq ? lse[((i64)b * nh + h) * t + i0 + r] : 0.0f;
		dl[r] = 0.0f;
		dacc[r] = 0.0;
	}
	int nk = i0 + nq;
	for (int pass = 0; pass < 2; pass++) {
		for (int j0 = 0; j0 < nk; j0 += FLASH_TK) {
			int nj = imin(FLASH_TK, nk - j0);
			__syncthreads();
			for (int e = threadIdx.x; e < FLASH_TK * hs; e += blockDim.x) {
				int c = e / hs, d = e % hs;
				const float* row = xb + (i64)(j0 + c) * w;
				ks[e] = c < nj ? row[(i64)(nh + g) * hs + d] : 0.0f;
				vs[e] = c < nj ? row[(i64)(nh + nkv + g) * hs + d] : 0.0f;
			}
			__syncthreads();
			for (int x = threadIdx.x; x < FLASH_TQ * FLASH_TK; x += blockDim.x) {
				int r = x / FLASH_TK, c = x % FLASH_TK, i = i0 + r, j = j0 + c;
				float p = 0.0f, dp = 0.0f;
				if (r < nq && c < nj && i >= first && flash_sees(i, j, first, mrow)) {
					float s = 0.0f;
					for (int d = 0; d < hs; d++) s = s + qs[r * hs + d] * ks[c * hs + d];
					p = expf(s - ls[r]);
					for (int d = 0; d < hs; d++) dp = dp + dys[r * hs + d] * vs[c * hs + d];
				}
				pt[r][c] = pass == 0 ? p : p * (dp - dl[r]) * scale;
				dpt[r][c] = dp;
			}
			__syncthreads();
			if (pass == 0) {
				if (threadIdx.x < FLASH_TQ) {
					int r = threadIdx.x;
					for (int c = 0; c < FLASH_TK; c++) dacc[r] += (double)pt[r][c] * (double)dpt[r][c];
				}
			} else {
				for (int e = threadIdx.x; e < FLASH_TQ * hs; e += blockDim.x) {
					int r = e / hs, d = e % hs;
					float a = dq[e];
					for (int c = 0; c < FLASH_TK; c++) a = a + pt[r][c] * ks[c * hs + d];
					dq[e] = a;
				}
			}
		}
		__syncthreads();
		if (pass == 0 && threadIdx.x < FLASH_TQ) {
			int r = threadIdx.x;
			dl[r] = (float)dacc[r];
			if (r < nq) dsum[((i64)b * nh + h) * t + i0 + r] = dl[r];
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < nq * hs; e += blockDim.x) {
		int r = e / hs, d = e % hs;
		dqkv[((i64)b * t + i0 + r) * w + (i64)h * hs + d] = dq[e];
	}
}

// Backward, keys and values: one block per (key tile, KV head g, batch
// row b), over the NH/NKV query heads of the group and the query tiles
// that see the key tile (queries at or after its first key, and the fully
// masked ones): dv_j = Σ_i p_ij·dout_i, dk_j = Σ_i ds_ij·q_i with ds_ij =
// p_ij·(dout_i·v_j - D_i)·scale (0 for a fully masked query, whose p_ij is
// exp(-lse_i) = 1/T at every key). Overwrites the k and v parts of dqkv.
extern "C" __global__ void k_flash_bwd_dkdv(float* dqkv, const float* dout, const float* qkv, const float* lse,
		const float* dsum, const int* mask, int t, int nh, int nkv, int hs, float scale) {
	__shared__ float ks[FLASH_TK * MAX_HS];
	__shared__ float vs[FLASH_TK * MAX_HS];
	__shared__ float dk[FLASH_TK * MAX_HS];
	__shared__ float dv[FLASH_TK * MAX_HS];
	__shared__ float qs[FLASH_TQB * MAX_HS];  // queries (unscaled)
	__shared__ float dys[FLASH_TQB * MAX_HS]; // their output gradients
	__shared__ float pt[FLASH_TQB][FLASH_TK], dst[FLASH_TQB][FLASH_TK];
	__shared__ float ls[FLASH_TQB], dl[FLASH_TQB];
	__shared__ int shi;
	int j0 = blockIdx.x * FLASH_TK, g = blockIdx.y, b = blockIdx.z;
	int rep = nh / nkv;
	i64 w = (i64)(nh + 2 * nkv) * hs, cq = (i64)nh * hs;
	const int* mrow = mask ? mask + (i64)b * t : 0;
	int first = first_real(mrow, t, &shi);
	const float* xb = qkv + (i64)b * t * w;
	int nj = imin(FLASH_TK, t - j0);
	for (int e = threadIdx.x; e < FLASH_TK * hs; e += blockDim.x) {
		int c = e / hs, d = e % hs;
		const float* row = xb + (i64)(j0 + c) * w;
		ks[e] = c < nj ? row[(i64)(nh + g) * hs + d] : 0.0f;
		vs[e] = c < nj ? row[(i64)(nh + nkv + g) * hs + d] : 0.0f;
		dk[e] = 0.0f;
		dv[e] = 0.0f;
	}
	for (int h = g * rep; h < (g + 1) * rep; h++) {
		for (int i0 = 0; i0 < t; i0 += FLASH_TQB) {
			int nq = imin(FLASH_TQB, t - i0);
			if (i0 + nq - 1 < j0 && i0 >= first) continue; // no query of the tile sees these keys
			__syncthreads();
			for (int e = threadIdx.x; e < FLASH_TQB * hs; e += blockDim.x) {
				int r = e / hs, d = e % hs;
				qs[e] = r < nq ? xb[(i64)(i0 + r) * w + (i64)h * hs + d] : 0.0f;
				dys[e] = r < nq ? dout[((i64)b * t + i0 + r) * cq + (i64)h * hs + d] : 0.0f;
			}
			if (threadIdx.x < FLASH_TQB) {
				int r = threadIdx.x;
				ls[r] = r < nq ? lse[((i64)b * nh + h) * t + i0 + r] : 0.0f;
				dl[r] = r < nq ? dsum[((i64)b * nh + h) * t + i0 + r] : 0.0f;
			}
			__syncthreads();
			for (int x = threadIdx.x; x < FLASH_TQB * FLASH_TK; x += blockDim.x) {
				int r = x / FLASH_TK, c = x % FLASH_TK, i = i0 + r, j = j0 + c;
				float p = 0.0f, ds = 0.0f;
				if (r < nq && c < nj && flash_sees(i, j, first, mrow)) {
					if (i < first) {
						p = expf(0.0f - ls[r]);
					} else {
						float s = 0.0f, dp = 0.0f;
						for (int d = 0; d < hs; d++) s = s + (qs[r * hs + d] * scale) * ks[c * hs + d];
						p = expf(s - ls[r]);
						for (int d = 0; d < hs; d++) dp = dp + dys[r * hs + d] * vs[c * hs + d];
						ds = p * (dp - dl[r]) * scale;
					}
				}
				pt[r][c] = p;
				dst[r][c] = ds;
			}
			__syncthreads();
			for (int e = threadIdx.x; e < FLASH_TK * hs; e += blockDim.x) {
				int c = e / hs, d = e % hs;
				float a = dv[e], k2 = dk[e];
				for (int r = 0; r < FLASH_TQB; r++) {
					a = a + pt[r][c] * dys[r * hs + d];
					k2 = k2 + dst[r][c] * qs[r * hs + d];
				}
				dv[e] = a;
				dk[e] = k2;
			}
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < nj * hs; e += blockDim.x) {
		int c = e / hs, d = e % hs;
		float* row = dqkv + ((i64)b * t + j0 + c) * w;
		row[(i64)(nh + g) * hs + d] = dk[e];
		row[(i64)(nh + nkv + g) * hs + d] = dv[e];
	}
}

// Flash decoding (kernels.Ops AttentionDecode, GQAAttentionDecode): tq new
// queries at positions t0..t0+tq-1 against a KV cache that already holds
// their keys and values (k_kv_cache_write runs first), nk = t0+tq keys,
// never a [tq, nk] buffer. One block per (tile of DEC_TQ queries, key
// split, head h, batch row b): the key and value tiles of DEC_TK positions
// staged in shared memory, the online softmax of k_flash_fwd. Query i sees
// the real keys 0..t0+i (causal within the new tokens, mask[B, mstride]
// null: all real); a query before the row's first real key among the nk
// (a left-padding position) scores 0 at all nk keys, the uniform average
// of kernels/cpu.AttentionDecode. Layouts as k_attn_fwd: q of (b, i, h) is
// q + b·q_bstride + i·q_rstride + h·hs; key/value j of KV head g is
// k + b·kv_bstride + g·kv_hstride + j·kv_pstride (OPT's [B,Tmax,C] and the
// head-major [B,NKV,Tmax,HS] are both such strides); out is [B, tq,
// o_rstride] with head h at column h·hs.
//
// Split-K (nsplit > 1, for few queries over a long cache): blockIdx.x =
// tile + ntiles·s, and split s covers keys s·chunk .. s·chunk+chunk-1 of
// those its tile needs. Each split writes its unnormalised output, running
// max and sum to part instead of out (row r = (b·nh + h)·tq + i of split s
// at index s·B·nh·tq + r: the output at part[idx·hs ..], max and sum at
// part[nsplit·B·nh·tq·hs + 2·idx ..]); k_flash_decode_combine merges them.
// An empty split (its keys past the tile's last one) writes max -inf, sum 0.

#define DEC_TQ 8
#define DEC_TK 16
#define DEC_THREADS 128

extern "C" __global__ void k_flash_decode(float* out, float* part, const float* q, const float* k, const float* v,
		const int* mask, int tq, int t0, int nh, int nkv, int hs,
		i64 q_bstride, int q_rstride, i64 kv_bstride, i64 kv_hstride, i64 kv_pstride,
		int o_rstride, int mstride, int nsplit, int chunk, float scale) {
	__shared__ float qs[DEC_TQ * MAX_HS];  // scaled queries
	__shared__ float kv[DEC_TK * MAX_HS];  // the key tile, then the value tile
	__shared__ float acc[DEC_TQ * MAX_HS]; // unnormalised outputs
	__shared__ float pt[DEC_TQ][DEC_TK];   // scores, then exp(s - m)
	__shared__ float rmax[DEC_TQ], alpha[DEC_TQ];
	__shared__ double rsum[DEC_TQ];
	__shared__ int shi;
	int ntiles = (tq + DEC_TQ - 1) / DEC_TQ;
	int tile = blockIdx.x % ntiles, s = blockIdx.x / ntiles;
	int i0 = tile * DEC_TQ, h = blockIdx.y, b = blockIdx.z;
	int g = h / (nh / nkv);
	int nk = t0 + tq;
	const int* mrow = mask ? mask + (i64)b * mstride : 0;
	int first = first_real(mrow, nk, &shi);
	int nq = imin(DEC_TQ, tq - i0);
	const float* qb = q + (i64)b * q_bstride + (i64)h * hs;
	const float* kb = k + (i64)b * kv_bstride + (i64)g * kv_hstride;
	const float* vb = v + (i64)b * kv_bstride + (i64)g * kv_hstride;
	for (int e = threadIdx.x; e < DEC_TQ * hs; e += blockDim.x) {
		int r = e / hs, d = e % hs;
		qs[e] = r < nq ? qb[(i64)(i0 + r) * q_rstride + d] * scale : 0.0f;
		acc[e] = 0.0f;
	}
	if (threadIdx.x < DEC_TQ) {
		rmax[threadIdx.x] = -INF_F;
		rsum[threadIdx.x] = 0.0;
	}
	int p0 = t0 + i0;                             // the tile's first position
	int kend = p0 < first ? nk : p0 + nq;         // the keys the tile needs
	int jlo = s * chunk, jhi = imin(kend, jlo + chunk);
	for (int j0 = jlo; j0 < jhi; j0 += DEC_TK) {
		int nj = imin(DEC_TK, jhi - j0);
		__syncthreads(); // the previous tile's readers of kv and pt are done
		for (int e = threadIdx.x; e < DEC_TK * hs; e += blockDim.x) {
			int c = e / hs, d = e % hs;
			kv[e] = c < nj ? kb[(i64)(j0 + c) * kv_pstride + d] : 0.0f;
		}
		__syncthreads();
		for (int x = threadIdx.x; x < DEC_TQ * DEC_TK; x += blockDim.x) {
			int r = x / DEC_TK, c = x % DEC_TK, p = p0 + r, j = j0 + c;
			float sc = -INF_F;
			if (r < nq && c < nj && flash_sees(p, j, first, mrow)) {
				sc = 0.0f;
				if (p >= first) {
					for (int d = 0; d < hs; d++) sc = sc + qs[r * hs + d] * kv[c * hs + d];
				}
			}
			pt[r][c] = sc;
		}
		__syncthreads();
		if (threadIdx.x < DEC_TQ) {
			int r = threadIdx.x;
			float mo = rmax[r], mn = mo;
			for (int c = 0; c < DEC_TK; c++) mn = fmaxf(mn, pt[r][c]);
			float al = 1.0f;
			if (mn == -INF_F) { // nothing seen yet
				for (int c = 0; c < DEC_TK; c++) pt[r][c] = 0.0f;
			} else {
				al = mo == -INF_F ? 0.0f : expf(mo - mn);
				double sum = 0.0;
				for (int c = 0; c < DEC_TK; c++) {
					float sc = pt[r][c];
					float e = sc == -INF_F ? 0.0f : expf(sc - mn);
					pt[r][c] = e;
					sum += (double)e;
				}
				rsum[r] = rsum[r] * (double)al + sum;
				rmax[r] = mn;
			}
			alpha[r] = al;
		}
		__syncthreads(); // the key tile's readers are done
		for (int e = threadIdx.x; e < DEC_TK * hs; e += blockDim.x) {
			int c = e / hs, d = e % hs;
			kv[e] = c < nj ? vb[(i64)(j0 + c) * kv_pstride + d] : 0.0f;
		}
		__syncthreads();
		for (int e = threadIdx.x; e < DEC_TQ * hs; e += blockDim.x) {
			int r = e / hs, d = e % hs;
			float a = acc[e] * alpha[r];
			for (int c = 0; c < DEC_TK; c++) a = a + pt[r][c] * kv[c * hs + d];
			acc[e] = a;
		}
	}
	__syncthreads();
	if (nsplit == 1) {
		for (int e = threadIdx.x; e < nq * hs; e += blockDim.x) {
			int r = e / hs, d = e % hs;
			out[((i64)b * tq + i0 + r) * o_rstride + (i64)h * hs + d] = acc[e] * (float)(1.0 / rsum[r]);
		}
		return;
	}
	i64 rows = (i64)gridDim.z * nh * tq;
	i64 row0 = (i64)s * rows + ((i64)b * nh + h) * tq + i0;
	for (int e = threadIdx.x; e < nq * hs; e += blockDim.x) part[row0 * hs + e] = acc[e];
	if ((int)threadIdx.x < nq) {
		int r = threadIdx.x;
		float* ml = part + (i64)nsplit * rows * hs + 2 * (row0 + r);
		ml[0] = rmax[r];
		ml[1] = (float)rsum[r];
	}
}

// Merges the nsplit partial results of k_flash_decode (part's layout is
// described there) into out[B, tq, o_rstride]: with M the largest split
// max, out = Σ_s acc_s·e^(m_s-M) / Σ_s l_s·e^(m_s-M) (double sums). b is
// the batch size; splits with sum 0 saw no key and add nothing.
extern "C" __global__ void k_flash_decode_combine(float* out, const float* part, int b, int tq, int nh, int hs,
		int o_rstride, int nsplit) {
	i64 rows = (i64)b * nh * tq;
	const float* ml = part + (i64)nsplit * rows * hs;
	FOR_N(x, rows * hs) {
		i64 row = x / hs, d = x % hs;
		float m = -INF_F;
		for (int s = 0; s < nsplit; s++) m = fmaxf(m, ml[2 * ((i64)s * rows + row)]);
		double num = 0.0, den = 0.0;
		for (int s = 0; s < nsplit; s++) {
			i64 idx = (i64)s * rows + row;
			float l = ml[2 * idx + 1];
			if (l == 0.0f) continue;
			double f = (double)expf(ml[2 * idx] - m);
			num += f * (double)part[idx * hs + d];
			den += f * (double)l;
		}
		i64 bi = row / ((i64)nh * tq), h = (row / tq) % nh, i = row % tq;
		out[(bi * tq + i) * o_rstride + h * hs + d] = (float)(num / den);
	}
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
