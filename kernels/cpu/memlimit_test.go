package cpu_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// TestMemLimit checks Options.MemLimit: an Alloc that would take the live
// bytes past the cap fails with an *kernels.OutOfMemoryError naming the
// sizes and leaves the accounting as it was; the cap itself is reachable;
// after a Free the same Alloc succeeds.
func TestMemLimit(t *testing.T) {
	const limit = 1 << 20
	d, err := cpu.New(cpu.Options{Threads: 1, MemLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	alloc := func(dt kernels.DType, n int) kernels.Buffer {
		t.Helper()
		b, err := d.Alloc(dt, n)
		if err != nil {
			t.Fatalf("Alloc(%v, %d): %v", dt, n, err)
		}
		return b
	}
	stats := func(live, peak int64) {
		t.Helper()
		if s := d.MemStats(); s != (kernels.MemStats{Live: live, Peak: peak, Limit: limit}) {
			t.Fatalf("MemStats %+v, want Live %d, Peak %d, Limit %d", s, live, peak, limit)
		}
	}
	stats(0, 0)
	a := alloc(kernels.BF16, 300000) // 600000 bytes
	stats(600000, 600000)

	// 600000 more bytes of bf16 do not fit under 1 MiB.
	b, err := d.Alloc(kernels.BF16, 300000)
	if err == nil || b != nil {
		t.Fatalf("Alloc past the limit: got %v, %v; want an error", b, err)
	}
	var oom *kernels.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("Alloc past the limit: %T %v, want *kernels.OutOfMemoryError", err, err)
	}
	if *oom != (kernels.OutOfMemoryError{Device: d.Name(), Want: 600000, Live: 600000, Limit: limit}) {
		t.Fatalf("error %+v", *oom)
	}
	for _, s := range []string{"out of memory", "585.94 KiB", "1.00 MiB", d.Name()} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not say %q", err, s)
		}
	}
	stats(600000, 600000) // the refused Alloc left no trace

	// Up to the limit exactly is fine (448576 bytes of f32), one more byte
	// pair is not; zero bytes always fit.
	f := alloc(kernels.F32, (limit-600000)/4)
	stats(limit, limit)
	if _, err := d.Alloc(kernels.BF16, 1); !errors.As(err, &oom) || oom.Want != 2 || oom.Live != limit {
		t.Fatalf("Alloc of one bf16 at the limit: %v", err)
	}
	z := alloc(kernels.BF16, 0)
	d.Free(z)
	d.Free(f)
	stats(600000, limit)

	// After a Free the refused Alloc fits again.
	d.Free(a)
	stats(0, limit)
	b = alloc(kernels.BF16, 300000)
	c := alloc(kernels.BF16, 200000)
	stats(1000000, limit)
	d.Free(b)
	d.Free(c)
	stats(0, limit)

	// A single buffer larger than the limit fails on an empty device.
	if _, err := d.Alloc(kernels.F32, limit/4+1); !errors.As(err, &oom) || oom.Live != 0 || oom.Want != limit+4 {
		t.Fatalf("Alloc of limit+4 bytes: %v", err)
	}
}
