package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// gemmBenchShapes are the (M, N, K) of the GEMM acceptance benchmark, the
// same as scripts/bench_torch_matmul.py: a GPT-2-small layer's projections
// over 512 tokens and a square one.
var gemmBenchShapes = [][3]int{{512, 768, 768}, {512, 3072, 768}, {512, 768, 3072}, {2048, 2048, 2048}}

// BenchmarkGemm reports GFLOP/s for each shape, variant (op(A) is M×K,
// op(B) is K×N; "t" means the operand is stored transposed) and thread
// count, on the best kernel of this CPU:
//
//	go test ./kernels/cpu/ -run '^$' -bench 'BenchmarkGemm$' -count 5
func BenchmarkGemm(b *testing.B) {
	for _, threads := range []int{1, 2} {
		d, err := New(Options{Threads: threads})
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range gemmBenchShapes {
			for _, v := range []string{"nn", "nt", "tn"} {
				name := fmt.Sprintf("%dx%dx%d/%s/t%d", s[0], s[1], s[2], v, threads)
				b.Run(name, func(b *testing.B) { gemmBench(b, d, v[0] == 't', v[1] == 't', s[0], s[1], s[2]) })
			}
		}
	}
}

// BenchmarkGemmISA runs one shape on every kernel this CPU supports.
func BenchmarkGemmISA(b *testing.B) {
	for _, is := range gemmTestISAs() {
		d, err := New(Options{Threads: 1, ISA: is.String()})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(is.String(), func(b *testing.B) { gemmBench(b, d, false, true, 512, 768, 768) })
	}
}

// BenchmarkGemmSkinny covers decoding-style shapes: one or a few rows.
func BenchmarkGemmSkinny(b *testing.B) {
	d, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range [][3]int{{1, 3072, 768}, {1, 768, 3072}, {4, 3072, 768}, {16, 3072, 768}} {
		for _, v := range []string{"nn", "nt"} {
			b.Run(fmt.Sprintf("%dx%dx%d/%s", s[0], s[1], s[2], v), func(b *testing.B) {
				gemmBench(b, d, v[0] == 't', v[1] == 't', s[0], s[1], s[2])
			})
		}
	}
}

func gemmBench(b *testing.B, d *Device, transA, transB bool, m, n, k int) {
	r := rand.New(rand.NewPCG(1, 1))
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	a, bb, c := F32(gemmRand(r, m*k)), F32(gemmRand(r, k*n)), make(F32, m*n)
	d.Gemm(transA, transB, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
	for b.Loop() {
		d.Gemm(transA, transB, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkGemmBF16 is BenchmarkGemm for the bf16 GEMM on the best
// implementation of this CPU, with A an F32 buffer (rounded as it is
// packed) and B a BF16 buffer, as MatmulForward and the dinp product of
// MatmulBackward see a bf16 weight; "tn/f32" has both operands F32, as the
// dweight product:
//
//	go test ./kernels/cpu/ -run '^$' -bench 'BenchmarkGemmBF16$' -count 5
func BenchmarkGemmBF16(b *testing.B) {
	for _, threads := range []int{1, 2} {
		for _, s := range gemmBenchShapes {
			for _, v := range []string{"nn", "nt", "tn", "tn/f32"} {
				name := fmt.Sprintf("%dx%dx%d/%s/t%d", s[0], s[1], s[2], v, threads)
				b.Run(name, func(b *testing.B) {
					gemmBF16Bench(b, gemmBF16ImplFor(bestISA()), threads, v[0] == 't', v[1] == 't', s[0], s[1], s[2], len(v) == 2)
				})
			}
		}
	}
}

// BenchmarkGemmBF16Impl runs the MatmulForward shape of the first bench
// shape (nt, B BF16) on every bf16 implementation this CPU runs, beside
// the fp32 GEMM.
func BenchmarkGemmBF16Impl(b *testing.B) {
	for _, threads := range []int{1, 2} {
		d, err := New(Options{Threads: threads})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("fp32/t%d", threads), func(b *testing.B) { gemmBench(b, d, false, true, 512, 768, 768) })
		for _, im := range gemmBF16Impls() {
			b.Run(fmt.Sprintf("%s/t%d", im.name, threads), func(b *testing.B) {
				gemmBF16Bench(b, im, threads, false, true, 512, 768, 768, true)
			})
		}
	}
}

// BenchmarkGemmBF16Skinny covers decoding-style shapes (one or a few rows
// against a BF16 weight) beside the fp32 GEMM on the same shapes.
func BenchmarkGemmBF16Skinny(b *testing.B) {
	for _, s := range [][3]int{{1, 3072, 768}, {1, 768, 3072}, {2, 3072, 768}, {4, 3072, 768}, {8, 3072, 768}, {16, 3072, 768}} {
		for _, v := range []string{"nn", "nt"} {
			name := fmt.Sprintf("%dx%dx%d/%s", s[0], s[1], s[2], v)
			b.Run(name+"/fp32", func(b *testing.B) {
				d, err := New(Options{Threads: 1})
				if err != nil {
					b.Fatal(err)
				}
				gemmBench(b, d, v[0] == 't', v[1] == 't', s[0], s[1], s[2])
			})
			b.Run(name+"/bf16", func(b *testing.B) {
				gemmBF16Bench(b, gemmBF16ImplFor(bestISA()), 1, v[0] == 't', v[1] == 't', s[0], s[1], s[2], true)
			})
		}
	}
}

// gemmBF16Bench times gemmBF16 through im with A F32 and B BF16 (F32 when
// bBF is false).
func gemmBF16Bench(b *testing.B, im *gemmBF16Impl, threads int, transA, transB bool, m, n, k int, bBF bool) {
	r := rand.New(rand.NewPCG(1, 1))
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	a := gemmBF16Src(F32(gemmRand(r, m*k)))
	bf := gemmRand(r, k*n)
	bb := gemmBF16Src(F32(bf))
	if bBF {
		h := make(BF16, len(bf))
		roundSliceBF16(h, bf)
		bb = gemmBF16Src(h)
	}
	c := make([]float32, m*n)
	gemmBF16With(im, threads, transA, transB, m, n, k, 1, a, lda, bb, ldb, 0, nil, c, n)
	for b.Loop() {
		gemmBF16With(im, threads, transA, transB, m, n, k, 1, a, lda, bb, ldb, 0, nil, c, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
