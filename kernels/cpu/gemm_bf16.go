package cpu

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// gemmBF16 is gemmBias in bf16 precision: both inputs are rounded to bf16
// (round to nearest even; BF16 elements are used as they are) and the
// products are accumulated in fp32, which is what PyTorch's bf16 matmul
// and DeepSpeed's bf16 mode compute. a and b are each an F32 or a BF16
// buffer; bias and C are fp32. See gemmBias for the rest of the contract.
//
// This is the portable reference: it rounds copies of both operands and
// runs the fp32 kernel on them (a product of two bf16 values is exact in
// fp32, so only the accumulation order differs from VDPBF16PS).
func gemmBF16(is isa, threads int, transA, transB bool, m, n, k int, alpha float32, a kernels.Buffer, lda int, b kernels.Buffer, ldb int, beta float32, bias, c []float32, ldc int) {
	gemmBias(gemmKernelFor(is), threads, transA, transB, m, n, k, alpha, roundedF32(a), lda, roundedF32(b), ldb, beta, bias, c, ldc)
}

// roundedF32 returns the values of buf rounded to bf16, as float32.
func roundedF32(buf kernels.Buffer) []float32 {
	switch s := buf.(type) {
	case F32:
		out := make([]float32, len(s))
		for i, f := range s {
			out[i] = FromBF16(ToBF16(f))
		}
		return out
	case BF16:
		out := make([]float32, len(s))
		widenSliceBF16(out, s)
		return out
	}
	panic(fmt.Sprintf("cpu: gemmBF16: want an F32 or BF16 operand, got %T", buf))
}
