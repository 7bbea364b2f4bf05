// Package kerneltest is the conformance suite of kernels backends: Run checks
// every op of kernels.Ops on a Device against naive float64 reference
// implementations (ref.go), and checks every backward kernel against finite
// differences of the device's own forward (gradcheck.go).
//
// A backend's test calls it once per configuration:
//
//	func TestConformance(t *testing.T) { kerneltest.Run(t, dev) }
//
// Each op is a subtest (Gemm, MatmulForward, ..., bf16/Gemm, ...,
// GradCheck/Attention, Golden/Llama: the LLaMA-family ops against PyTorch,
// golden_llama.go), so `go test -run 'Conformance/.*/LayerNorm'` selects
// one. Every buffer an op writes is a view into a larger allocation whose
// guard elements are checked afterwards, so writes past n are caught;
// outputs that an op must overwrite start out as NaN, and accumulated ones
// start out random. Every buffer a test allocates is freed when it ends.
//
// The bf16 tier (conformance_bf16.go) runs the ops whose operands the
// contract lets be BF16 with BF16 operands, against the same float64
// references on inputs rounded by the suite's own RefRoundBF16, so it does
// not take the backend's converter on trust.
package kerneltest

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
)

// RTol is the default relative tolerance for float32 kernels.
const RTol = 1e-5

// Run runs the whole conformance suite on dev.
func Run(t *testing.T, dev kernels.Device) {
	for _, c := range conformance {
		t.Run(c.name, func(t *testing.T) { runCase(t, dev, c.name, c.fn) })
	}
	t.Run("bf16", func(t *testing.T) {
		for _, c := range conformanceBF16 {
			t.Run(c.name, func(t *testing.T) { runCase(t, dev, "bf16/"+c.name, c.fn) })
		}
	})
	t.Run("GradCheck", func(t *testing.T) {
		for _, c := range gradChecks {
			t.Run(c.name, func(t *testing.T) { runCase(t, dev, "grad/"+c.name, c.fn) })
		}
	})
	t.Run("Golden", func(t *testing.T) {
		t.Run("Llama", func(t *testing.T) { runCase(t, dev, "golden/Llama", goldenLlama) })
	})
}

type testCase struct {
	name string
	fn   func(e *Env)
}

// runCase runs fn with a fresh Env, turning a panic (an unimplemented op,
// a bad index) into a test failure instead of a crash of the whole binary.
func runCase(t *testing.T, dev kernels.Device, name string, fn func(e *Env)) {
	t.Helper()
	e := NewEnv(t, dev, name)
	defer e.FreeAll()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	fn(e)
	e.CheckGuards()
}

// Env holds a device, a deterministic random source and the guarded
// buffers of one test.
type Env struct {
	T      *testing.T
	Dev    kernels.Device
	Rng    *rand.Rand
	guards []guarded
	allocs []kernels.Buffer // every buffer Alloc returned, for FreeAll
}

type guarded struct {
	whole kernels.Buffer
	n     int
}

// guardLen elements sit on each side of every buffer an Env hands out.
const guardLen = 19

// guardF32 and guardI32 are the values the guard elements hold.
const (
	guardF32 = float32(-1.2345678e33)
	guardI32 = int32(-123456789)
)

// guardBF16 is the bit pattern of the BF16 guard elements (about
// -3.85e31, exact in bf16).
const guardBF16 = uint16(0xf3f3)

// NewEnv returns an Env whose random source is seeded from name.
func NewEnv(t *testing.T, dev kernels.Device, name string) *Env {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &Env{T: t, Dev: dev, Rng: rand.New(rand.NewPCG(h.Sum64(), 0x5eed))}
}

// Alloc is Dev.Alloc that fails the test on an error.
func (e *Env) Alloc(dt kernels.DType, n int) kernels.Buffer {
	e.T.Helper()
	b, err := e.Dev.Alloc(dt, n)
	if err != nil {
		e.T.Fatalf("Alloc(%v, %d): %v", dt, n, err)
	}
	e.allocs = append(e.allocs, b)
	return b
}

// FreeAll frees every buffer Alloc returned (runCase calls it when a test
// ends, so a device's memory does not grow over the suite).
func (e *Env) FreeAll() {
	for _, b := range e.allocs {
		e.Dev.Free(b)
	}
	e.allocs, e.guards = nil, nil
}

// F32 uploads vals into a guarded F32 buffer of len(vals) elements.
func (e *Env) F32(vals []float32) kernels.Buffer {
	n := len(vals)
	whole := e.Alloc(kernels.F32, n+2*guardLen)
	host := make([]float32, n+2*guardLen)
	for i := range host {
		host[i] = guardF32
	}
	copy(host[guardLen:], vals)
	e.Dev.WriteF32(whole, host)
	e.guards = append(e.guards, guarded{whole, n})
	return whole.Slice(guardLen, n)
}

// I32 uploads vals into a guarded I32 buffer.
func (e *Env) I32(vals []int32) kernels.Buffer {
	n := len(vals)
	whole := e.Alloc(kernels.I32, n+2*guardLen)
	host := make([]int32, n+2*guardLen)
	for i := range host {
		host[i] = guardI32
	}
	copy(host[guardLen:], vals)
	e.Dev.WriteI32(whole, host)
	e.guards = append(e.guards, guarded{whole, n})
	return whole.Slice(guardLen, n)
}

