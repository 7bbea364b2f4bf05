package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// gemmTestISAs lists every micro-kernel this CPU runs.
func gemmTestISAs() []isa {
	var out []isa
	for is := isaGeneric; is <= bestISA(); is++ {
		out = append(out, is)
	}
	return out
}

// gemmLowerMinWork makes every test GEMM fan out to all its threads.
func gemmLowerMinWork(t *testing.T) {
	old := gemmMinWork
	gemmMinWork = 1
	t.Cleanup(func() { gemmMinWork = old })
}

func gemmRand(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.Float64()*2 - 1)
	}
	return x
}

// gemmCase is one Gemm call with its operands.
type gemmCase struct {
	transA, transB bool
	m, n, k        int
	lda, ldb, ldc  int
	alpha, beta    float32
	a, b, c        []float32
	bias           []float32 // nil, or n floats added to every row (gemmBias)
}

func (g *gemmCase) String() string {
	ta, tb := "n", "n"
	if g.transA {
		ta = "t"
	}
	if g.transB {
		tb = "t"
	}
	return fmt.Sprintf("%s%s m=%d n=%d k=%d lda=%d ldb=%d ldc=%d alpha=%g beta=%g bias=%v", ta, tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.alpha, g.beta, g.bias != nil)
}

// newGemmCase makes random operands of exactly the minimum length for the
// leading dimensions, which are the minimum plus pad. With beta == 0, C is
// filled with NaN; the padding columns of C hold a sentinel.
func newGemmCase(r *rand.Rand, transA, transB bool, m, n, k, pad int, alpha, beta float32) *gemmCase {
	g := &gemmCase{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	g.lda, g.ldb, g.ldc = max(ac, 1)+pad, max(bc, 1)+pad, max(n, 1)+pad
	size := func(rows, cols, ld int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (rows-1)*ld + cols
	}
	g.a = gemmRand(r, size(ar, ac, g.lda))
	g.b = gemmRand(r, size(br, bc, g.ldb))
	g.c = gemmRand(r, size(m, n, g.ldc))
	for i := range g.c {
		if i%g.ldc >= n {
			g.c[i] = 12345
		} else if beta == 0 {
			g.c[i] = float32(math.NaN())
		}
	}
	return g
}

// withBias adds a random bias row to the case.
func (g *gemmCase) withBias(r *rand.Rand) *gemmCase {
	g.bias = gemmRand(r, g.n)
	return g
}

// check runs Gemm (gemmBias when the case has a bias) through kern and
// compares with a float64 reference.
func (g *gemmCase) check(t *testing.T, kern *gemmKernel, threads int) {
	t.Helper()
	c := append([]float32(nil), g.c...)
	if g.bias == nil {
		gemm(kern, threads, g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, c, g.ldc)
	} else {
		gemmBias(kern, threads, g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.bias, c, g.ldc)
	}
	opA := func(i, p int) float64 {
		if g.transA {
			return float64(g.a[p*g.lda+i])
		}
		return float64(g.a[i*g.lda+p])
	}
	opB := func(p, j int) float64 {
		if g.transB {
			return float64(g.b[j*g.ldb+p])
		}
		return float64(g.b[p*g.ldb+j])
	}
	const u = 0x1p-24 // float32 unit roundoff
	bad := 0
	for i := range g.m {
		for j := range g.n {
			var sum, mag float64
			for p := range g.k {
				x := opA(i, p) * opB(p, j)
				sum += x
				mag += math.Abs(x)
			}
			want := float64(g.alpha) * sum
			mag *= math.Abs(float64(g.alpha))
			if g.beta != 0 {
				c0 := float64(g.c[i*g.ldc+j])
				want += float64(g.beta) * c0
				mag += math.Abs(float64(g.beta) * c0)
			}
			if g.bias != nil {
				want += float64(g.bias[j])
				mag += math.Abs(float64(g.bias[j]))
			}
			// Worst-case float32 summation error, with room for the
			// alpha and beta roundings.
			tol := 2*float64(g.k+4)*u*mag + 1e-30
			got := float64(c[i*g.ldc+j])
			if !(math.Abs(got-want) <= tol) {
				if bad < 5 {
					t.Errorf("%v: c[%d,%d] = %g, want %g (tol %g)", g, i, j, got, want, tol)
				}
				bad++
			}
		}
		for j := g.n; j < g.ldc && i*g.ldc+j < len(c); j++ {
			if c[i*g.ldc+j] != 12345 {
				t.Fatalf("%v: wrote padding c[%d,%d] = %g", g, i, j, c[i*g.ldc+j])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%v: %d wrong elements", g, bad)
	}
}

var gemmTestScalars = [][2]float32{{1, 0}, {1, 1}, {-0.75, 0}, {1.5, -0.5}, {1, 2}, {0.5, 1}}

// TestGemm compares every kernel, thread count and transpose variant with
// the reference over assorted shapes: 1, odd, prime, micro-tile multiples ±1.
func TestGemm(t *testing.T) {
	gemmLowerMinWork(t)
	shapes := [][3]int{
		{1, 1, 1}, {1, 7, 5}, {7, 1, 5}, {1, 40, 1}, {40, 1, 1}, {3, 3, 1},
		{2, 2, 2}, {5, 3, 7}, {13, 17, 19}, {14, 32, 8}, {15, 33, 9}, {6, 16, 4},
		{7, 15, 3}, {28, 64, 16}, {29, 65, 17}, {27, 63, 31}, {41, 37, 43},
		{64, 64, 64}, {97, 50, 23}, {2, 100, 70}, {100, 2, 70}, {1, 300, 129},
		{257, 1, 33}, {3, 33, 1},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, is := range gemmTestISAs() {
		kern := gemmKernelFor(is)
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/t%d", is, threads), func(t *testing.T) {
				for si, s := range shapes {
					for v := range 4 {
						sc := gemmTestScalars[(si+v)%len(gemmTestScalars)]
						g := newGemmCase(r, v&1 != 0, v&2 != 0, s[0], s[1], s[2], (si+v)%3*5, sc[0], sc[1])
						g.check(t, kern, threads)
						if (si+v)%3 == 0 {
							g.withBias(r).check(t, kern, threads)
						}
					}
				}
			})
		}
	}
}

// TestGemmBlocks shrinks the cache blocks so that small shapes straddle
// every mc, kc and nc boundary, and the thread split lands mid-block.
func TestGemmBlocks(t *testing.T) {
	gemmLowerMinWork(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, is := range gemmTestISAs() {
		kern := *gemmKernelFor(is)
		kern.kc, kern.mc, kern.nc = 5, 2*kern.mr, 2*kern.nr
		if is == isaGeneric {
			kern.kc = 1 // a K slice holding only the bias step
		}
		mr, nr := kern.mr, kern.nr
		shapes := [][3]int{
			{2 * mr, 2 * nr, 5}, {2*mr + 1, 2*nr + 1, 6}, {2*mr - 1, 2*nr - 1, 4},
			{4*mr + 3, 3*nr + 5, 11}, {5*mr - 2, 4*nr - 3, 16}, {mr + 1, 5*nr + 1, 10},
		}
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/t%d", is, threads), func(t *testing.T) {
				for si, s := range shapes {
					for v := range 4 {
						sc := gemmTestScalars[(si+v)%len(gemmTestScalars)]
						g := newGemmCase(r, v&1 != 0, v&2 != 0, s[0], s[1], s[2], v%2*3, sc[0], sc[1])
						g.check(t, &kern, threads)
						g.withBias(r).check(t, &kern, threads)
					}
				}
			})
		}
	}
}

