// Package kernels is the compute-backend contract of gochat.
//
// A backend (kernels/cpu today, kernels/cuda next) implements Device: it
// allocates Buffers, moves data between host and device memory, and runs the
// numerical operations of Ops. Library code (model, lora, optim, ...) sees only
// these interfaces; concrete backends are constructed by the CLI and by tests.
//
// # Layout
//
// Every matrix is row-major and contiguous unless an explicit leading
// dimension is given. Shapes in doc comments use this legend:
//
//	B  batch size            T  time (sequence length)
//	C  channels (input)      OC output channels
//	N  rows (usually B*T)    V  vocabulary size
//	NH attention heads       HS head size (C = NH*HS in OPT; LLaMA's
//	NKV key/value heads          head_dim, which may differ from C/NH)
//	L  layers                F  feed-forward size
//	P  word-embedding projection size (OPT's word_embed_proj_dim)
//
// # Naming and argument order
//
// Layers are pairs of functions, XForward and XBackward. Arguments come in the
// order outputs, saved state, inputs, weights, dimensions. Gradient buffers
// carry a d prefix (dinp, dweight).
//
// # The accumulation contract
//
// Backward kernels ACCUMULATE (+=) into parameter gradients (dweight, dbias,
// dtable) and into the residual stream (LayerNormBackward's and
// RMSNormBackward's dinp), and OVERWRITE every other activation gradient
// (MatmulBackward's dinp, AttentionBackward's and GQAAttentionBackward's
// dqkv, ReLUBackward's, SwiGLUBackward's and HeadRMSNormBackward's dinp,
// RoPEBackward's in-place dx, ...). Each backward's doc
// comment repeats which rule applies to each of its outputs. Callers zero
// parameter gradients before a step and zero an accumulated activation
// gradient before its first contribution.
//
// # Precision
//
// Mixed precision is what DeepSpeed's bf16 mode and PyTorch's autocast
// mean by it. Activations, gradients, optimizer state and every index
// buffer are F32 (I32); only weight operands may be BF16: the weight and
// bias of MatmulForward, the weight of MatmulBackward, the table of
// EmbeddingForward, the weight and bias of LayerNormForward/Backward, the
// weight of RMSNormForward/Backward and HeadRMSNormForward/Backward, the
// bias of AddBias, Add's b, A or B of Gemm, and the parameters of
// AdamWStepBF16 (whose fp32 master's low halves are an I32 buffer beside
// them: raw bits, never converted). A matmul with a BF16 weight
// (a Gemm with a BF16 operand) is a bf16 matmul: every product's inputs
// are rounded to bf16 (round to nearest even; F32 operands are rounded as
// they are read) and the products are accumulated in fp32 into an F32
// output. In MatmulBackward both products (dinp and dweight) are bf16
// matmuls; dbias sums dout unrounded. Other ops widen their BF16 operands
// to fp32 (exact) and compute in fp32: LayerNorm, RMSNorm, softmax, attention,
// losses and log-probabilities never see bf16 values except weights.
// Copy, WriteF32 and ReadF32 convert between F32 and BF16 (rounding to
// nearest even, widening exactly).
//
// # Memory
//
// Alloc returns an error (an *OutOfMemoryError when the memory is not
// there) rather than failing later, and Free returns a buffer; MemStats
// reports the live and peak bytes. Code that allocates on a device frees
// what it no longer needs and passes allocation errors up.
//
// # Masks
//
// An attention mask is an I32 buffer [B,T] with 1 for a real token and 0 for
// padding; a nil mask means every token is real. Attention is causal and
// masks padded keys. A query row whose every key is masked (a left-padding
// position) attends uniformly to all keys of the row, which is what Hugging
// Face's eager attention computes when it adds the most negative finite value
// to every score of the row (the scores are absorbed). Since that output does
// not depend on the scores, such a row passes no gradient to q or k (only to
// v); a loss is rarely read there (the position before the first real token).
package kernels
