package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// bf16Case is one gemmBF16 call: a gemmCase whose A and B are each passed
// as an F32 buffer (rounded by the kernel) or a BF16 one.
type bf16Case struct {
	*gemmCase
	aBF, bBF bool
	ah, bh   []uint16 // the BF16 operands, when aBF / bBF
}

// newBF16Case makes a gemmCase (see newGemmCase) with some exact bf16
// rounding ties among the F32 values, and BF16 copies of the operands
// that are BF16.
func newBF16Case(r *rand.Rand, transA, transB bool, m, n, k, pad int, alpha, beta float32, aBF, bBF bool) *bf16Case {
	g := &bf16Case{gemmCase: newGemmCase(r, transA, transB, m, n, k, pad, alpha, beta), aBF: aBF, bBF: bBF}
	gemmBF16Ties(r, g.a)
	gemmBF16Ties(r, g.b)
	if aBF {
		g.ah = make([]uint16, len(g.a))
		for i, v := range g.a {
			g.ah[i] = ToBF16(v)
		}
	}
	if bBF {
		g.bh = make([]uint16, len(g.b))
		for i, v := range g.b {
			g.bh[i] = ToBF16(v)
		}
	}
	return g
}

// gemmBF16Ties replaces about one value in eight by a value exactly
// halfway between two bf16 neighbours (low half 0x8000), so that rounding
// to nearest even decides.
func gemmBF16Ties(r *rand.Rand, x []float32) {
	for i := range x {
		if r.IntN(8) == 0 {
			x[i] = math.Float32frombits(math.Float32bits(x[i])&0xffff0000 | 0x8000)
		}
	}
}

func (g *bf16Case) String() string {
	kind := func(bf bool) string {
		if bf {
			return "bf16"
		}
		return "f32"
	}
	return fmt.Sprintf("%v A=%s B=%s", g.gemmCase, kind(g.aBF), kind(g.bBF))
}

// bufs returns A and B as gemmBF16 takes them.
func (g *bf16Case) bufs() (a, b kernels.Buffer) {
	a, b = F32(g.a), F32(g.b)
	if g.aBF {
		a = BF16(g.ah)
	}
	if g.bBF {
		b = BF16(g.bh)
	}
	return a, b
}

// run calls gemmBF16 through im on a copy of C and returns it.
func (g *bf16Case) run(im *gemmBF16Impl, threads int) []float32 {
	c := append([]float32(nil), g.c...)
	a, b := g.bufs()
	gemmBF16With(im, threads, g.transA, g.transB, g.m, g.n, g.k, g.alpha, gemmBF16Src(a), g.lda, gemmBF16Src(b), g.ldb, g.beta, g.bias, c, g.ldc)
	return c
}

// check compares gemmBF16 through im with a float64 reference on the
// bf16-rounded operands. The tolerance is the worst-case error of an fp32
// sum of the k+3 terms (products, beta·C, bias; the products of two bf16
// values are exact in fp32): 2·(k+4)·u·Σ|term| with u = 2⁻²⁴, as in
// gemmCase.check, plus 1e-30 for the flushed denormals of the tile
// kernels.
func (g *bf16Case) check(t *testing.T, im *gemmBF16Impl, threads int) {
	t.Helper()
	c := g.run(im, threads)
	opA := func(i, p int) float64 {
		o := i*g.lda + p
		if g.transA {
			o = p*g.lda + i
		}
		return float64(FromBF16(ToBF16(g.a[o])))
	}
	opB := func(p, j int) float64 {
		o := p*g.ldb + j
		if g.transB {
			o = j*g.ldb + p
		}
		return float64(FromBF16(ToBF16(g.b[o])))
	}
	const u = 0x1p-24
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
			tol := 2*float64(g.k+4)*u*mag + 1e-30
			got := float64(c[i*g.ldc+j])
			if !(math.Abs(got-want) <= tol) {
				if bad < 5 {
					t.Errorf("%s %v: c[%d,%d] = %g, want %g (tol %g)", im.name, g, i, j, got, want, tol)
				}
				bad++
			}
		}
		for j := g.n; j < g.ldc && i*g.ldc+j < len(c); j++ {
			if c[i*g.ldc+j] != 12345 {
				t.Fatalf("%s %v: wrote padding c[%d,%d] = %g", im.name, g, i, j, c[i*g.ldc+j])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s %v: %d wrong elements", im.name, g, bad)
	}
}

