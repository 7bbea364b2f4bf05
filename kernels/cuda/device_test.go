package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/kerneltest"
)

func TestDeviceMemory(t *testing.T) {
	d, g := newFakeDevice(t, 1<<30)
	x := []float32{1, -2.5, float32(math.Inf(1)), 3e-39, 1 + 0x1p-8, 7}
	b := upload(t, d, kernels.F32, x)
	if got := read(d, b); fmt.Sprint(got) != fmt.Sprint(x) {
		t.Fatalf("F32 round trip: %v", got)
	}
	// BF16 rounds on the way in (nearest even, as the reference does).
	h := upload(t, d, kernels.BF16, x)
	for i, v := range read(d, h) {
		if want := kerneltest.RefRoundBF16(x[i]); math.Float32bits(v) != math.Float32bits(want) {
			t.Fatalf("bf16[%d] = %g, want %g", i, v, want)
		}
	}
	// A view at an odd element offset writes only its elements.
	v := h.Slice(1, 3)
	d.WriteF32(v, []float32{10, 20, 30})
	if got := read(d, h); got[0] != kerneltest.RefRoundBF16(x[0]) || got[1] != 10 || got[3] != 30 || got[4] != kerneltest.RefRoundBF16(x[4]) {
		t.Fatalf("view write: %v", got)
	}
	d.Zero(v)
	if got := read(d, h); got[1] != 0 || got[3] != 0 || got[4] == 0 {
		t.Fatalf("view zero: %v", got)
	}
	// Copy converts through the kernels (emulated here).
	f := upload(t, d, kernels.F32, make([]float32, len(x)))
	d.Copy(h, b)
	d.Copy(f, h)
	for i, v := range read(d, f) {
		if want := kerneltest.RefRoundBF16(x[i]); v != want && !(math.IsInf(float64(v), 1) && math.IsInf(float64(want), 1)) {
			t.Fatalf("Copy f32->bf16->f32 [%d] = %g, want %g", i, v, want)
		}
	}
	ids := []int32{3, -1, 1 << 30}
	ib, _ := d.Alloc(kernels.I32, 3)
	d.WriteI32(ib, ids)
	got := make([]int32, 3)
	d.ReadI32(got, ib)
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("I32 round trip: %v", got)
	}
	// Alloc zeroes recycled memory.
	d.WriteI32(ib, []int32{9, 9, 9})
	d.Free(ib)
	ib2, _ := d.Alloc(kernels.I32, 3)
	d.ReadI32(got, ib2)
	if got[0] != 0 || got[2] != 0 {
		t.Fatalf("recycled buffer not zeroed: %v", got)
	}
	if g.mem.allocs != 4 {
		t.Errorf("%d device allocations, want 4 (the freed block reused)", g.mem.allocs)
	}
}

func TestDeviceMemStatsAndFree(t *testing.T) {
	d, _ := newFakeDevice(t, 1<<30)
	a, _ := d.Alloc(kernels.BF16, 3001)
	b, _ := d.Alloc(kernels.F32, 10)
	if s := d.MemStats(); s.Live != 6002+40 || s.Peak != s.Live {
		t.Fatalf("MemStats %+v", s)
	}
	d.Free(a)
	d.Free(nil)
	if s := d.MemStats(); s.Live != 40 || s.Peak != 6042 {
		t.Fatalf("after Free: %+v", s)
	}
	mustPanic(t, "Free twice", "freed before", func() { d.Free(a) })
	mustPanic(t, "Free of a view", "did not Alloc", func() { d.Free(b.Slice(1, 2)) })
	d2, _ := newFakeDevice(t, 1<<20)
	mustPanic(t, "Free on another device", "did not Alloc", func() { d2.Free(b) })
	mustPanic(t, "Slice past the end", "Slice(5, 6)", func() { b.Slice(5, 6) })
	if _, err := d.Alloc(kernels.F16, 4); err == nil {
		t.Error("Alloc of F16 succeeded")
	}
	if _, err := d.Alloc(kernels.F32, -1); err == nil {
		t.Error("Alloc of -1 succeeded")
	}
	z, err := d.Alloc(kernels.F32, 0)
	if err != nil || z.Len() != 0 {
		t.Fatalf("Alloc of 0: %v %v", z, err)
	}
	d.WriteF32(z, nil)
	d.Free(z)
}

