package cpu

import "github.com/gochat-ai/gochat/kernels"

// Placeholder until the GEMM lands; replaced by gemm.go and matmul.go.

func (d *Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a kernels.Buffer, lda int, b kernels.Buffer, ldb int, beta float32, c kernels.Buffer, ldc int) {
	panic("unimplemented")
}
func (d *Device) MatmulForward(out, inp, weight, bias kernels.Buffer, n, c, oc int) {
	panic("unimplemented")
}
func (d *Device) MatmulBackward(dinp, dweight, dbias, dout, inp, weight kernels.Buffer, n, c, oc int) {
	panic("unimplemented")
}
