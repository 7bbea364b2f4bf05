package kernels

// Ops are the numerical operations of a backend. Unless a comment says
// otherwise every buffer is F32, contiguous and row-major, and index buffers
// (ids, targets, mask) are I32. Optional buffers may be nil where noted.
// Weight operands may also be BF16, as the package doc's Precision section
// says: a BF16 operand makes Gemm, MatmulForward and MatmulBackward bf16
// matmuls (inputs rounded to bf16, fp32 accumulation).
type Ops interface {
	// Gemm computes C = alpha·op(A)·op(B) + beta·C where op(A) is [m,k] and
	// op(B) is [k,n]; op(X) is X or Xᵀ as transA/transB say. A is stored
	// [m,lda] (transA false) or [k,lda] (transA true), B is [k,ldb] or
	// [n,ldb], C is [m,ldc]. With beta == 0, C is overwritten (NaNs in C are
	// not propagated).
	Gemm(transA, transB bool, m, n, k int, alpha float32, a Buffer, lda int, b Buffer, ldb int, beta float32, c Buffer, ldc int)

	// MatmulForward: out[N,OC] = inp[N,C]·weight[OC,C]ᵀ + bias[OC].
	// bias may be nil. weight and bias are F32, or BF16 (a bf16 matmul).
	MatmulForward(out, inp, weight, bias Buffer, n, c, oc int)
	// MatmulBackward, for MatmulForward:
	// dinp[N,C] = dout·weight (overwrites; skipped when dinp is nil),
	// dweight[OC,C] += doutᵀ·inp (skipped when nil),
	// dbias[OC] += Σ_rows dout (skipped when nil).
	MatmulBackward(dinp, dweight, dbias, dout, inp, weight Buffer, n, c, oc int)

	// AddBias: out[N,C] += bias[C] (F32 or BF16) for every row.
	AddBias(out, bias Buffer, n, c int)
	// Add: out[i] = a[i] + b[i] for i < n. out may alias a or b. b may be
	// BF16 (widened; the EMA of bf16 weights).
	Add(out, a, b Buffer, n int)
	// Scale: x[i] *= s for i < n.
	Scale(x Buffer, s float32, n int)

	// EmbeddingForward: out[N,C] = table[ids[i], :] for each row i; the
	// table is F32 or BF16 (widened).
	EmbeddingForward(out, ids, table Buffer, n, c int)
	// EmbeddingBackward: dtable[ids[i], :] += dout[i, :] (accumulates).
	EmbeddingBackward(dtable, dout, ids Buffer, n, c int)

	// LayerNormForward normalises each row of inp[N,C] with eps:
	// out = (inp-mean)·rstd·weight + bias, saving mean[N] and rstd[N].
	// weight and bias may be nil (no elementwise affine), F32 or BF16.
	LayerNormForward(out, mean, rstd, inp, weight, bias Buffer, n, c int, eps float32)
	// LayerNormBackward: dinp[N,C] += (accumulates: the residual stream),
	// dweight[C] += and dbias[C] += (skipped when nil).
	LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd Buffer, n, c int)

	// ReLUForward: out = max(inp, 0) over n elements; out may alias inp.
	ReLUForward(out, inp Buffer, n int)
	// ReLUBackward: dinp = dout where out > 0, else 0 (overwrites; dinp may
	// alias dout). out is ReLUForward's output.
	ReLUBackward(dinp, dout, out Buffer, n int)
	// GELUForward: out = inp·Φ(inp), the exact (erf) GELU; out may alias inp.
	GELUForward(out, inp Buffer, n int)
	// GELUBackward: dinp = dout·GELU'(inp) (overwrites; may alias dout).
	GELUBackward(dinp, dout, inp Buffer, n int)

	// SoftmaxForward: out[N,C] = softmax of each row of inp[N,C]; out may
	// alias inp.
	SoftmaxForward(out, inp Buffer, n, c int)

	// AttentionForward is causal multi-head self-attention. qkv[B,T,3C] holds
	// q, k and v side by side (C = NH·HS; head h uses columns h·HS..(h+1)·HS
	// of each part); q is scaled by HS^-0.5 inside the kernel. It writes
	// out[B,T,C] and saves the probabilities att[B,NH,T,T]. mask[B,T] may be
	// nil (see the package doc for masked rows).
	AttentionForward(out, att, qkv, mask Buffer, b, t, nh, hs int)
	// AttentionBackward: dqkv[B,T,3C] = gradient of AttentionForward
	// (overwrites). att and mask are the forward's.
	AttentionBackward(dqkv, dout, qkv, att, mask Buffer, b, t, nh, hs int)
	// AttentionDecode runs attention for tn new positions t0..t0+tn-1 against a
	// KV cache. It first writes the k and v parts of qkv[B,tn,3C] into
	// kcache and vcache [B,Tmax,C] at rows t0.., then each new query attends
	// causally to cache rows 0..its position whose mask[B,Tmax] entry is 1.
	// out is [B,tn,C]. With t0 = 0 and tn = T it equals AttentionForward.
	AttentionDecode(out, qkv, kcache, vcache, mask Buffer, b, tn, t0, tmax, nh, hs int)

	// The LLaMA family (Llama, Qwen2/3, Mistral). NKV is the number of key
	// and value heads (NH % NKV == 0, query head h uses KV head
	// h/(NH/NKV), Hugging Face's repeat_kv), HS is head_dim (independent of
	// C), and F is intermediate_size.

	// RMSNormForward normalises each row of inp[N,C] as Hugging Face's
	// LlamaRMSNorm does in fp32: out = (inp·rstd)·weight with rstd =
	// 1/sqrt(mean(inp²)+eps), the product inp·rstd rounded to fp32 before
	// the weight multiplies it. It overwrites out and rstd[N]. weight[C] may
	// be nil (no affine), F32 or BF16 (widened).
	RMSNormForward(out, rstd, inp, weight Buffer, n, c int, eps float32)
	// RMSNormBackward, for RMSNormForward given its rstd: dinp[N,C] +=
	// rstd·(g - norm·mean(g·norm)) with g = dout·weight and norm =
	// inp·rstd (ACCUMULATES: the residual stream, as LayerNormBackward),
	// dweight[C] += Σ_rows dout·norm (accumulates; skipped when nil).
	RMSNormBackward(dinp, dweight, dout, inp, weight, rstd Buffer, n, c int)
	// HeadRMSNormForward is RMSNormForward over the g heads of c elements
	// at the start of every row of inp[N,ld] (head k of row i is elements
	// i·ld+k·c .. i·ld+k·c+c-1), with one weight[c] for all heads: Qwen3's
	// q_norm over the NH query heads of a packed qkv row (inp = qkv, g =
	// NH, c = HS, ld = (NH+2·NKV)·HS) and its k_norm over the NKV key
	// heads (inp = qkv.Slice(NH·HS, ...), g = NKV). out has inp's layout;
	// its head elements are overwritten and the rest of each row is not
	// touched. rstd is [N,g]. out must not alias inp.
	HeadRMSNormForward(out, rstd, inp, weight Buffer, n, g, c, ld int, eps float32)
	// HeadRMSNormBackward is RMSNormBackward for HeadRMSNormForward: the
	// head elements of dinp[N,ld] are OVERWRITTEN (an activation gradient,
	// not the residual stream) and the rest of each row is not touched;
	// dinp may alias dout (each head is read before it is written), so the
	// backward of a packed qkv runs in place. dweight[c] += Σ over every
	// head of every row (skipped when nil).
	HeadRMSNormBackward(dinp, dweight, dout, inp, weight, rstd Buffer, n, g, c, ld int)

	// RoPEForward rotates, in place, the first nh heads of hs elements of
	// every row of x[N,ld] by the rotary embedding of Hugging Face's
	// rotate_half convention: with i < hs/2, c = cos[pos[r],i] and s =
	// sin[pos[r],i],
	//
	//	x'[i]      = x[i]·c - x[i+hs/2]·s
	//	x'[i+hs/2] = x[i+hs/2]·c + x[i]·s
	//
	// (each product rounded to fp32, then the sum). pos[N] (I32) holds each
	// row's position id, 0 <= pos < maxPos, and cos, sin are
	// [maxPos,hs/2] tables (RoPETable). In a packed qkv row
	// [B,T,(NH+2·NKV)·HS] the query and key heads come first, so one call
	// with nh = NH+NKV and ld = (NH+2·NKV)·HS rotates q and k; a separate
	// q buffer is nh = NH, ld = NH·HS.
	RoPEForward(x, pos, cos, sin Buffer, n, nh, hs, ld int)
	// RoPEBackward turns dx, holding d(out) of RoPEForward's rotated
	// elements, into d(in) in place (the inverse rotation, which is the
	// transpose): it OVERWRITES those elements and leaves the rest of each
	// row alone.
	RoPEBackward(dx, pos, cos, sin Buffer, n, nh, hs, ld int)

	// SwiGLUForward: out[N,F] = silu(gate)·up, where each row of inp[N,2F]
	// holds gate in columns 0..F-1 and up in F..2F-1 (the output of one
	// matmul with gate_proj and up_proj stacked, gate first), and silu(x) =
	// x·sigmoid(x). out is overwritten and must not alias inp.
	SwiGLUForward(out, inp Buffer, n, f int)
	// SwiGLUBackward: dinp[N,2F] = gradient of SwiGLUForward (OVERWRITES):
	// dgate = dout·up·σ(gate)·(1+gate·(1-σ(gate))), dup = dout·silu(gate),
	// in inp's layout. dinp must not alias dout or inp.
	SwiGLUBackward(dinp, dout, inp Buffer, n, f int)

	// GQAAttentionForward is causal grouped-query self-attention (Hugging
	// Face's eager LlamaAttention). qkv[B,T,(NH+2·NKV)·HS] holds in each
	// row the NH query heads, then the NKV key heads, then the NKV value
	// heads, HS elements each (q_proj, k_proj and v_proj stacked); the
	// scores are q·k·HS^-0.5 (q scaled in the kernel). It overwrites
	// out[B,T,NH·HS] (head h in columns h·HS..) and the probabilities
	// att[B,NH,T,T]. mask[B,T] may be nil (see the package doc for masked
	// rows). With NKV = NH it computes what AttentionForward does.
	GQAAttentionForward(out, att, qkv, mask Buffer, b, t, nh, nkv, hs int)
	// GQAAttentionBackward: dqkv[B,T,(NH+2·NKV)·HS] = gradient of
	// GQAAttentionForward (OVERWRITES); a key or value head's gradient
	// sums over the NH/NKV query heads that share it. att and mask are the
	// forward's.
	GQAAttentionBackward(dqkv, dout, qkv, att, mask Buffer, b, t, nh, nkv, hs int)
	// GQAAttentionDecode runs GQAAttentionForward for tn new positions
	// t0..t0+tn-1 against a KV cache of NKV heads: it first writes the key
	// and value heads of qkv[B,tn,(NH+2·NKV)·HS] into kcache and vcache
	// [B,NKV,Tmax,HS] (head-major: one head's positions are contiguous) at
	// positions t0.., then each new query attends causally to cache
	// positions 0..its own whose mask[B,Tmax] entry is 1. out is
	// [B,tn,NH·HS]. With t0 = 0 and tn = T it equals GQAAttentionForward.
	GQAAttentionDecode(out, qkv, kcache, vcache, mask Buffer, b, tn, t0, tmax, nh, nkv, hs int)

	// DropoutForward: out = inp·keep/(1-p) where keep is drawn from a
	// counter-based generator keyed by (seed, element index), so the result
	// does not depend on the backend or the thread count. scale[n] saves
	// keep/(1-p) for the backward. out may alias inp. Every backend uses the
	// same generator (SplitMix64 as a hash, uint64 arithmetic wrapping):
	//
	//	mix(z) = z ^= z>>30; z *= 0xBF58476D1CE4E5B9; z ^= z>>27;
	//	         z *= 0x94D049BB133111EB; z ^ z>>31
	//	key = mix(seed + γ), r_i = mix(key + (i+1)·γ), γ = 0x9E3779B97F4A7C15
	//	keep_i = float32(r_i>>40)·2^-24 >= p
	DropoutForward(out, scale, inp Buffer, p float32, seed uint64, n int)
	// Mul: out[i] = a[i]·b[i]; out may alias a or b. DropoutBackward is
	// Mul(dinp, dout, scale).
	Mul(out, a, b Buffer, n int)

	// CrossEntropyForward: losses[i] = -log softmax(logits[i,:])[targets[i]],
	// and 0 where targets[i] == ignoreIndex. logits is [N,V].
	CrossEntropyForward(losses, logits, targets Buffer, n, v int, ignoreIndex int32)
	// CrossEntropyBackward: dlogits[i,:] = dlosses[i]·(softmax(logits[i,:]) -
	// onehot(targets[i])) (overwrites), zero for ignored rows. dlogits may
	// alias logits: each row is read before it is written. It is also the
	// backward of LogProbGather with dlosses = -dlogprobs.
	CrossEntropyBackward(dlogits, dlosses, logits, targets Buffer, n, v int, ignoreIndex int32)
	// LogProbGather: out[i] = log softmax(logits[i,:])[ids[i]].
	LogProbGather(out, logits, ids Buffer, n, v int)

	// AdamWStep is one PyTorch AdamW update of n parameters at step (1-based):
	// g = grads·gradScale; params -= lr·weightDecay·params; m, v updated with
	// beta1/beta2; params -= lr/(1-beta1^step) · m/(sqrt(v)/sqrt(1-beta2^step)+eps).
	AdamWStep(params, grads, m, v Buffer, n int, lr, beta1, beta2, eps, weightDecay, gradScale float32, step int)
	// AdamWStepBF16 is AdamWStep on fp32 master weights kept in two 16-bit
	// halves, mixed precision without a separate fp32 copy: params (BF16)
	// is the master rounded to nearest even — the weights the model
	// computes with — and lo (I32, (n+1)/2 elements: element i's half in
	// bits 16·(i%2) to 16·(i%2)+15 of lo[i/2]) the master's low 16 bits.
	// The master is params' bits, less one when its low half is above
	// 0x8000 (it was rounded up), followed by the low half; a zero lo makes
	// it the BF16 parameters. The update is AdamWStep's on that fp32 value,
	// bit for bit, after which params and lo hold its halves; the one value
	// the halves cannot tell apart, a tie rounded up, is kept one fp32 ulp
	// further from zero (low half 0x8001). lo is I32 so that its raw bits
	// pass through ReadI32/WriteI32 (checkpoints) unconverted.
	AdamWStepBF16(params, lo, grads, m, v Buffer, n int, lr, beta1, beta2, eps, weightDecay, gradScale float32, step int)
	// SumSquares returns Σ x[i]² over every element of every buffer (F32),
	// accumulated in float64 on the device with one result read back: the
	// global gradient norm is its square root over all gradients, and
	// clipping is AdamWStep's gradScale, so a step needs one host sync.
	SumSquares(xs ...Buffer) float64
}
