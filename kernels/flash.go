package kernels

// FlashAttention is an optional Device capability (discovered by type
// assertion, as Decommitter is): causal grouped-query self-attention that
// never materialises the probabilities [B,NH,T,T]. The forward keeps, per
// query row, the log-sum-exp of its scores instead, and the backward
// recomputes the probabilities from q, k and that log-sum-exp (the
// FlashAttention-2 algorithm). Memory per layer drops from B·NH·T·T to
// B·NH·T floats; the arithmetic is GQAAttentionForward's and
// GQAAttentionBackward's, which stay the reference (kerneltest checks one
// against the other on every backend that has both).
//
// The layout is GQAAttentionForward's: qkv[B,T,(NH+2·NKV)·HS] holds in each
// row the NH query heads, then the NKV key heads, then the NKV value heads.
// OPT's packed [B,T,3C] (AttentionForward) is that layout with NKV = NH, so
// one pair of kernels serves both families. Semantics are exactly the
// composed kernels': causal, scores s_j = (q·HS^-0.5)·k_j (q scaled in
// fp32 first), padded keys (mask[B,T] = 0; nil: all real) masked, and a
// query row whose keys 0..t are all padding attends uniformly to all T
// keys and passes gradient to v only (see the package doc). There is no
// attention dropout (gochat's models reject attention_dropout ≠ 0).
type FlashAttention interface {
	// FlashAttentionForward overwrites out[B,T,NH·HS] with what
	// GQAAttentionForward writes there and lse[B,NH,T] (F32) with each
	// query row's natural-log sum of exp over the scores of its keys:
	// lse = log Σ_j exp(s_j) over the keys j <= t with mask 1, so that the
	// probabilities are p_j = exp(s_j - lse). A fully masked row counts
	// every one of its T scores as 0 (Hugging Face's scores are all the
	// same most negative value there), so its lse is log T and p_j = 1/T.
	FlashAttentionForward(out, lse, qkv, mask Buffer, b, t, nh, nkv, hs int)
	// FlashAttentionBackward: dqkv[B,T,(NH+2·NKV)·HS] = gradient of
	// FlashAttentionForward (OVERWRITES every element), given the
	// forward's lse and mask; it computes what GQAAttentionBackward does
	// from the probabilities p = exp(s - lse) it recomputes. The row terms
	// D_t = Σ_j p_j·(dout_t·v_j) (FlashAttention-2's rowsum(dout∘out)) are
	// computed from the recomputed probabilities, not from the forward's
	// out, so an out kept rounded (the bf16 store) does not change the
	// gradient.
	FlashAttentionBackward(dqkv, dout, qkv, lse, mask Buffer, b, t, nh, nkv, hs int)
}