// TestGemmDefaultBlocks crosses the real kc, nc and mc boundaries of the
// best kernel, one dimension at a time so the reference stays cheap.
func TestGemmDefaultBlocks(t *testing.T) {
	kern := gemmKernelFor(bestISA())
	r := rand.New(rand.NewPCG(5, 6))
	shapes := [][3]int{
		{30, 40, kern.kc + 1},
		{2*kern.mr + 1, kern.nc + kern.nr + 3, 20},
		{kern.mc + 5, 2*kern.nr + 1, 9},
	}
	for si, s := range shapes {
		for v := range 4 {
			sc := gemmTestScalars[(si+v)%len(gemmTestScalars)]
			g := newGemmCase(r, v&1 != 0, v&2 != 0, s[0], s[1], s[2], 1, sc[0], sc[1])
			g.check(t, kern, 1)
			g.check(t, kern, 2)
		}
	}
}

// TestGemmDegenerate covers k == 0 and alpha == 0 (C = beta·C) and empty C.
func TestGemmDegenerate(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	kern := gemmKernelFor(bestISA())
	for _, sc := range [][2]float32{{1, 0}, {0, 0}, {0, 1}, {0, -2}, {3, 0.5}} {
		for _, s := range [][3]int{{3, 4, 0}, {0, 4, 5}, {4, 0, 5}, {5, 6, 7}} {
			if sc[0] != 0 && s[2] != 0 {
				continue
			}
			g := newGemmCase(r, false, true, s[0], s[1], s[2], 2, sc[0], sc[1])
			g.check(t, kern, 2)
			g.withBias(r).check(t, kern, 2)
		}
	}
}

func TestGemmPanicsOnShortBuffers(t *testing.T) {
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	d.Gemm(false, false, 4, 4, 4, 1, make(F32, 16), 4, make(F32, 15), 4, 0, make(F32, 16), 4)
}