// gemmBF16TestImpls is every implementation this CPU runs, plus the tile
// driver with the portable strip and packers (gemmTileGo).
func gemmBF16TestImpls() []*gemmBF16Impl {
	return append(gemmBF16Impls(), &gemmBF16TileGo)
}

var (
	gemmTileGo = gemmTileKernel{
		name: "tile-go",
		kc:   64, mc: 64, nc: 64,
		strip: gemmTileStripGo,
		packA: gemmTilePackA,
		packB: gemmTilePackB,
	}
	gemmBF16TileGo = gemmBF16Impl{name: "tile-go", fp32: &gemmGeneric, tile: &gemmTileGo}
)

// TestGemmBF16 compares every implementation, thread count, transpose
// variant and F32/BF16 operand mix with the float64 reference over
// assorted shapes: 1, odd, prime, tile multiples ±1, and skinny.
func TestGemmBF16(t *testing.T) {
	gemmLowerMinWork(t)
	shapes := [][3]int{
		{1, 1, 1}, {1, 7, 5}, {7, 1, 5}, {1, 40, 1}, {40, 1, 1}, {3, 3, 1},
		{2, 2, 2}, {5, 3, 7}, {13, 17, 19}, {31, 33, 17}, {32, 32, 32}, {33, 31, 31},
		{16, 16, 64}, {17, 15, 63}, {64, 64, 65}, {2, 100, 70}, {100, 2, 70},
		{1, 300, 129}, {257, 1, 33}, {4, 70, 45}, {8, 33, 100}, {9, 40, 50},
		{3, 33, 1}, {45, 70, 97},
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, im := range gemmBF16TestImpls() {
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/t%d", im.name, threads), func(t *testing.T) {
				for si, s := range shapes {
					for v := range 4 {
						sc := gemmTestScalars[(si+v)%len(gemmTestScalars)]
						mix := (si + v + threads) % 4
						g := newBF16Case(r, v&1 != 0, v&2 != 0, s[0], s[1], s[2], (si+v)%3*5, sc[0], sc[1], mix&1 != 0, mix&2 != 0)
						g.check(t, im, threads)
						if (si+v)%3 == 0 {
							g.withBias(r)
							g.check(t, im, threads)
						}
					}
				}
			})
		}
	}
}

// TestGemmBF16Blocks shrinks the cache blocks of the tile kernels so that
// small shapes straddle every mc, kc and nc boundary and the thread split
// lands mid-block, and crosses the real ones once.
func TestGemmBF16Blocks(t *testing.T) {
	gemmLowerMinWork(t)
	r := rand.New(rand.NewPCG(13, 14))
	for _, im := range gemmBF16TestImpls() {
		if im.tile == nil {
			continue
		}
		small := *im.tile
		small.kc, small.mc, small.nc = 64, 64, 64
		smallIm := *im
		smallIm.tile = &small
		shapes := [][3]int{
			{64, 64, 64}, {65, 65, 65}, {63, 63, 63}, {131, 99, 150}, {70, 161, 129}, {33, 200, 31},
		}
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/t%d", im.name, threads), func(t *testing.T) {
				for si, s := range shapes {
					for v := range 4 {
						sc := gemmTestScalars[(si+v)%len(gemmTestScalars)]
						mix := (si + v) % 4
						g := newBF16Case(r, v&1 != 0, v&2 != 0, s[0], s[1], s[2], v%2*3, sc[0], sc[1], mix&1 != 0, mix&2 != 0)
						g.check(t, &smallIm, threads)
						g.withBias(r)
						g.check(t, &smallIm, threads)
					}
				}
			})
		}
		// The real blocking: K across kc (±1, and a large K of several
		// slices), N across nc, M across mc.
		kern := im.tile
		for si, s := range [][3]int{{40, 36, kern.kc + 1}, {40, 36, kern.kc - 1}, {20, 20, 3*kern.kc + 37}, {33, kern.nc + 40, 20}, {kern.mc + 20, 40, 17}} {
			for v := range 4 {
				sc := gemmTestScalars[(si+v)%len(gemmTestScalars)]
				g := newBF16Case(r, v&1 != 0, v&2 != 0, s[0], s[1], s[2], 1, sc[0], sc[1], v&1 == 0, true)
				g.check(t, im, 2)
			}
		}
	}
}

