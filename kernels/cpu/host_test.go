package cpu

import (
	"testing"

	"github.com/gochat-ai/gochat/kernels"
)

// countingAllocator hands out Go memory filled with garbage (Alloc must
// zero it) and counts what is live.
type countingAllocator struct {
	live   map[*byte]int
	allocs int
}

func (a *countingAllocator) Alloc(n int) ([]byte, error) {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xa5
	}
	a.live[&b[0]] = n
	a.allocs++
	return b, nil
}

func (a *countingAllocator) Free(b []byte) {
	if a.live[&b[0]] != len(b) {
		panic("Free of memory Alloc did not give")
	}
	delete(a.live, &b[0])
}

func TestAllocatorOption(t *testing.T) {
	a := &countingAllocator{live: map[*byte]int{}}
	d, err := New(Options{Threads: 2, Allocator: a})
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16, kernels.I32} {
		b, err := d.Alloc(dt, 5)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range d.Bytes(b) {
			if v != 0 {
				t.Fatalf("%v: byte %d of a new buffer is %#x, want 0", dt, i, v)
			}
		}
		if len(a.live) != 1 || d.MemStats().Live != int64(5*dt.Size()) {
			t.Fatalf("%v: %d blocks live, %d bytes counted", dt, len(a.live), d.MemStats().Live)
		}
		// The memory works as any buffer's, views included.
		if dt != kernels.I32 {
			d.WriteF32(b.Slice(1, 2), []float32{1.5, -2})
			got := make([]float32, 5)
			d.ReadF32(got, b)
			if got[1] != 1.5 || got[2] != -2 || got[0] != 0 {
				t.Fatalf("%v: read %v", dt, got)
			}
		}
		d.Decommit(b.Slice(0, 5)) // zeroes only: the allocator's memory stays
		d.Free(b)
		if len(a.live) != 0 || d.MemStats().Live != 0 {
			t.Fatalf("%v: after Free %d blocks live, %d bytes counted", dt, len(a.live), d.MemStats().Live)
		}
	}
	if b, err := d.Alloc(kernels.F32, 0); err != nil || b.Len() != 0 || a.allocs != 3 {
		t.Fatalf("empty buffer: %v, %v, %d allocations", b, err, a.allocs)
	}
}

func TestHostCopies(t *testing.T) {
	d, _ := New(Options{Threads: 1})
	src, _ := d.Alloc(kernels.F32, 4)
	d.WriteF32(src, []float32{1, 2, 3, 4})
	host := make([]byte, 8)
	d.CopyToHost(host, src.Slice(2, 2))
	dst, _ := d.Alloc(kernels.F32, 2)
	d.CopyFromHost(dst, host)
	got := make([]float32, 2)
	d.ReadF32(got, dst)
	if got[0] != 3 || got[1] != 4 {
		t.Fatalf("round trip gave %v, want [3 4]", got)
	}
}
