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