// TestGemmBF16Degenerate covers k == 0 and alpha == 0 (C = beta·C + bias)
// and empty C.
func TestGemmBF16Degenerate(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, im := range gemmBF16TestImpls() {
		for _, sc := range [][2]float32{{1, 0}, {0, 0}, {0, 1}, {0, -2}, {3, 0.5}} {
			for _, s := range [][3]int{{3, 4, 0}, {0, 4, 5}, {4, 0, 5}, {5, 6, 7}} {
				if sc[0] != 0 && s[2] != 0 {
					continue
				}
				g := newBF16Case(r, false, true, s[0], s[1], s[2], 2, sc[0], sc[1], false, true)
				g.check(t, im, 2)
				g.withBias(r)
				g.check(t, im, 2)
			}
		}
	}
}

// TestGemmBF16NonFinite checks that NaNs and infinities in the operands
// reach C as they do through the fp32 GEMM on the rounded operands
// (gemmBF16Ref): a NaN in A makes its row NaN, an infinity in B makes its
// column infinite, or NaN where it meets a zero of A.
func TestGemmBF16NonFinite(t *testing.T) {
	gemmLowerMinWork(t)
	r := rand.New(rand.NewPCG(17, 18))
	for _, im := range gemmBF16TestImpls() {
		for _, s := range [][3]int{{1, 40, 37}, {40, 1, 37}, {5, 40, 37}, {40, 45, 70}} {
			for v := range 4 {
				for mix := range 4 {
					g := newBF16Case(r, v&1 != 0, v&2 != 0, s[0], s[1], s[2], 1, 1, 0, mix&1 != 0, mix&2 != 0)
					m, n, k := s[0], s[1], s[2]
					aAt := func(i, p int) int {
						if g.transA {
							return p*g.lda + i
						}
						return i*g.lda + p
					}
					bAt := func(p, j int) int {
						if g.transB {
							return j*g.ldb + p
						}
						return p*g.ldb + j
					}
					set := func(x []float32, h []uint16, o int, v float32) {
						x[o] = v
						if h != nil {
							h[o] = ToBF16(v)
						}
					}
					nan := math.Float32frombits(0x7f800001) // signalling NaN
					set(g.a, g.ah, aAt(m-1, k/2), nan)
					set(g.b, g.bh, bAt(k/3, n-1), float32(math.Inf(1)))
					set(g.a, g.ah, aAt(0, k/3), 0)
					set(g.b, g.bh, bAt(k-1, 0), float32(math.Inf(-1)))
					set(g.a, g.ah, aAt(m/2, k-1), 3e38) // rounds to +Inf in bf16 (F32 operand)
					got := g.run(im, 2)
					want := append([]float32(nil), g.c...)
					a, b := g.bufs()
					gemmBF16Ref(isaGeneric, 1, g.transA, g.transB, m, n, k, g.alpha, a, g.lda, b, g.ldb, g.beta, g.bias, want, g.ldc)
					for i := range m {
						for j := range n {
							x, y := float64(got[i*g.ldc+j]), float64(want[i*g.ldc+j])
							if math.IsNaN(x) != math.IsNaN(y) || math.IsInf(y, 0) && x != y || !math.IsInf(y, 0) && math.IsInf(x, 0) {
								t.Fatalf("%s %v: c[%d,%d] = %g, want %g", im.name, g, i, j, x, y)
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmBF16MatchesRef runs the reference beside each implementation on
// a mid-sized product, a sanity check of gemmBF16Ref itself and of the
// dispatch through gemmBF16.
func TestGemmBF16MatchesRef(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, is := range gemmTestISAs() {
		g := newBF16Case(r, false, true, 37, 45, 70, 0, 1, 0, false, true)
		a, b := g.bufs()
		got := append([]float32(nil), g.c...)
		want := append([]float32(nil), g.c...)
		gemmBF16(is, 2, false, true, g.m, g.n, g.k, 1, a, g.lda, b, g.ldb, 0, nil, got, g.ldc)
		gemmBF16Ref(is, 2, false, true, g.m, g.n, g.k, 1, a, g.lda, b, g.ldb, 0, nil, want, g.ldc)
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s: c[%d] = %g, reference %g", is, i, got[i], want[i])
			}
		}
	}
}

// TestGemmTilePack compares the assembly-backed packers of each tile
// kernel with the portable ones, value for value, on whole and partial
// panels, both transposes and both operand types, with NaN, infinities,
// ties and values that overflow bf16 among the F32 values. Denormal F32
// values are flushed to signed zeros by VCVTNE2PS2BF16 (the products
// would flush them anyway) but rounded by ToBF16 in the Go parts, so
// either is accepted for them: the expected panels are packed from the
// values and from a copy with denormals flushed.
func TestGemmTilePack(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, im := range gemmBF16Impls() {
		if im.tile == nil {
			continue
		}
		kern := im.tile
		for trial := range 200 {
			trans := trial%2 == 1
			bf := trial%4 >= 2
			rows := []int{32, 32, 31, 17, 16, 1, 15, 64, 70, 100, 33}[trial%11] // B: columns
			kc := []int{32, 64, 96, 33, 65, 1, 31, 130}[trial%8]
			i0, p0 := r.IntN(5), r.IntN(7)
			// A is (i0+rows)×(p0+kc) stored row-major, or transposed.
			ar, ac := i0+rows, p0+kc
			if trans {
				ar, ac = ac, ar
			}
			ld := ac + r.IntN(4)
			n := (ar-1)*ld + ac
			f := gemmRand(r, n)
			gemmBF16Ties(r, f)
			specials := []uint32{0x7fc00000, 0x7f800001, 0x7f800000, 0xff800000, 0x7f7fffff, 0x00000001, 0x807fffff, 0x80000000}
			for x := range 6 {
				f[r.IntN(n)] = math.Float32frombits(specials[(trial+x)%len(specials)])
			}
			flushed := make([]float32, n)
			h := make([]uint16, n)
			for x, v := range f {
				flushed[x] = v
				if b := math.Float32bits(v); b&0x7f800000 == 0 {
					flushed[x] = math.Float32frombits(b & 0x80000000)
				}
				h[x] = ToBF16(v)
			}
			src, ref := gemmSrc{f: f, round: true}, gemmSrc{f: flushed, round: true}
			if bf {
				src = gemmSrc{h: h, bf: true}
				ref = src
			}
			size := (kc + 31) / 32 * gemmTileBlock * ((rows + 31) / 32)
			got, want, want2 := make([]uint16, size), make([]uint16, size), make([]uint16, size)
			for x := range got {
				got[x] = 0xdead // every value must be written
			}
			// As an A panel: up to 32 rows of op(A).
			ra := min(rows, 32)
			kern.packA(got, trans, src, ld, i0, p0, ra, kc)
			gemmTilePackA(want, trans, src, ld, i0, p0, ra, kc)
			gemmTilePackA(want2, trans, ref, ld, i0, p0, ra, kc)
			na := (kc + 31) / 32 * gemmTileBlock
			gemmComparePanels(t, fmt.Sprintf("%s packA trans=%v bf=%v rows=%d kc=%d", kern.name, trans, bf, ra, kc), got[:na], want[:na], want2[:na])
			// As B panels: the same storage read as op(B) with columns
			// = rows; op(B)[p, j] is A's (j, p) when transB == !transA.
			for x := range got {
				got[x] = 0xdead
			}
			kern.packB(got, !trans, src, ld, p0, i0, rows, kc)
			gemmTilePackB(want, !trans, src, ld, p0, i0, rows, kc)
			gemmTilePackB(want2, !trans, ref, ld, p0, i0, rows, kc)
			gemmComparePanels(t, fmt.Sprintf("%s packB trans=%v bf=%v cols=%d kc=%d", kern.name, !trans, bf, rows, kc), got, want, want2)
		}
	}
}

// gemmComparePanels fails unless each element of got is that of want or
// of want2.
func gemmComparePanels(t *testing.T, what string, got, want, want2 []uint16) {
	t.Helper()
	for x := range want {
		if got[x] != want[x] && got[x] != want2[x] {
			t.Fatalf("%s: element %d (block %d, offset %d) = %#04x, want %#04x", what, x, x/gemmTileBlock, x%gemmTileBlock, got[x], want[x])
		}
	}
}

// TestGemmBF16Skinny covers the matrix-vector and skinny paths: one to
// nine rows (or one column) against F32 and BF16 matrices in both
// orientations, with column counts and depths around the kernels' runs
// of 16, 32 and 64.
func TestGemmBF16Skinny(t *testing.T) {
	gemmLowerMinWork(t)
	old := gemmBF16SkinnyMax
	gemmBF16SkinnyMax = 8
	t.Cleanup(func() { gemmBF16SkinnyMax = old })
	r := rand.New(rand.NewPCG(23, 24))
	for _, im := range gemmBF16TestImpls() {
		t.Run(im.name, func(t *testing.T) {
			x := 0
			for m := 1; m <= 9; m++ {
				for _, n := range []int{1, 16, 17, 65, 130} {
					for _, k := range []int{1, 16, 17, 31, 65, 96, 100} {
						for v := range 4 {
							x++
							sc := gemmTestScalars[x%len(gemmTestScalars)]
							g := newBF16Case(r, v&1 != 0, v&2 != 0, m, n, k, x%3*2, sc[0], sc[1], x%2 == 0, x%3 != 0)
							if x%5 == 0 {
								g.withBias(r)
							}
							g.check(t, im, 1+x%3)
						}
					}
				}
			}
		})
	}
}

// gemmTileStripGo is a portable strip (see gemmTileKernel.strip), to test
// the tile driver and packing without the assembly kernels.
func gemmTileStripGo(a, b *uint16, kb, nb int, c *float32, ldc, rows, cols int, alpha, beta float32, bias *float32, direct bool, tile *float32) {
	ap := unsafe.Slice(a, kb*gemmTileBlock)
	bp := unsafe.Slice(b, nb*kb*gemmTileBlock)
	cs := unsafe.Slice(c, (rows-1)*ldc+cols)
	var bs []float32
	if bias != nil {
		bs = unsafe.Slice(bias, cols)
	}
	for j := range cols {
		pan := bp[j/gemmTileNR*kb*gemmTileBlock:]
		jj := j % gemmTileNR
		for i := range rows {
			var acc float32
			for q := range kb {
				for x := range gemmTileKB {
					av := FromBF16(ap[q*gemmTileBlock+i*32+x])
					bv := FromBF16(pan[gemmTileBIndex(q*gemmTileKB+x, jj)])
					acc += av * bv
				}
			}
			v := alpha * acc
			if beta != 0 {
				v += beta * cs[i*ldc+j]
			}
			if bs != nil {
				v += bs[j]
			}
			cs[i*ldc+j] = v
		}
	}
}

// TestGemmBF16PortableExact: the portable path (the fp32 kernel on panels
// packed from regions converted to float32 a row at a time, gemmConvert)
// equals the same fp32 kernel run on rounded copies of the operands bit
// for bit: with whole and partial panels, several K slices, A and B
// blocks (the kernel's blocks shrunk so that small shapes cross them), a
// bias, both transposes, both operand types, 1-3 goroutines, and denormal,
// tie and overflowing values among the F32 operands.
func TestGemmBF16PortableExact(t *testing.T) {
	gemmLowerMinWork(t)
	r := rand.New(rand.NewPCG(23, 24))
	for _, im := range gemmBF16TestImpls() {
		if im.tile != nil {
			continue
		}
		small := *im.fp32
		small.kc, small.mc, small.nc = 37, 2*small.mr, 2*small.nr
		for _, kern := range []*gemmKernel{im.fp32, &small} {
			run := *im
			run.fp32 = kern
			for si, s := range [][3]int{{20, 40, 33}, {45, 70, 97}, {29, 65, 130}, {70, 100, 16}} {
				for v := range 4 {
					for mix := range 4 {
						sc := gemmTestScalars[(si+v+mix)%len(gemmTestScalars)]
						g := newBF16Case(r, v&1 != 0, v&2 != 0, s[0], s[1], s[2], (si+mix)%3*3, sc[0], sc[1], mix&1 != 0, mix&2 != 0)
						for i := range g.a {
							switch i % 97 {
							case 3:
								g.a[i] = math.Float32frombits(0x00012345) // denormal
							case 5:
								g.a[i] = -3.3e38 // rounds to -Inf in bf16
							}
						}
						if (si+v)%2 == 0 {
							g.withBias(r)
						}
						threads := 1 + (si+v+mix)%3
						got := g.run(&run, threads)
						want := append([]float32(nil), g.c...)
						a, b := g.bufs()
						gemmBias(kern, threads, g.transA, g.transB, g.m, g.n, g.k, g.alpha, gemmRoundedF32(a), g.lda, gemmRoundedF32(b), g.ldb, g.beta, g.bias, want, g.ldc)
						for x := range got {
							if math.Float32bits(got[x]) != math.Float32bits(want[x]) {
								t.Fatalf("%s kc=%d %v t%d: c[%d] = %g, the fp32 GEMM on rounded operands %g", im.name, kern.kc, g, threads, x, got[x], want[x])
							}
						}
					}
				}
			}
		}
	}
}
