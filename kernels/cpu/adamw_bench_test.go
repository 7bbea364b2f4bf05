package cpu_test

import (
	"testing"

	"github.com/gochat-ai/gochat/kernels/cpu"
)

// BenchmarkAdamW times one AdamW step over 16M parameters on one thread,
// fp32 and bf16 (master halves), in parameters per second.
func BenchmarkAdamW(b *testing.B) {
	const n = 1 << 24
	d, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	g := benchRandn(n, 1e-3)
	m, v := make(cpu.F32, n), make(cpu.F32, n)
	b.Run("fp32", func(b *testing.B) {
		p := benchRandn(n, 1)
		b.SetBytes(4 * 4 * n)
		for i := 0; i < b.N; i++ {
			d.AdamWStep(p, g, m, v, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, i+1)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gparam/s")
	})
	b.Run("bf16", func(b *testing.B) {
		p, lo := make(cpu.BF16, n), make(cpu.I32, n/2)
		b.SetBytes(3*4*n + 2*2*n)
		for i := 0; i < b.N; i++ {
			d.AdamWStepBF16(p, lo, g, m, v, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, i+1)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gparam/s")
	})
}