func TestDeviceOutOfMemory(t *testing.T) {
	d, _ := newFakeDevice(t, 8<<20)
	a, err := d.Alloc(kernels.F32, 1<<20) // 4 MiB
	if err != nil {
		t.Fatal(err)
	}
	c, _ := d.Alloc(kernels.F32, 100)
	d.Free(c)                                // 512 bytes cached
	_, err = d.Alloc(kernels.F32, 3<<20/2*2) // 6 MiB
	var oom *kernels.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("got %v, want *kernels.OutOfMemoryError", err)
	}
	want := kernels.OutOfMemoryError{Device: d.Name(), Want: 12 << 20, Live: 4 << 20, Cached: 512, DeviceFree: 4 << 20, DeviceTotal: 8 << 20}
	if *oom != want {
		t.Fatalf("got  %+v\nwant %+v", *oom, want)
	}
	d.Free(a)
}

// gemmRef is row-major C = alpha·op(A)·op(B) + beta·C in float64.
func gemmRef(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := kerneltest.F64(c)
	for i := range m {
		for j := range n {
			s := 0.0
			for l := range k {
				var av, bv float32
				if ta {
					av = a[l*lda+i]
				} else {
					av = a[i*lda+l]
				}
				if tb {
					bv = b[j*ldb+l]
				} else {
					bv = b[l*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			out[i*ldc+j] = v
		}
	}
	return out
}

// TestGemmMapping runs Gemm on the fake (whose cuBLAS is a column-major
// reference) against a row-major reference: transposes, padded leading
// dimensions, alpha/beta, bf16 operands (the F32 one rounded), k = 0.
func TestGemmMapping(t *testing.T) {
	d, g := newFakeDevice(t, 1<<30)
	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	mixes := [][2]kernels.DType{{kernels.F32, kernels.F32}, {kernels.BF16, kernels.F32}, {kernels.F32, kernels.BF16}, {kernels.BF16, kernels.BF16}}
	for _, sh := range [][3]int{{1, 1, 1}, {3, 5, 7}, {4, 6, 0}, {5, 2, 9}} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for mi, mix := range mixes {
					pad := mi
					ar, ac := m, k
					if ta {
						ar, ac = k, m
					}
					br, bc := k, n
					if tb {
						br, bc = n, k
					}
					lda, ldb, ldc := max(ac+pad, 1), max(bc+pad, 1), n+pad
					a, b, c := randn(ar*lda), randn(br*ldb), randn(m*ldc)
					alpha, beta := float32(-1.25), float32(0.5)
					if mi%2 == 1 {
						beta = 0
					}
					ab, bb, cb := upload(t, d, mix[0], a), upload(t, d, mix[1], b), upload(t, d, kernels.F32, c)
					d.Gemm(ta, tb, m, n, k, alpha, ab, lda, bb, ldb, beta, cb, ldc)
					ra, rb := a, b
					if mix[0] == kernels.BF16 || mix[1] == kernels.BF16 {
						ra, rb = kerneltest.RefRoundBF16s(a), kerneltest.RefRoundBF16s(b)
					}
					want := gemmRef(ta, tb, m, n, k, alpha, ra, lda, rb, ldb, beta, c, ldc)
					got := read(d, cb)
					for i := range want {
						if math.Abs(float64(got[i])-want[i]) > 1e-5*(1+math.Abs(want[i])) {
							t.Fatalf("Gemm %v ta=%v tb=%v m=%d n=%d k=%d: C[%d] = %g, want %g", mix, ta, tb, m, n, k, i, got[i], want[i])
						}
					}
					last := g.gemms[len(g.gemms)-1]
					if k > 0 && (last.aType == cudaR16BF) != (mix[0] == kernels.BF16 || mix[1] == kernels.BF16) {
						t.Fatalf("Gemm %v: cuBLAS types %d/%d", mix, last.aType, last.bType)
					}
					for _, x := range []kernels.Buffer{ab, bb, cb} {
						d.Free(x)
					}
				}
			}
		}
	}
	if _, cached, _, _ := d.CacheStats(); cached == 0 {
		t.Error("the conversion scratch did not go back to the cache")
	}
}

