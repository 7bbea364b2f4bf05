package cuda

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// The fake's page-locked memory is Go memory, kept alive by the map.
func (g *fakeGPU) hostAlloc(n int) (unsafe.Pointer, error) {
	b := make([]byte, n)
	if g.pinned == nil {
		g.pinned = map[unsafe.Pointer][]byte{}
	}
	p := unsafe.Pointer(&b[0])
	g.pinned[p] = b
	return p, nil
}

func (g *fakeGPU) hostFree(p unsafe.Pointer) error {
	if _, ok := g.pinned[p]; !ok {
		g.t.Errorf("hostFree of %p, which hostAlloc did not return", p)
	}
	delete(g.pinned, p)
	return nil
}

// A host device on the pinned allocator round-trips a buffer's bits
// through CopyToHost and CopyFromHost, and gives its memory back.
func TestPinnedHostDevice(t *testing.T) {
	d, g := newFakeDevice(t, 1<<20)
	pa, err := d.PinnedAllocator()
	if err != nil {
		t.Fatal(err)
	}
	host, err := cpu.New(cpu.Options{Threads: 1, Allocator: pa})
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, -2.5, float32(math.Inf(1)), 3e-30, 7}
	db, _ := d.Alloc(kernels.F32, len(want))
	d.WriteF32(db, want)
	hb, err := host.Alloc(kernels.F32, len(want))
	if err != nil {
		t.Fatal(err)
	}
	if pa.Held() != int64(4*len(want)) || len(g.pinned) != 1 {
		t.Fatalf("held %d bytes in %d blocks, want %d in 1", pa.Held(), len(g.pinned), 4*len(want))
	}
	d.CopyToHost(host.Bytes(hb), db)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(want))
	host.ReadF32(got, hb)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("host copy[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	// Back into the second half of another device buffer (a view).
	db2, _ := d.Alloc(kernels.F32, 2*len(want))
	d.CopyFromHost(db2.Slice(len(want), len(want)), host.Bytes(hb))
	all := make([]float32, 2*len(want))
	d.ReadF32(all, db2)
	raw := make([]byte, 4*len(want))
	for i, v := range all[len(want):] {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	if !bytes.Equal(raw, host.Bytes(hb)) {
		t.Fatalf("device copy %v, want %v", all[len(want):], want)
	}
	host.Free(hb)
	if pa.Held() != 0 || len(g.pinned) != 0 {
		t.Fatalf("after Free: %d bytes held in %d blocks", pa.Held(), len(g.pinned))
	}
}

// Copies of the wrong size panic before anything moves.
func TestHostCopySizeChecked(t *testing.T) {
	d, _ := newFakeDevice(t, 1<<20)
	db, _ := d.Alloc(kernels.BF16, 3)
	for name, f := range map[string]func(){
		"to":   func() { d.CopyToHost(make([]byte, 4), db) },
		"from": func() { d.CopyFromHost(db, make([]byte, 8)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: a copy of the wrong size did not panic", name)
				}
			}()
			f()
		}()
	}
}