// BF16 uploads vals rounded to bfloat16 by the suite's own RefRoundBF16
// into a guarded BF16 buffer of len(vals) elements. The values written are
// already bf16, so the buffer holds RefRoundBF16s(vals) whatever rounding
// the device's WriteF32 does (the bf16/Convert test checks that one); pass
// RefRoundBF16s(vals) to the references.
func (e *Env) BF16(vals []float32) kernels.Buffer {
	n := len(vals)
	whole := e.Alloc(kernels.BF16, n+2*guardLen)
	host := make([]float32, n+2*guardLen)
	for i := range host {
		host[i] = RefWidenBF16(guardBF16)
	}
	for i, v := range vals {
		host[guardLen+i] = RefRoundBF16(v)
	}
	e.Dev.WriteF32(whole, host)
	e.guards = append(e.guards, guarded{whole, n})
	return whole.Slice(guardLen, n)
}

// MaybeBF16 is BF16, or nil for a nil slice.
func (e *Env) MaybeBF16(vals []float32) kernels.Buffer {
	if vals == nil {
		return nil
	}
	return e.BF16(vals)
}

// MaybeI32 is I32, or nil for a nil slice.
func (e *Env) MaybeI32(vals []int32) kernels.Buffer {
	if vals == nil {
		return nil
	}
	return e.I32(vals)
}

// MaybeF32 is F32, or nil for a nil slice.
func (e *Env) MaybeF32(vals []float32) kernels.Buffer {
	if vals == nil {
		return nil
	}
	return e.F32(vals)
}

// NaNs returns a guarded F32 buffer of n NaNs (for outputs that must be
// overwritten).
func (e *Env) NaNs(n int) kernels.Buffer {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return e.F32(v)
}

// Read downloads an F32 buffer, or a BF16 one widened to float32.
func (e *Env) Read(b kernels.Buffer) []float32 {
	if err := e.Dev.Sync(); err != nil {
		e.T.Fatalf("Sync: %v", err)
	}
	out := make([]float32, b.Len())
	e.Dev.ReadF32(out, b)
	return out
}

// CheckGuards fails the test if an op wrote outside one of its buffers.
func (e *Env) CheckGuards() {
	e.T.Helper()
	if err := e.Dev.Sync(); err != nil {
		e.T.Fatalf("Sync: %v", err)
	}
	for gi, g := range e.guards {
		switch g.whole.DType() {
		case kernels.F32:
			host := make([]float32, g.whole.Len())
			e.Dev.ReadF32(host, g.whole)
			for i, v := range host {
				if (i < guardLen || i >= guardLen+g.n) && v != guardF32 {
					e.T.Fatalf("buffer %d (len %d): guard element %d overwritten with %g", gi, g.n, i-guardLen, v)
				}
			}
		case kernels.BF16:
			host := make([]float32, g.whole.Len())
			e.Dev.ReadF32(host, g.whole)
			for i, v := range host {
				if (i < guardLen || i >= guardLen+g.n) && math.Float32bits(v) != uint32(guardBF16)<<16 {
					e.T.Fatalf("buffer %d (bf16, len %d): guard element %d overwritten with %g (bits %#08x)", gi, g.n, i-guardLen, v, math.Float32bits(v))
				}
			}
		case kernels.I32:
			host := make([]int32, g.whole.Len())
			e.Dev.ReadI32(host, g.whole)
			for i, v := range host {
				if (i < guardLen || i >= guardLen+g.n) && v != guardI32 {
					e.T.Fatalf("buffer %d (len %d): guard element %d overwritten with %d", gi, g.n, i-guardLen, v)
				}
			}
		}
	}
}

// Randn returns n normal samples times scale.
func (e *Env) Randn(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(e.Rng.NormFloat64() * scale)
	}
	return v
}

// RandIDs returns n ids in [0,v).
func (e *Env) RandIDs(n, v int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(e.Rng.IntN(v))
	}
	return ids
}

// F64 widens a float32 slice.
func F64(x []float32) []float64 {
	if x == nil {
		return nil
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// Close fails the test unless |got-want| <= rtol·(|want| + rms(want)) for
// every element: relative where the value is large, and relative to the
// tensor's scale where it is near zero.
func (e *Env) Close(name string, got []float32, want []float64, rtol float64) {
	e.T.Helper()
	if msg := closeMsg(got, want, rtol); msg != "" {
		e.T.Fatalf("%s: %s", name, msg)
	}
}

func closeMsg(got []float32, want []float64, rtol float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	var ss float64
	for _, w := range want {
		ss += w * w
	}
	rms := math.Sqrt(ss / float64(max(1, len(want))))
	bad, worst, worstAt := 0, 0.0, -1
	first := ""
	for i, w := range want {
		g := float64(got[i])
		tol := rtol * (math.Abs(w) + rms)
		d := math.Abs(g - w)
		if !(d <= tol) { // NaN fails too
			if bad == 0 {
				first = fmt.Sprintf("first at [%d]: got %g, want %g", i, g, w)
			}
			bad++
		}
		if r := d / (math.Abs(w) + rms + 1e-300); r > worst || math.IsNaN(d) {
			worst, worstAt = r, i
			if math.IsNaN(d) {
				worst = math.Inf(1)
			}
		}
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d elements off (rtol %g, rms %g); %s; worst scaled error %.3g at [%d]", bad, len(want), rtol, rms, first, worst, worstAt)
}

// Equal fails the test unless got and want are bitwise equal.
func (e *Env) Equal(name string, got, want []float32) {
	e.T.Helper()
	if len(got) != len(want) {
		e.T.Fatalf("%s: length %d, want %d", name, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			e.T.Fatalf("%s: [%d] = %g, want exactly %g", name, i, got[i], want[i])
		}
	}
}

// add64 returns a + b elementwise (a new slice).
func add64(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}
