package cpu

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// MatmulForward implements kernels.Ops: out[N,OC] = inp[N,C]·weight[OC,C]ᵀ
// + bias[OC]. The bias rides inside the GEMM as one more step of K (see
// gemmBias), so out is written once. A BF16 weight makes it a bf16 matmul
// (gemmBF16: inp rounded to bf16, fp32 accumulation).
func (d *Device) MatmulForward(out, inp, weight, bias kernels.Buffer, n, c, oc int) {
	o := f32(out)
	if len(o) < n*oc {
		panic(fmt.Sprintf("cpu: MatmulForward: out has %d elements, want %d", len(o), n*oc))
	}
	if isBF16(weight) {
		gemmBF16(d.isa, d.threads, false, true, n, oc, c, 1, inp, c, weight, c, 0, asF32(bias), o, oc)
		return
	}
	gemmBias(gemmKernelFor(d.isa), d.threads, false, true, n, oc, c, 1, f32(inp), c, f32(weight), c, 0, f32(bias), o, oc)
}

// MatmulBackward implements kernels.Ops for MatmulForward:
// dinp[N,C] = dout[N,OC]·weight[OC,C] (overwrites; skipped when nil),
// dweight[OC,C] += doutᵀ·inp (accumulates; skipped when nil),
// dbias[OC] += Σ_rows dout (accumulates; skipped when nil).
// With a BF16 weight both products are bf16 matmuls (inputs rounded to
// bf16, fp32 accumulation into the F32 dinp and dweight), as in PyTorch's
// autocast backward.
func (d *Device) MatmulBackward(dinp, dweight, dbias, dout, inp, weight kernels.Buffer, n, c, oc int) {
	kern := gemmKernelFor(d.isa)
	g := f32(dout)
	if isBF16(weight) {
		if dinp != nil {
			gemmBF16(d.isa, d.threads, false, false, n, c, oc, 1, dout, oc, weight, c, 0, nil, f32(dinp), c)
		}
		if dweight != nil {
			gemmBF16(d.isa, d.threads, true, false, oc, c, n, 1, dout, oc, inp, c, 1, nil, f32(dweight), c)
		}
		if dbias != nil {
			matmulBiasGrad(kern, d.threads, f32(dbias), g, n, oc)
		}
		return
	}
	if dinp != nil {
		gemm(kern, d.threads, false, false, n, c, oc, 1, g, oc, f32(weight), c, 0, f32(dinp), c)
	}
	if dweight != nil {
		gemm(kern, d.threads, true, false, oc, c, n, 1, g, oc, f32(inp), c, 1, f32(dweight), c)
	}
	if dbias != nil {
		matmulBiasGrad(kern, d.threads, f32(dbias), g, n, oc)
	}
}

// matmulBiasGrad does db[OC] += Σ_i dout[i,:], summing each column in a
// scratch vector before adding it to db. Threads take column ranges.
func matmulBiasGrad(kern *gemmKernel, threads int, db, dout []float32, n, oc int) {
	db = db[:oc]
	if n > 0 {
		_ = dout[n*oc-1]
	}
	// Column chunks of at least 256 floats keep each thread's rows in
	// whole cache lines.
	t := min(threads, max(1, oc/256), max(1, n*oc/gemmMinWork))
	gemmFanOut(t, func(i int) {
		lo, hi := i*oc/t, (i+1)*oc/t
		s := gemmPool.Get().(*gemmScratch)
		defer gemmPool.Put(s)
		acc := gemmAligned(&s.vec, hi-lo)
		clear(acc)
		for r := range n {
			kern.axpy(1, dout[r*oc+lo:r*oc+hi], acc)
		}
		for j, v := range acc {
			db[lo+j] += v
		}
	})
}