// TestMatmulOnFake checks MatmulForward/Backward's composition (the GEMM
// shapes, bias, the accumulating dweight and dbias, the bf16 rounding of
// dout and inp for dweight when the weight is BF16).
func TestMatmulOnFake(t *testing.T) {
	d, _ := newFakeDevice(t, 1<<30)
	rng := rand.New(rand.NewPCG(3, 4))
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	const n, c, oc = 5, 7, 3
	for _, wt := range []kernels.DType{kernels.F32, kernels.BF16} {
		inp, w, bias := randn(n*c), randn(oc*c), randn(oc)
		rnd := func(x []float32) []float32 {
			if wt == kernels.BF16 {
				return kerneltest.RefRoundBF16s(x)
			}
			return x
		}
		out, _ := d.Alloc(kernels.F32, n*oc)
		d.MatmulForward(out, upload(t, d, kernels.F32, inp), upload(t, d, wt, w), upload(t, d, wt, bias), n, c, oc)
		want := kerneltest.RefMatmulForward(kerneltest.F64(rnd(inp)), kerneltest.F64(rnd(w)), kerneltest.F64(rnd(bias)), n, c, oc)
		closeTo(t, fmt.Sprintf("MatmulForward %v", wt), read(d, out), want)

		dout, dw0, db0 := randn(n*oc), randn(oc*c), randn(oc)
		dinp, _ := d.Alloc(kernels.F32, n*c)
		dw, db := upload(t, d, kernels.F32, dw0), upload(t, d, kernels.F32, db0)
		d.MatmulBackward(dinp, dw, db, upload(t, d, kernels.F32, dout), upload(t, d, kernels.F32, inp), upload(t, d, wt, w), n, c, oc)
		rdi, rdw, _ := kerneltest.RefMatmulBackward(kerneltest.F64(rnd(dout)), kerneltest.F64(rnd(inp)), kerneltest.F64(rnd(w)), n, c, oc)
		_, _, rdb := kerneltest.RefMatmulBackward(kerneltest.F64(dout), kerneltest.F64(inp), kerneltest.F64(w), n, c, oc)
		closeTo(t, fmt.Sprintf("MatmulBackward %v dinp", wt), read(d, dinp), rdi)
		for i := range rdw {
			rdw[i] += float64(dw0[i])
		}
		for i := range rdb {
			rdb[i] += float64(db0[i])
		}
		closeTo(t, fmt.Sprintf("MatmulBackward %v dweight", wt), read(d, dw), rdw)
		closeTo(t, fmt.Sprintf("MatmulBackward %v dbias", wt), read(d, db), rdb)
	}
}

func closeTo(t *testing.T, name string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-5*(1+math.Abs(want[i])) {
			t.Fatalf("%s: [%d] = %g, want %g", name, i, got[i], want[i])
		}
	}
}

// The host-side scalars of the kernels that must reproduce the CPU
// backend element for element.
func TestDropoutGeneratorMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, p := range []float32{0, 0.1, 0.5, 0.999, 1} {
		for _, seed := range []uint64{0, 42, 1 << 63, rng.Uint64()} {
			key, thr, ks := dropoutParams(p, seed)
			if p == 0 && (ks != 1 || thr != 0) || p == 1 && ks != 0 {
				t.Fatalf("p=%g: scale %g, threshold %d", p, ks, thr)
			}
			for i := range 2000 {
				keep := splitmix(key+uint64(i+1)*dropGamma)>>40 >= thr
				if keep != kerneltest.RefDropoutKeep(seed, i, p) {
					t.Fatalf("p=%g seed=%d: element %d keep=%v, the reference says otherwise", p, seed, i, keep)
				}
			}
		}
	}
}

func TestToBF16MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 200000 {
		b := rng.Uint32()
		if i < 4 {
			b = []uint32{0x7fc00001, 0xff800001, 0x3f808000, 0x7f7fffff}[i]
		}
		f := math.Float32frombits(b)
		got, want := toBF16(f), kerneltest.RefBF16Bits(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(math.Float32frombits(uint32(got) << 16))) {
				t.Fatalf("%#x: NaN rounded to %#x", b, got)
			}
			continue
		}
		if got != want {
			t.Fatalf("toBF16(%#x) = %#x, want %#x", b, got, want)
		}
	}
}

