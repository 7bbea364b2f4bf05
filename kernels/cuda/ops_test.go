package cuda

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
)

// opsEnv allocates the buffers of the ops tests on a fake device.
type opsEnv struct {
	t *testing.T
	d *Device
	g *fakeGPU
}

func (e opsEnv) f(n int) kernels.Buffer { return e.buf(kernels.F32, n) }
func (e opsEnv) h(n int) kernels.Buffer { return e.buf(kernels.BF16, n) }
func (e opsEnv) i(n int) kernels.Buffer { return e.buf(kernels.I32, n) }
func (e opsEnv) buf(dt kernels.DType, n int) kernels.Buffer {
	b, err := e.d.Alloc(dt, n)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// opCalls calls every op of kernels.Ops with valid operands (the LLaMA
// and GQA ones with NKV < NH, BF16 weights where the contract allows
// them). Each entry names the op.
func opCalls(e opsEnv) []struct {
	name string
	call func()
} {
	d := e.d
	const (
		n, c, oc, v   = 6, 8, 5, 11
		b, t, nh, hs  = 2, 5, 4, 16
		nkv, tmax     = 2, 9
		g, ld, maxPos = 3, 40, 16
	)
	w := (nh + 2*nkv) * hs
	return []struct {
		name string
		call func()
	}{
		{"Gemm", func() { d.Gemm(true, false, 3, 4, 5, 1, e.f(5*3), 3, e.h(5*4), 4, 0, e.f(12), 4) }},
		{"Gemm", func() { d.Gemm(false, false, 3, 4, 0, 1, e.f(1), 1, e.f(1), 4, 0.5, e.f(12), 4) }},
		{"MatmulForward", func() { d.MatmulForward(e.f(n*oc), e.f(n*c), e.h(oc*c), e.h(oc), n, c, oc) }},
		{"MatmulBackward", func() { d.MatmulBackward(e.f(n*c), e.f(oc*c), e.f(oc), e.f(n*oc), e.f(n*c), e.h(oc*c), n, c, oc) }},
		{"AddBias", func() { d.AddBias(e.f(n*c), e.h(c), n, c) }},
		{"Add", func() { d.Add(e.f(n), e.f(n), e.h(n), n) }},
		{"Scale", func() { d.Scale(e.f(n), 2, n) }},
		{"Mul", func() { d.Mul(e.f(n), e.f(n), e.f(n), n) }},
		{"EmbeddingForward", func() { d.EmbeddingForward(e.f(n*c), e.i(n), e.h(v*c), n, c) }},
		{"EmbeddingBackward", func() { d.EmbeddingBackward(e.f(v*c), e.f(n*c), e.i(n), n, c) }},
		{"LayerNormForward", func() { d.LayerNormForward(e.f(n*c), e.f(n), e.f(n), e.f(n*c), e.h(c), e.f(c), n, c, 1e-5) }},
		{"LayerNormBackward", func() {
			d.LayerNormBackward(e.f(n*c), e.f(c), e.f(c), e.f(n*c), e.f(n*c), e.h(c), e.f(n), e.f(n), n, c)
		}},
		{"ReLUForward", func() { d.ReLUForward(e.f(n), e.f(n), n) }},
		{"ReLUBackward", func() { d.ReLUBackward(e.f(n), e.f(n), e.f(n), n) }},
		{"GELUForward", func() { d.GELUForward(e.f(n), e.f(n), n) }},
		{"GELUBackward", func() { d.GELUBackward(e.f(n), e.f(n), e.f(n), n) }},
		{"SoftmaxForward", func() { d.SoftmaxForward(e.f(n*c), e.f(n*c), n, c) }},
		{"AttentionForward", func() { d.AttentionForward(e.f(b*t*nh*hs), e.f(b*nh*t*t), e.f(b*t*3*nh*hs), e.i(b*t), b, t, nh, hs) }},
		{"AttentionBackward", func() {
			d.AttentionBackward(e.f(b*t*3*nh*hs), e.f(b*t*nh*hs), e.f(b*t*3*nh*hs), e.f(b*nh*t*t), nil, b, t, nh, hs)
		}},
		{"AttentionDecode", func() {
			d.AttentionDecode(e.f(b*2*nh*hs), e.f(b*2*3*nh*hs), e.f(b*tmax*nh*hs), e.f(b*tmax*nh*hs), e.i(b*tmax), b, 2, 3, tmax, nh, hs)
		}},
		{"RMSNormForward", func() { d.RMSNormForward(e.f(n*c), e.f(n), e.f(n*c), e.h(c), n, c, 1e-6) }},
		{"RMSNormBackward", func() { d.RMSNormBackward(e.f(n*c), e.f(c), e.f(n*c), e.f(n*c), e.f(c), e.f(n), n, c) }},
		{"HeadRMSNormForward", func() { d.HeadRMSNormForward(e.f(n*ld), e.f(n*g), e.f(n*ld), e.f(c), n, g, c, ld, 1e-6) }},
		{"HeadRMSNormBackward", func() {
			x := e.f(n * ld)
			d.HeadRMSNormBackward(x, e.f(c), x, e.f(n*ld), e.h(c), e.f(n*g), n, g, c, ld)
		}},
		{"RoPEForward", func() { d.RoPEForward(e.f(n*ld), e.i(n), e.f(maxPos*4), e.f(maxPos*4), n, 3, 8, ld) }},
		{"RoPEBackward", func() { d.RoPEBackward(e.f(n*ld), e.i(n), e.f(maxPos*4), e.f(maxPos*4), n, 3, 8, ld) }},
		{"SwiGLUForward", func() { d.SwiGLUForward(e.f(n*c), e.f(2*n*c), n, c) }},
		{"SwiGLUBackward", func() { d.SwiGLUBackward(e.f(2*n*c), e.f(n*c), e.f(2*n*c), n, c) }},
		{"GQAAttentionForward", func() { d.GQAAttentionForward(e.f(b*t*nh*hs), e.f(b*nh*t*t), e.f(b*t*w), e.i(b*t), b, t, nh, nkv, hs) }},
		{"GQAAttentionBackward", func() {
			d.GQAAttentionBackward(e.f(b*t*w), e.f(b*t*nh*hs), e.f(b*t*w), e.f(b*nh*t*t), e.i(b*t), b, t, nh, nkv, hs)
		}},
		{"FlashAttentionForward", func() { d.FlashAttentionForward(e.f(b*t*nh*hs), e.f(b*nh*t), e.f(b*t*w), e.i(b*t), b, t, nh, nkv, hs) }},
		{"FlashAttentionBackward", func() {
			d.FlashAttentionBackward(e.f(b*t*w), e.f(b*t*nh*hs), e.f(b*t*w), e.f(b*nh*t), e.i(b*t), b, t, nh, nkv, hs)
		}},
		{"FlashAttentionForward", func() {
			d.FlashAttentionForward(e.f(b*t*3*nh*hs), e.f(b*nh*t), e.f(b*t*3*nh*hs), nil, b, t, nh, nh, hs)
		}},
		{"GQAAttentionDecode", func() {
			d.GQAAttentionDecode(e.f(b*nh*hs), e.f(b*w), e.f(b*nkv*tmax*hs), e.f(b*nkv*tmax*hs), nil, b, 1, 4, tmax, nh, nkv, hs)
		}},
		{"GQAAttentionDecode", func() { // one token over a long cache: split over the keys
			const long = 1024
			d.GQAAttentionDecode(e.f(nh*hs), e.f(w), e.f(nkv*long*hs), e.f(nkv*long*hs), e.i(long), 1, 1, long-24, long, nh, nkv, hs)
		}},
		{"DropoutForward", func() { x := e.f(n); d.DropoutForward(x, e.f(n), x, 0.1, 42, n) }},
		{"CrossEntropyForward", func() { d.CrossEntropyForward(e.f(n), e.f(n*v), e.i(n), n, v, -100) }},
		{"CrossEntropyBackward", func() {
			x := e.f(n * v)
			d.CrossEntropyBackward(x, e.f(n), x, e.i(n), n, v, -100)
		}},
		{"LogProbGather", func() { d.LogProbGather(e.f(n), e.f(n*v), e.i(n), n, v) }},
		{"AdamWStep", func() { d.AdamWStep(e.f(n), e.f(n), e.f(n), e.f(n), n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 3) }},
		{"AdamWStepBF16", func() {
			d.AdamWStepBF16(e.h(n+1), e.i((n+2)/2), e.f(n+1), e.f(n+1), e.f(n+1), n+1, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 3)
		}},
		{"SumSquares", func() {
			if s := d.SumSquares(e.f(n), e.f(0), e.f(3000)); s != 0 {
				panic("the fake's SumSquares read something but zeros")
			}
		}},
	}
}

// TestOpsLaunchValidKernels calls every op on the fake, which checks each
// launch against the kernel's parameter list in cu/*.cu (count and
// kinds), the launch limits and that pointers point into allocations;
// and every kernel of the table must be launched by some op.
func TestOpsLaunchValidKernels(t *testing.T) {
	d, g := newFakeDevice(t, 1<<30)
	e := opsEnv{t, d, g}
	launched := map[kernel]bool{}
	for _, c := range opCalls(e) {
		before := len(g.launches) + len(g.gemms)
		c.call()
		if err := d.Sync(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(g.launches)+len(g.gemms) == before {
			t.Errorf("%s launched nothing", c.name)
		}
	}
	// Copy's conversions.
	x := e.f(3)
	d.Copy(e.h(3), x)
	d.Copy(x, e.h(3))
	for _, l := range g.launches {
		launched[l.k] = true
	}
	for k := range numKernels {
		if !launched[k] {
			t.Errorf("no op launches %v", k)
		}
	}
	// Every Ops method is covered by opCalls.
	covered := map[string]bool{}
	for _, c := range opCalls(e) {
		covered[c.name] = true
	}
	for _, m := range opsMethods() {
		if !covered[m] {
			t.Errorf("opCalls does not call %s", m)
		}
	}
}

// TestOpsValidate: bad operands panic naming the op and operand, before
// anything is launched.
func TestOpsValidate(t *testing.T) {
	d, g := newFakeDevice(t, 1<<30)
	e := opsEnv{t, d, g}
	other, _ := newFakeDevice(t, 1<<20)
	ob, _ := other.Alloc(kernels.F32, 100)
	for _, c := range []struct {
		name, want string
		call       func()
	}{
		{"F32 op given BF16", "Add: a is bf16, want f32", func() { d.Add(e.f(4), e.h(4), e.f(4), 4) }},
		{"I32 where a weight goes", "MatmulForward: weight is i32, want f32 or bf16", func() { d.MatmulForward(e.f(4), e.f(4), e.i(4), nil, 2, 2, 2) }},
		{"short output", "MatmulForward: out has 3 elements, need 4", func() { d.MatmulForward(e.f(3), e.f(4), e.f(4), nil, 2, 2, 2) }},
		{"nil operand", "LayerNormForward: inp is nil", func() { d.LayerNormForward(e.f(4), e.f(2), e.f(2), nil, nil, nil, 2, 2, 1e-5) }},
		{"another device's buffer", "Scale: x belongs to", func() { d.Scale(ob, 2, 4) }},
		{"a CPU buffer", "not a CUDA buffer", func() { d.Mul(e.f(4), e.f(4), fakeBuf{}, 4) }},
		{"negative size", "negative dimension", func() { d.ReLUForward(e.f(4), e.f(4), -1) }},
		{"bad leading dimension", "leading dimensions", func() { d.Gemm(false, false, 2, 3, 4, 1, e.f(8), 3, e.f(12), 3, 0, e.f(6), 3) }},
		{"short A", "Gemm: A has 7 elements, need 8", func() { d.Gemm(false, false, 2, 3, 4, 1, e.f(7), 4, e.f(12), 3, 0, e.f(6), 3) }},
		{"C in bf16", "Gemm: C is bf16, want f32", func() { d.Gemm(false, false, 2, 3, 4, 1, e.f(8), 4, e.f(12), 3, 0, e.h(6), 3) }},
		{"GQA heads", "not a multiple", func() { d.GQAAttentionForward(e.f(99), e.f(99), e.f(999), nil, 1, 2, 3, 2, 4) }},
		{"flash short lse", "FlashAttentionForward: lse has 3 elements, need 4", func() { d.FlashAttentionForward(e.f(32), e.f(3), e.f(96), nil, 1, 4, 1, 1, 8) }},
		{"flash head size", "head size 512", func() { d.FlashAttentionBackward(e.f(3072), e.f(1024), e.f(3072), e.f(2), nil, 1, 2, 1, 1, 512) }},
		{"head size", "not implemented on cuda yet: head size 512", func() { d.AttentionForward(e.f(2048), e.f(4), e.f(4096), nil, 1, 2, 2, 512) }},
		{"decode past Tmax", "past Tmax", func() { d.AttentionDecode(e.f(99), e.f(99), e.f(99), e.f(99), nil, 1, 2, 3, 4, 1, 8) }},
		{"mask in F32", "mask is f32, want i32", func() { d.AttentionForward(e.f(32), e.f(16), e.f(96), e.f(4), 1, 4, 1, 8) }},
		{"rope odd head", "odd head size", func() { d.RoPEForward(e.f(20), e.i(2), e.f(8), e.f(8), 2, 1, 3, 10) }},
		{"head layout", "heads of 8 in rows of 20", func() { d.HeadRMSNormForward(e.f(40), e.f(6), e.f(40), nil, 2, 3, 8, 20, 1e-6) }},
		{"AdamWBF16 params in F32", "params is f32, want bf16", func() { d.AdamWStepBF16(e.f(4), e.i(2), e.f(4), e.f(4), e.f(4), 4, 1, .9, .9, 1e-8, 0, 1, 1) }},
		{"AdamWBF16 short lo", "lo has 1 elements, need 2", func() { d.AdamWStepBF16(e.h(4), e.i(1), e.f(4), e.f(4), e.f(4), 4, 1, .9, .9, 1e-8, 0, 1, 1) }},
		{"targets in F32", "targets is f32, want i32", func() { d.CrossEntropyForward(e.f(2), e.f(6), e.f(2), 2, 3, -100) }},
		{"SumSquares of bf16", "SumSquares: xs[1] is bf16", func() { d.SumSquares(e.f(2), e.h(2)) }},
	} {
		before := len(g.launches) + len(g.gemms)
		mustPanic(t, c.name, c.want, c.call)
		if len(g.launches)+len(g.gemms) != before {
			t.Errorf("%s: launched before failing", c.name)
		}
	}
}

// fakeBuf is a Buffer of another backend.
type fakeBuf struct{}

func (fakeBuf) DType() kernels.DType            { return kernels.F32 }
func (fakeBuf) Len() int                        { return 4 }
func (fakeBuf) Slice(off, n int) kernels.Buffer { return fakeBuf{} }

// opsMethods lists the methods of kernels.Ops.
func opsMethods() []string {
	var out []string
	typ := opsType()
	for i := range typ.NumMethod() {
		out = append(out, typ.Method(i).Name)
	}
	return out
}

func TestOpsMethodsListed(t *testing.T) {
	if m := opsMethods(); len(m) < 30 || !strings.Contains(strings.Join(m, " "), "GQAAttentionDecode") {
		t.Fatalf("kernels.Ops methods: %v", m)
	}
}

func opsType() reflect.Type { return reflect.TypeFor[kernels.Ops]() }

// TestDecodeScratch: decoding a prompt of T tokens takes no scratch (the
// scores were a [B,NH,T,T] one), and one token over a long cache only its
// split-K partial results, NSPLIT·B·NH·(HS+2) floats.
func TestDecodeScratch(t *testing.T) {
	d, g := newFakeDevice(t, 1<<30)
	e := opsEnv{t, d, g}
	const b, nh, nkv, hs, tmax = 1, 4, 2, 16, 1024
	w := (nh + 2*nkv) * hs
	kc, vc, mask := e.f(b*nkv*tmax*hs), e.f(b*nkv*tmax*hs), e.i(b*tmax)
	qkv, out := e.f(b*tmax*w), e.f(b*tmax*nh*hs)
	for _, c := range []struct {
		name   string
		tn, t0 int
		want   int64 // the most scratch bytes
	}{
		{"prefill", tmax, 0, 0},
		{"one token", 1, tmax - 1, 4 * decMaxSplits * b * nh * (hs + 2)},
	} {
		_, _, _, before := d.CacheStats()
		inUse0, _, _, _ := d.CacheStats()
		d.GQAAttentionDecode(out, qkv, kc, vc, mask, b, c.tn, c.t0, tmax, nh, nkv, hs)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		_, _, _, after := d.CacheStats()
		inUse, _, _, _ := d.CacheStats()
		if after-before > c.want || inUse != inUse0 {
			t.Errorf("%s: the peak grew by %d bytes (at most %d), %d bytes in use after (%d before)", c.name, after-before, c.want, inUse, inUse0)
		}
	}
}
