package cpu

import "github.com/gochat-ai/gochat/kernels"

// Placeholders until the kernels land; each is replaced by its own file.

func (d *Device) AddBias(out, bias kernels.Buffer, n, c int)                { panic("unimplemented") }
func (d *Device) Add(out, a, b kernels.Buffer, n int)                       { panic("unimplemented") }
func (d *Device) Scale(x kernels.Buffer, s float32, n int)                  { panic("unimplemented") }
func (d *Device) EmbeddingForward(out, ids, table kernels.Buffer, n, c int) { panic("unimplemented") }
func (d *Device) EmbeddingBackward(dtable, dout, ids kernels.Buffer, n, c int) {
	panic("unimplemented")
}
func (d *Device) LayerNormForward(out, mean, rstd, inp, weight, bias kernels.Buffer, n, c int, eps float32) {
	panic("unimplemented")
}
func (d *Device) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd kernels.Buffer, n, c int) {
	panic("unimplemented")
}
func (d *Device) ReLUForward(out, inp kernels.Buffer, n int)         { panic("unimplemented") }
func (d *Device) ReLUBackward(dinp, dout, out kernels.Buffer, n int) { panic("unimplemented") }
func (d *Device) GELUForward(out, inp kernels.Buffer, n int)         { panic("unimplemented") }
func (d *Device) GELUBackward(dinp, dout, inp kernels.Buffer, n int) { panic("unimplemented") }
func (d *Device) SoftmaxForward(out, inp kernels.Buffer, n, c int)   { panic("unimplemented") }
func (d *Device) AttentionForward(out, att, qkv, mask kernels.Buffer, b, t, nh, hs int) {
	panic("unimplemented")
}
func (d *Device) AttentionBackward(dqkv, dout, qkv, att, mask kernels.Buffer, b, t, nh, hs int) {
	panic("unimplemented")
}
func (d *Device) AttentionDecode(out, qkv, kcache, vcache, mask kernels.Buffer, b, tn, t0, tmax, nh, hs int) {
	panic("unimplemented")
}
func (d *Device) DropoutForward(out, scale, inp kernels.Buffer, p float32, seed uint64, n int) {
	panic("unimplemented")
}
func (d *Device) Mul(out, a, b kernels.Buffer, n int) { panic("unimplemented") }
func (d *Device) CrossEntropyForward(losses, logits, targets kernels.Buffer, n, v int, ignoreIndex int32) {
	panic("unimplemented")
}
func (d *Device) CrossEntropyBackward(dlogits, dlosses, logits, targets kernels.Buffer, n, v int, ignoreIndex int32) {
	panic("unimplemented")
}
func (d *Device) LogProbGather(out, logits, ids kernels.Buffer, n, v int) { panic("unimplemented") }
func (d *Device) AdamWStep(params, grads, m, v kernels.Buffer, n int, lr, beta1, beta2, eps, weightDecay, gradScale float32, step int) {
	panic("unimplemented")
}
func (d *Device) SumSquares(x kernels.Buffer, n int) float64 { panic("unimplemented") }
