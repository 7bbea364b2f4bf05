package cuda

import (
	"embed"
	"io/fs"
	"slices"
	"strings"
)

// The kernels are CUDA C in cu/*.cu, embedded in the binary and compiled
// by NVRTC at run time into one module.
//
//go:embed cu/*.cu
var cuFiles embed.FS

// programSource returns the NVRTC program: the .cu files concatenated in
// name order (00_common.cu first), each preceded by a #line directive so
// that compile errors name the file and line.
func programSource() string {
	names, err := fs.Glob(cuFiles, "cu/*.cu")
	if err != nil {
		panic(err) // the pattern is valid
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		src, err := cuFiles.ReadFile(n)
		if err != nil {
			panic(err) // embedded
		}
		b.WriteString("#line 1 \"" + n + "\"\n")
		b.Write(src)
		if len(src) > 0 && src[len(src)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// kernel names an extern "C" __global__ function of the program.
type kernel int

// The kernels the Go side launches; kernelNames has their C names (a test
// checks both lists against the sources, parameter kinds included).
const (
	kAdd kernel = iota
	kScale
	kMul
	kAddBias
	kReLUFwd
	kReLUBwd
	kGELUFwd
	kGELUBwd
	kF32ToBF16
	kBF16ToF32
	kScaleMatrix
	kColsumAdd
	kSwiGLUFwd
	kSwiGLUBwd
	kDropout
	kEmbeddingFwd
	kEmbeddingBwd
	kLayerNormFwd
	kLayerNormBwdDx
	kLayerNormBwdDwDb
	kRMSNormFwd
	kRMSNormBwdDx
	kRMSNormBwdDw
	kSoftmaxFwd
	kCrossEntropyFwd
	kCrossEntropyBwd
	kLogProbGather
	kAttnFwd
	kAttnBwdQ
	kAttnBwdKV
	kFlashFwd
	kFlashBwdDQ
	kFlashBwdDKDV
	kFlashDecode
	kFlashDecodeCombine
	kKVCacheWrite
	kRoPE
	kAdamW
	kAdamWBF16
	kSumSqPartial
	kSumD
	numKernels
)

var kernelNames = [numKernels]string{
	kAdd:                "k_add",
	kScale:              "k_scale",
	kMul:                "k_mul",
	kAddBias:            "k_add_bias",
	kReLUFwd:            "k_relu_fwd",
	kReLUBwd:            "k_relu_bwd",
	kGELUFwd:            "k_gelu_fwd",
	kGELUBwd:            "k_gelu_bwd",
	kF32ToBF16:          "k_f32_to_bf16",
	kBF16ToF32:          "k_bf16_to_f32",
	kScaleMatrix:        "k_scale_matrix",
	kColsumAdd:          "k_colsum_add",
	kSwiGLUFwd:          "k_swiglu_fwd",
	kSwiGLUBwd:          "k_swiglu_bwd",
	kDropout:            "k_dropout",
	kEmbeddingFwd:       "k_embedding_fwd",
	kEmbeddingBwd:       "k_embedding_bwd",
	kLayerNormFwd:       "k_layernorm_fwd",
	kLayerNormBwdDx:     "k_layernorm_bwd_dx",
	kLayerNormBwdDwDb:   "k_layernorm_bwd_dwdb",
	kRMSNormFwd:         "k_rmsnorm_fwd",
	kRMSNormBwdDx:       "k_rmsnorm_bwd_dx",
	kRMSNormBwdDw:       "k_rmsnorm_bwd_dw",
	kSoftmaxFwd:         "k_softmax_fwd",
	kCrossEntropyFwd:    "k_crossentropy_fwd",
	kCrossEntropyBwd:    "k_crossentropy_bwd",
	kLogProbGather:      "k_logprob_gather",
	kAttnFwd:            "k_attn_fwd",
	kAttnBwdQ:           "k_attn_bwd_q",
	kAttnBwdKV:          "k_attn_bwd_kv",
	kFlashFwd:           "k_flash_fwd",
	kFlashBwdDQ:         "k_flash_bwd_dq",
	kFlashBwdDKDV:       "k_flash_bwd_dkdv",
	kFlashDecode:        "k_flash_decode",
	kFlashDecodeCombine: "k_flash_decode_combine",
	kKVCacheWrite:       "k_kv_cache_write",
	kRoPE:               "k_rope",
	kAdamW:              "k_adamw",
	kAdamWBF16:          "k_adamw_bf16",
	kSumSqPartial:       "k_sumsq_partial",
	kSumD:               "k_sum_d",
}

func (k kernel) String() string { return kernelNames[k] }

// Launch geometry shared with the sources.
const (
	maxHS      = 256 // MAX_HS in attention.cu
	attThreads = 128 // ATT_THREADS in attention.cu
	// The flash attention kernels' tiles: FLASH_TQ queries (forward and
	// dq), FLASH_TK keys, FLASH_THREADS threads.
	flashTQ      = 8
	flashTK      = 8
	flashThreads = 128
	// Flash decoding: DEC_TQ queries and DEC_TK keys a tile, DEC_THREADS
	// threads (attention.cu); split-K (decodeSplits) when a launch would
	// have fewer than decTargetBlocks blocks, at least decMinChunk keys a
	// split and at most decMaxSplits splits.
	decTQ           = 8
	decTK           = 16
	decThreads      = 128
	decTargetBlocks = 256
	decMinChunk     = 256
	decMaxSplits    = 32
	rowThreads      = 256 // threads of the row kernels (norms, softmax, losses)
	elemBlock       = 256 // threads of the elementwise kernels
	maxGrid         = 65535 * 8
	sumBlocks       = 1024 // blocks of k_sumsq_partial: partial sums per buffer
)