func TestStreamAndAddr(t *testing.T) {
	d, g := newFakeDevice(t, 1<<20)
	b := upload(t, d, kernels.F32, []float32{1, 2, 3, 4})
	p, err := d.Addr(b)
	if err != nil || !g.inside(p) {
		t.Fatalf("Addr: %#x, %v", p, err)
	}
	// A view's address is the buffer's plus its offset in bytes.
	if q, err := d.Addr(b.Slice(2, 2)); err != nil || q != p+8 {
		t.Errorf("Addr of a view: %#x, want %#x (%v)", q, p+8, err)
	}
	other, _ := newFakeDevice(t, 1<<20)
	if _, err := other.Addr(b); err == nil || !strings.Contains(err.Error(), "not of") {
		t.Errorf("Addr of another device's buffer: %v", err)
	}
	if _, err := d.Addr(nil); err == nil {
		t.Error("Addr of a non-CUDA buffer accepted")
	}
	var got uintptr
	if err := d.OnStream(func(s uintptr) error { got = s; return nil }); err != nil || got != fakeStream {
		t.Errorf("OnStream gave %#x, %v", got, err)
	}
	if done, err := d.StreamDone(); !done || err != nil {
		t.Errorf("StreamDone: %v %v", done, err)
	}
	d.fail(errors.New("a kernel fault"))
	if _, err := d.StreamDone(); err == nil {
		t.Error("StreamDone after a deferred error: no error")
	}
}

// TestMemInfo: the device reports the driver's free and total memory, and
// free drops by the rounded block of an allocation (the caching allocator
// holds it from the device).
func TestMemInfo(t *testing.T) {
	d, _ := newFakeDevice(t, 64<<20)
	free, total, err := d.MemInfo()
	if err != nil || total != 64<<20 || free != total {
		t.Fatalf("MemInfo = %d, %d, %v; want all 64 MiB free", free, total, err)
	}
	b, err := d.Alloc(kernels.F32, (3<<20)/4) // 3 MiB: a 4 MiB block
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(b)
	if f, _, _ := d.MemInfo(); f != free-4<<20 {
		t.Errorf("free after a 3 MiB buffer: %d, want %d", f, free-4<<20)
	}
}

// TestMemLimit: Options.MemLimit reaches the allocator and MemInfo. A
// device capped at 16 MiB of a 64 MiB GPU reports 16 MiB total and free,
// less what it holds after an allocation (cached blocks included); an
// allocation past the cap fails with a *kernels.OutOfMemoryError that
// names the cap, the request and what is live, before the driver is
// asked; freeing makes room again. A cap above the GPU's memory leaves
// the driver's figures.
func TestMemLimit(t *testing.T) {
	g := newFakeGPU(t, 64<<20)
	d, err := newDevice(g, "cuda:0 (fake, sm_90)", 90, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if s := d.MemStats(); s.Limit != 16<<20 {
		t.Fatalf("MemStats().Limit = %d, want 16 MiB", s.Limit)
	}
	free, total, err := d.MemInfo()
	if err != nil || free != 16<<20 || total != 16<<20 {
		t.Fatalf("MemInfo = %d, %d, %v; want 16 MiB of 16 MiB", free, total, err)
	}
	a, err := d.Alloc(kernels.F32, (3<<20)/4) // 3 MiB: a 4 MiB block
	if err != nil {
		t.Fatal(err)
	}
	if f, _, _ := d.MemInfo(); f != 12<<20 {
		t.Errorf("free after a 3 MiB buffer: %d, want 12 MiB", f)
	}
	allocsBefore := g.mem.allocs
	_, err = d.Alloc(kernels.F32, (14<<20)/4) // 14 MiB on top of 4
	var oom *kernels.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("an allocation past the limit: %v, want *kernels.OutOfMemoryError", err)
	}
	if oom.Limit != 16<<20 || oom.Want != 14<<20 || oom.Live != 3<<20 {
		t.Errorf("got %+v, want Limit 16 MiB, Want 14 MiB, Live 3 MiB", *oom)
	}
	for _, want := range []string{"exceeds the limit of 16.00 MiB", "a buffer of 14.00 MiB", "3.00 MiB live"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if g.mem.allocs != allocsBefore {
		t.Errorf("the driver was asked for memory past the limit")
	}
	d.Free(a)
	b, err := d.Alloc(kernels.F32, (14<<20)/4)
	if err != nil {
		t.Fatalf("14 MiB after freeing: %v", err)
	}
	d.Free(b)

	big, err := newDevice(newFakeGPU(t, 8<<20), "cuda:0 (fake, sm_90)", 90, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if free, total, _ := big.MemInfo(); free != 8<<20 || total != 8<<20 {
		t.Errorf("a cap above the GPU: MemInfo %d of %d, want the GPU's 8 MiB", free, total)
	}
}
