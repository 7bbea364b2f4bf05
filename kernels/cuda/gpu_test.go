package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// Tests that need a GPU (they skip without one, see openTestGPU).

// TestGPUMatchesCPUBitwise: the ops the contract (or this backend's
// documentation) says reproduce the CPU backend element for element.
func TestGPUMatchesCPUBitwise(t *testing.T) {
	g := openTestGPU(t)
	c, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	const n = 100003
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	run := func(d kernels.Device, f func(d kernels.Device, bufs []kernels.Buffer), sizes ...int) [][]float32 {
		var bufs []kernels.Buffer
		for _, s := range sizes {
			b, err := d.Alloc(kernels.F32, s)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Free(b)
			d.WriteF32(b, x[:s])
			bufs = append(bufs, b)
		}
		f(d, bufs)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for _, b := range bufs {
			h := make([]float32, b.Len())
			d.ReadF32(h, b)
			out = append(out, h)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		f     func(d kernels.Device, b []kernels.Buffer)
		sizes []int
	}{
		{"DropoutForward", func(d kernels.Device, b []kernels.Buffer) { d.DropoutForward(b[0], b[1], b[0], 0.1, 1234, n) }, []int{n, n}},
		{"AdamWStep", func(d kernels.Device, b []kernels.Buffer) {
			d.Scale(b[2], 0, n)
			d.Scale(b[3], 0, n)
			for step := 1; step <= 3; step++ {
				d.AdamWStep(b[0], b[1], b[2], b[3], n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.5, step)
			}
		}, []int{n, n, n, n}},
		{"GELU", func(d kernels.Device, b []kernels.Buffer) {
			d.GELUForward(b[0], b[0], n)
			d.GELUBackward(b[1], b[1], b[0], n)
		}, []int{n, n}},
		{"SwiGLU", func(d kernels.Device, b []kernels.Buffer) { d.SwiGLUForward(b[0], b[1], 1000, 50) }, []int{50000, 100000}},
	} {
		want, got := run(c, tc.f, tc.sizes...), run(g, tc.f, tc.sizes...)
		for bi := range want {
			for i := range want[bi] {
				if math.Float32bits(got[bi][i]) != math.Float32bits(want[bi][i]) {
					t.Errorf("%s: buffer %d [%d] = %g on cuda, %g on cpu", tc.name, bi, i, got[bi][i], want[bi][i])
					break
				}
			}
		}
	}
}

// TestGPUOutOfMemory asks for more than the GPU has and checks the error
// and that the device still works.
func TestGPUOutOfMemory(t *testing.T) {
	d := openTestGPU(t)
	_, total, err := d.g.memInfo()
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Alloc(kernels.F32, int(total/4)+1<<28)
	var oom *kernels.OutOfMemoryError
	if !errors.As(err, &oom) || oom.DeviceTotal != total {
		t.Fatalf("got %v, want an OutOfMemoryError with the device's total %d", err, total)
	}
	t.Logf("%v", err)
	b, err := d.Alloc(kernels.F32, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	d.Free(b)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkGemm measures cuBLAS through the backend: fp32 and bf16
// (weights bf16, activations rounded on the fly) at 4096³.
func BenchmarkGemm(b *testing.B) {
	d, err := New(Options{})
	if err != nil {
		b.Skipf("no usable GPU: %v", err)
	}
	defer d.Close()
	const m = 4096
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		b.Run(dt.String(), func(b *testing.B) {
			a, _ := d.Alloc(kernels.F32, m*m)
			w, _ := d.Alloc(dt, m*m)
			c, _ := d.Alloc(kernels.F32, m*m)
			defer func() { d.Free(a); d.Free(w); d.Free(c) }()
			d.Gemm(false, true, m, m, m, 1, a, m, w, m, 0, c, m)
			if err := d.Sync(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				d.Gemm(false, true, m, m, m, 1, a, m, w, m, 0, c, m)
				if err := d.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2*m*m*m*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
	}
}

// TestGPUDecommitReturnsMemory: a ZeRO-3-style cycle on the real device
// (a 256 MiB parameter buffer, all but one eighth released, then
// committed again piece by piece) gives memory back to the driver
// (cuMemGetInfo's free memory) and takes it again, keeps the resident
// values and reads zeros where memory was released. Without the driver's
// VMM it fails, saying why (GOCHAT_CUDA_REQUIRE runs it with a GPU).
func TestGPUDecommitReturnsMemory(t *testing.T) {
	d := openTestGPU(t)
	gran, why := d.VirtualMemory()
	if gran == 0 {
		t.Fatalf("no virtual memory management: %s", why)
	}
	const n = 64 << 20 // F32: 256 MiB
	b, err := d.Alloc(kernels.F32, n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(b)
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%1000 + 1)
	}
	d.WriteF32(b, vals)
	free := func() int64 {
		t.Helper()
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		f, _, err := d.g.memInfo()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	own := n / 8 // this rank's piece
	before, live := free(), d.MemStats().Live
	d.Decommit(b.Slice(0, 3*own+100))
	d.Decommit(b.Slice(4*own-100, n-4*own+100))
	after, liveAfter := free(), d.MemStats().Live
	released := int64(7*own*4) - 4*gran // less the partial chunks at the edges
	t.Logf("granularity %d; free %d -> %d MiB; live %d -> %d MiB", gran, before>>20, after>>20, live>>20, liveAfter>>20)
	if after-before < released || live-liveAfter < released {
		t.Fatalf("released %d bytes (free memory), %d (live), want at least %d", after-before, live-liveAfter, released)
	}
	for u := range 8 { // layer by layer, as ZeRO-3's passes gather
		if err := d.Commit(b.Slice(u*own, own)); err != nil {
			t.Fatal(err)
		}
	}
	if back := free(); before-back > 4*gran || back > before+4*gran {
		t.Fatalf("free memory %d MiB after committing everything, %d before", back>>20, before>>20)
	}
	got := make([]float32, n)
	d.ReadF32(got, b)
	for i, v := range got {
		want := float32(0)
		if i >= 3*own+100 && i < 4*own-100 {
			want = vals[i]
		}
		if v != want {
			t.Fatalf("element %d = %v after the cycle, want %v", i, v, want)
		}
	}
}
