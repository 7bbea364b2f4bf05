package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gochat-ai/gochat/kernels/cpu"
)

func benchDevices(b *testing.B, fn func(b *testing.B, d *cpu.Device)) {
	benchISAs(b, []string{"", "avx2", "generic"}, fn)
}

// benchISAs runs fn on a device per ISA ("" for the best); an ISA this CPU
// lacks is skipped.
func benchISAs(b *testing.B, isas []string, fn func(b *testing.B, d *cpu.Device)) {
	for _, isa := range isas {
		name := isa
		if name == "" {
			name = "best"
		}
		b.Run(name, func(b *testing.B) {
			d, err := cpu.New(cpu.Options{ISA: isa})
			if err != nil {
				b.Skip(err)
			}
			fn(b, d)
		})
	}
}

func benchRandn(n int, scale float64) cpu.F32 {
	r := rand.New(rand.NewPCG(uint64(n), 1))
	x := make(cpu.F32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

// attention FLOPs of the causal forward: QKᵀ and PV over the lower triangle.
func attnFlops(bsz, t, nh, hs int) float64 {
	return float64(bsz*nh) * float64(t*(t+1)/2) * float64(hs) * 4
}

func BenchmarkAttention(b *testing.B) {
	for _, s := range [][4]int{{4, 128, 12, 64}, {1, 1024, 12, 64}} {
		bsz, t, nh, hs := s[0], s[1], s[2], s[3]
		c := nh * hs
		qkv := benchRandn(bsz*t*3*c, 1)
		mask := make(cpu.I32, bsz*t)
		for i := range mask {
			mask[i] = 1
		}
		mask[0], mask[1] = 0, 0 // some left padding
		out, att := make(cpu.F32, bsz*t*c), make(cpu.F32, bsz*nh*t*t)
		dout, dqkv := benchRandn(bsz*t*c, 1), make(cpu.F32, len(qkv))
		shape := fmt.Sprintf("B=%d,T=%d,NH=%d,HS=%d", bsz, t, nh, hs)
		isas := []string{"", "avx2", "generic"}
		if t > 256 {
			isas = isas[:2] // the portable code takes seconds here
		}
		b.Run("Forward/"+shape, func(b *testing.B) {
			benchISAs(b, isas, func(b *testing.B, d *cpu.Device) {
				for b.Loop() {
					d.AttentionForward(out, att, qkv, mask, bsz, t, nh, hs)
				}
				b.ReportMetric(attnFlops(bsz, t, nh, hs)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		})
		b.Run("Backward/"+shape, func(b *testing.B) {
			benchISAs(b, isas, func(b *testing.B, d *cpu.Device) {
				d.AttentionForward(out, att, qkv, mask, bsz, t, nh, hs)
				for b.Loop() {
					d.AttentionBackward(dqkv, dout, qkv, att, mask, bsz, t, nh, hs)
				}
				b.ReportMetric(2*attnFlops(bsz, t, nh, hs)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		})
	}
}

func BenchmarkCrossEntropy(b *testing.B) {
	const n, v = 512, 50272
	logits := benchRandn(n*v, 2)
	targets := make(cpu.I32, n)
	for i := range targets {
		targets[i] = int32(i * 97 % v)
	}
	targets[3] = -100
	losses, dlosses := make(cpu.F32, n), benchRandn(n, 1)
	dlogits := make(cpu.F32, n*v)
	gbs := func(b *testing.B, passes float64) {
		b.ReportMetric(passes*float64(n*v*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	}
	b.Run("Forward", func(b *testing.B) {
		benchDevices(b, func(b *testing.B, d *cpu.Device) {
			for b.Loop() {
				d.CrossEntropyForward(losses, logits, targets, n, v, -100)
			}
			gbs(b, 1)
		})
	})
	b.Run("Backward", func(b *testing.B) {
		benchDevices(b, func(b *testing.B, d *cpu.Device) {
			for b.Loop() {
				d.CrossEntropyBackward(dlogits, dlosses, logits, targets, n, v, -100)
			}
			gbs(b, 2)
		})
	})
	b.Run("ForwardBackward", func(b *testing.B) {
		benchDevices(b, func(b *testing.B, d *cpu.Device) {
			for b.Loop() {
				d.CrossEntropyForward(losses, logits, targets, n, v, -100)
				d.CrossEntropyBackward(dlogits, dlosses, logits, targets, n, v, -100)
			}
		})
	})
}

func BenchmarkLayerNorm(b *testing.B) {
	const n, c = 512, 768
	inp, w, bias, dout := benchRandn(n*c, 1), benchRandn(c, 1), benchRandn(c, 1), benchRandn(n*c, 1)
	out, mean, rstd := make(cpu.F32, n*c), make(cpu.F32, n), make(cpu.F32, n)
	dinp, dw, db := make(cpu.F32, n*c), make(cpu.F32, c), make(cpu.F32, c)
	// avx2: the Go loops (the assembly ones need AVX-512).
	benchISAs(b, []string{"", "avx2"}, func(b *testing.B, d *cpu.Device) {
		b.Run("Forward", func(b *testing.B) {
			for b.Loop() {
				d.LayerNormForward(out, mean, rstd, inp, w, bias, n, c, 1e-5)
			}
		})
		b.Run("Backward", func(b *testing.B) {
			d.LayerNormForward(out, mean, rstd, inp, w, bias, n, c, 1e-5)
			for b.Loop() {
				d.LayerNormBackward(dinp, dw, db, dout, inp, w, mean, rstd, n, c)
			}
		})
	})
}

// BenchmarkAttentionTrain compares one training pass of attention (forward
// and backward) through the composed kernels, which keep att[B,NH,T,T],
// with the flash kernels, which keep lse[B,NH,T] and recompute the
// probabilities, at opt-125m/llama-125m shapes.
func BenchmarkAttentionTrain(b *testing.B) {
	d, err := cpu.New(cpu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range []int{128, 256, 512} {
		const bsz, nh, hs = 4, 12, 64
		c := nh * hs
		qkv := benchRandn(bsz*t*3*c, 1)
		mask := make(cpu.I32, bsz*t)
		for i := range mask {
			mask[i] = 1
		}
		mask[0], mask[1] = 0, 0 // some left padding
		out, att, lse := make(cpu.F32, bsz*t*c), make(cpu.F32, bsz*nh*t*t), make(cpu.F32, bsz*nh*t)
		dout, dqkv := benchRandn(bsz*t*c, 1), make(cpu.F32, len(qkv))
		shape := fmt.Sprintf("B=%d,T=%d,NH=%d,HS=%d", bsz, t, nh, hs)
		flops := 3 * attnFlops(bsz, t, nh, hs)
		b.Run("Composed/"+shape, func(b *testing.B) {
			for b.Loop() {
				d.AttentionForward(out, att, qkv, mask, bsz, t, nh, hs)
				d.AttentionBackward(dqkv, dout, qkv, att, mask, bsz, t, nh, hs)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run("Flash/"+shape, func(b *testing.B) {
			for b.Loop() {
				d.FlashAttentionForward(out, lse, qkv, mask, bsz, t, nh, nh, hs)
				d.FlashAttentionBackward(dqkv, dout, qkv, lse, mask, bsz, t, nh, nh, hs)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkReLU: forward and backward over an FFN activation of opt-125m at
// batch 4 × 128 (4·128·3072 values, half of them negative).
func BenchmarkReLU(b *testing.B) {
	n := 4 * 128 * 3072
	x, dy := benchRandn(n, 1), benchRandn(n, 1)
	y, dx := make(cpu.F32, n), make(cpu.F32, n)
	benchDevices(b, func(b *testing.B, d *cpu.Device) {
		b.Run("Forward", func(b *testing.B) {
			b.SetBytes(int64(8 * n))
			for range b.N {
				d.ReLUForward(y, x, n)
			}
		})
		d.ReLUForward(y, x, n)
		b.Run("Backward", func(b *testing.B) {
			b.SetBytes(int64(12 * n))
			for range b.N {
				d.ReLUBackward(dx, dy, y, n)
			}
		})
	})
}