// gemmNaiveMatmul returns inp[N,C]·weight[OC,C]ᵀ + bias in float64.
func gemmNaiveMatmul(inp, weight, bias []float32, n, c, oc int) []float64 {
	out := make([]float64, n*oc)
	for i := range n {
		for o := range oc {
			var s float64
			if bias != nil {
				s = float64(bias[o])
			}
			for j := range c {
				s += float64(inp[i*c+j]) * float64(weight[o*c+j])
			}
			out[i*oc+o] = s
		}
	}
	return out
}

func gemmClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol*(1+math.Abs(want[i]))) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
}

func TestMatmul(t *testing.T) {
	gemmLowerMinWork(t)
	r := rand.New(rand.NewPCG(9, 10))
	for _, is := range gemmTestISAs() {
		for _, threads := range []int{1, 2} {
			d, err := New(Options{Threads: threads, ISA: is.String()})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range [][3]int{{1, 8, 5}, {7, 13, 33}, {30, 40, 50}, {64, 96, 17}} {
				n, c, oc := s[0], s[1], s[2]
				name := fmt.Sprintf("%s/n=%d,c=%d,oc=%d", d.Name(), n, c, oc)
				inp, w, bias := gemmRand(r, n*c), gemmRand(r, oc*c), gemmRand(r, oc)
				dout := gemmRand(r, n*oc)
				tol := 1e-5 * math.Sqrt(float64(max(c, n, oc)))

				out := make(F32, n*oc)
				for i := range out {
					out[i] = float32(math.NaN())
				}
				d.MatmulForward(out, F32(inp), F32(w), F32(bias), n, c, oc)
				gemmClose(t, name+" out", out, gemmNaiveMatmul(inp, w, bias, n, c, oc), tol)
				d.MatmulForward(out, F32(inp), F32(w), nil, n, c, oc)
				gemmClose(t, name+" out (no bias)", out, gemmNaiveMatmul(inp, w, nil, n, c, oc), tol)

				// dinp = dout·weight overwrites; dweight and dbias accumulate.
				wantDinp := make([]float64, n*c)
				for i := range n {
					for j := range c {
						for o := range oc {
							wantDinp[i*c+j] += float64(dout[i*oc+o]) * float64(w[o*c+j])
						}
					}
				}
				dw0, db0 := gemmRand(r, oc*c), gemmRand(r, oc)
				wantDw := make([]float64, oc*c)
				wantDb := make([]float64, oc)
				for o := range oc {
					wantDb[o] = float64(db0[o])
					for i := range n {
						wantDb[o] += float64(dout[i*oc+o])
					}
					for j := range c {
						s := float64(dw0[o*c+j])
						for i := range n {
							s += float64(dout[i*oc+o]) * float64(inp[i*c+j])
						}
						wantDw[o*c+j] = s
					}
				}
				dinp := make(F32, n*c)
				for i := range dinp {
					dinp[i] = float32(math.NaN())
				}
				dw := F32(append([]float32(nil), dw0...))
				db := F32(append([]float32(nil), db0...))
				d.MatmulBackward(dinp, dw, db, F32(dout), F32(inp), F32(w), n, c, oc)
				gemmClose(t, name+" dinp", dinp, wantDinp, tol)
				gemmClose(t, name+" dweight", dw, wantDw, tol)
				gemmClose(t, name+" dbias", db, wantDb, tol)

				// Each output alone, the others nil.
				dinp2 := make(F32, n*c)
				d.MatmulBackward(dinp2, nil, nil, F32(dout), F32(inp), F32(w), n, c, oc)
				gemmClose(t, name+" dinp alone", dinp2, wantDinp, tol)
				dw2 := F32(append([]float32(nil), dw0...))
				d.MatmulBackward(nil, dw2, nil, F32(dout), F32(inp), nil, n, c, oc)
				gemmClose(t, name+" dweight alone", dw2, wantDw, tol)
				db2 := F32(append([]float32(nil), db0...))
				d.MatmulBackward(nil, nil, db2, F32(dout), nil, nil, n, c, oc)
				gemmClose(t, name+" dbias alone", db2, wantDb, tol)
			}
		}
	}
}

// TestGemmRange checks that an owner claiming from the front and thieves
// stealing from the back hand out every column tile exactly once.
func TestGemmRange(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 64, 1000} {
		var r gemmRange
		r.set(5, 5+n)
		counts := make([]atomic.Int32, n+10)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					var first, end int
					var ok bool
					if g == 0 {
						first, end, ok = r.claimFront(3)
					} else {
						first, end, ok = r.claimBack(3)
					}
					if !ok {
						return
					}
					for x := first; x < end; x++ {
						counts[x].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		for x := range counts {
			want := int32(0)
			if x >= 5 && x < 5+n {
				want = 1
			}
			if got := counts[x].Load(); got != want {
				t.Fatalf("n=%d: tile %d claimed %d times", n, x, got)
			}
		}
		if r.left() != 0 {
			t.Fatalf("n=%d: %d left", n, r.left())
		}
	}
}
