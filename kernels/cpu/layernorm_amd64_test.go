//go:build amd64

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLnColSumsFloat64Bits checks lnColSumsAVX512's float64 accumulators
// bit for bit against the Go expression over many rows: there a change of
// association (g·((x-m)·r) for (g·(x-m))·r) shows, which the float32
// results of TestLayerNormAsmBitwise almost never reveal.
func TestLnColSumsFloat64Bits(t *testing.T) {
	vecDevice(t, "avx512")
	r := rand.New(rand.NewPCG(25, 26))
	const c, rows = 64, 200
	accW, accB := make([]float64, c), make([]float64, c)
	wantW, wantB := make([]float64, c), make([]float64, c)
	dy, x := make([]float32, c), make([]float32, c)
	for range rows {
		for j := range dy {
			dy[j], x[j] = float32(r.NormFloat64()), float32(r.NormFloat64()*2+0.3)
		}
		m, rs := r.NormFloat64()*0.1, 1/(0.5+r.Float64())
		lnColSumsAVX512(accW, accB, dy, x, m, rs)
		for j, g := range dy {
			wantW[j] += float64(g) * (float64(x[j]) - m) * rs
			wantB[j] += float64(g)
		}
	}
	for j := range accW {
		if math.Float64bits(accW[j]) != math.Float64bits(wantW[j]) || math.Float64bits(accB[j]) != math.Float64bits(wantB[j]) {
			t.Fatalf("column %d: asm (%v, %v), Go (%v, %v)", j, accW[j], accB[j], wantW[j], wantB[j])
		}
	}
}
