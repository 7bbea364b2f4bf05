package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// fakeVMM is the fake GPU's virtual memory management: reserved address
// ranges (above the fake allocator's addresses) backed by host bytes, of
// which only the mapped chunks may be touched (fakeGPU.bytes). A chunk's
// memory counts against the fake device's capacity while mapped; a fresh
// chunk holds garbage (0xA5), as a real one holds whatever was there, so
// a missing zeroing shows.
type fakeVMM struct {
	g      *fakeGPU
	gran   int64
	next   uintptr
	ranges map[uintptr]*fakeRange

	maps, unmaps, reserves, unreserves int
	handle                             uint64
}

type fakeRange struct {
	base   uintptr
	data   []byte
	mapped map[int]uint64 // chunk -> handle
}

// newFakeVMMDevice is a fake device whose buffers of gran bytes and more
// get their own chunks.
func newFakeVMMDevice(t *testing.T, capacity, gran, limit int64) (*Device, *fakeGPU) {
	g := newFakeGPU(t, capacity)
	g.vm = &fakeVMM{g: g, gran: gran, next: 1 << 40, ranges: map[uintptr]*fakeRange{}}
	d, err := newDevice(g, "cuda:0 (fake with VMM, sm_90)", 90, limit)
	if err != nil {
		t.Fatal(err)
	}
	return d, g
}

// vmm implements vmmProvider.
func (g *fakeGPU) vmm() (vmmDriver, string) {
	if g.vm == nil {
		return nil, "the fake GPU has no VMM"
	}
	return g.vm, ""
}

func (v *fakeVMM) granularity() int64 { return v.gran }

func (v *fakeVMM) reserve(bytes int64) (uintptr, error) {
	if bytes <= 0 || bytes%v.gran != 0 {
		v.g.t.Fatalf("cuMemAddressReserve of %d bytes, not a multiple of %d", bytes, v.gran)
	}
	va := v.next
	v.next += uintptr(bytes) + uintptr(v.gran) // a gap: ranges never touch
	v.ranges[va] = &fakeRange{base: va, data: make([]byte, bytes), mapped: map[int]uint64{}}
	v.reserves++
	return va, nil
}

func (v *fakeVMM) unreserve(va uintptr, bytes int64) error {
	r, ok := v.ranges[va]
	if !ok || int64(len(r.data)) != bytes {
		v.g.t.Fatalf("cuMemAddressFree(%#x, %d): no such reservation", va, bytes)
	}
	if len(r.mapped) > 0 {
		v.g.t.Fatalf("cuMemAddressFree(%#x) with %d chunks still mapped", va, len(r.mapped))
	}
	delete(v.ranges, va)
	v.unreserves++
	return nil
}

// chunk finds the range and chunk index of a chunk-aligned address.
func (v *fakeVMM) chunk(op string, va uintptr) (*fakeRange, int) {
	for base, r := range v.ranges {
		if va >= base && va < base+uintptr(len(r.data)) {
			off := int64(va - base)
			if off%v.gran != 0 {
				v.g.t.Fatalf("%s at %#x: not a chunk boundary", op, va)
			}
			return r, int(off / v.gran)
		}
	}
	v.g.t.Fatalf("%s at %#x: in no reserved range", op, va)
	return nil, 0
}

func (v *fakeVMM) mapChunk(va uintptr) (uint64, error) {
	r, c := v.chunk("cuMemMap", va)
	if _, ok := r.mapped[c]; ok {
		v.g.t.Fatalf("cuMemMap at %#x: chunk %d is mapped already", va, c)
	}
	m := v.g.mem
	if m.used+v.gran > m.cap {
		return 0, cuErr("cuMemCreate", cudaErrorOutOfMemory)
	}
	m.used += v.gran
	v.handle++
	r.mapped[c] = v.handle
	for i := range v.gran {
		r.data[int64(c)*v.gran+i] = 0xA5
	}
	v.maps++
	return v.handle, nil
}

func (v *fakeVMM) unmapChunk(va uintptr, h uint64) error {
	r, c := v.chunk("cuMemUnmap", va)
	if got, ok := r.mapped[c]; !ok || got != h {
		v.g.t.Fatalf("cuMemUnmap at %#x: chunk %d mapped %v with handle %d, released as %d", va, c, ok, got, h)
	}
	if v.g.queued {
		v.g.t.Fatalf("cuMemUnmap at %#x with work queued since the last sync (it may still use the chunk)", va)
	}
	delete(r.mapped, c)
	v.g.mem.used -= v.gran
	v.unmaps++
	return nil
}

// reserved reports whether p lies in a reserved range (nil: no VMM).
func (v *fakeVMM) reserved(p uintptr) bool {
	if v == nil {
		return false
	}
	for base, r := range v.ranges {
		if p >= base && p < base+uintptr(len(r.data)) {
			return true
		}
	}
	return false
}

// bytes returns [p, p+n) of a reserved range (ok false: p is in none),
// after checking that every chunk it touches is mapped.
func (v *fakeVMM) bytes(p uintptr, n int) ([]byte, bool) {
	if v == nil {
		return nil, false
	}
	for base, r := range v.ranges {
		if p < base || p >= base+uintptr(len(r.data)) {
			continue
		}
		lo, hi := int64(p-base), int64(p-base)+int64(n)
		if hi > int64(len(r.data)) {
			v.g.t.Fatalf("device range %#x+%d runs past its reservation", p, n)
		}
		c0, c1 := chunksTouched(lo, max(hi, lo+1), v.gran)
		for c := c0; c < c1; c++ {
			if _, ok := r.mapped[c]; !ok {
				msg := fmt.Sprintf("device range %#x+%d touches chunk %d of the reservation at %#x, which is not mapped (a Commit is missing)", p, n, c, base)
				if v.g.unmapped == nil {
					v.g.t.Fatal(msg)
				}
				v.g.unmapped(msg)
				return make([]byte, n), true // a scratch stand-in: the test goes on
			}
		}
		return r.data[lo:hi], true
	}
	return nil, false
}

// mappedChunks lists the mapped chunks of the reservation holding b.
func (v *fakeVMM) mappedChunks(b kernels.Buffer) []int {
	r := v.ranges[b.(*Buffer).blk.base]
	var cs []int
	for c := range r.mapped {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	return cs
}

// TestVMMStructLayout: the Go mirrors of CUmemAllocationProp and
// CUmemAccessDesc have cuda.h's size and field offsets on LP64.
func TestVMMStructLayout(t *testing.T) {
	var p cuMemAllocationProp
	var a cuMemAccessDesc
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUmemAllocationProp)", unsafe.Sizeof(p), 32},
		{"type", unsafe.Offsetof(p.typ), 0},
		{"requestedHandleTypes", unsafe.Offsetof(p.handleTypes), 4},
		{"location.type", unsafe.Offsetof(p.locType), 8},
		{"location.id", unsafe.Offsetof(p.locID), 12},
		{"win32HandleMetaData", unsafe.Offsetof(p.win32Meta), 16},
		{"allocFlags.compressionType", unsafe.Offsetof(p.compression), 24},
		{"allocFlags.gpuDirectRDMACapable", unsafe.Offsetof(p.rdma), 25},
		{"allocFlags.usage", unsafe.Offsetof(p.usage), 26},
		{"allocFlags.reserved", unsafe.Offsetof(p.reserved), 28},
		{"sizeof(CUmemAccessDesc)", unsafe.Sizeof(a), 12},
		{"access location.type", unsafe.Offsetof(a.locType), 0},
		{"access location.id", unsafe.Offsetof(a.locID), 4},
		{"access flags", unsafe.Offsetof(a.flags), 8},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, cuda.h has %d", c.name, c.got, c.want)
		}
	}
}

// TestPlanDecommit: which chunks a Decommit of bytes [lo, hi) releases
// and which edges it only zeroes (chunks of 100 bytes).
func TestPlanDecommit(t *testing.T) {
	const g = 100
	for _, c := range []struct {
		lo, hi int64
		whole  [2]int
		edges  [][2]int64
	}{
		{0, 0, [2]int{}, nil},                                      // empty
		{0, 100, [2]int{0, 1}, nil},                                // one whole chunk
		{0, 300, [2]int{0, 3}, nil},                                // whole chunks
		{10, 90, [2]int{}, [][2]int64{{10, 90}}},                   // inside one chunk
		{0, 90, [2]int{0, 0}, [][2]int64{{0, 90}}},                 // from a chunk's start, short of its end
		{10, 100, [2]int{1, 1}, [][2]int64{{10, 100}}},             // to a chunk's end
		{50, 150, [2]int{1, 1}, [][2]int64{{50, 100}, {100, 150}}}, // across one boundary, no whole chunk
		{50, 350, [2]int{1, 3}, [][2]int64{{50, 100}, {300, 350}}}, // partial edges around whole chunks
		{100, 350, [2]int{1, 3}, [][2]int64{{300, 350}}},           // aligned start
		{50, 300, [2]int{1, 3}, [][2]int64{{50, 100}}},             // aligned end
	} {
		p := planDecommit(c.lo, c.hi, g)
		if p.whole != c.whole || !slices.Equal(p.edges, c.edges) {
			t.Errorf("planDecommit(%d, %d): whole %v edges %v, want %v %v", c.lo, c.hi, p.whole, p.edges, c.whole, c.edges)
		}
		// Every byte of the view is in exactly one whole chunk or edge.
		for x := c.lo; x < c.hi; x++ {
			n := 0
			if x >= int64(p.whole[0])*g && x < int64(p.whole[1])*g {
				n++
			}
			for _, e := range p.edges {
				if x >= e[0] && x < e[1] {
					n++
					if e[0]/g != (e[1]-1)/g {
						t.Errorf("planDecommit(%d, %d): edge %v spans chunks", c.lo, c.hi, e)
					}
				}
			}
			if n != 1 {
				t.Fatalf("planDecommit(%d, %d): byte %d covered %d times", c.lo, c.hi, x, n)
			}
		}
	}
}

func TestChunksTouched(t *testing.T) {
	for _, c := range [][4]int64{ // lo, hi, c0, c1
		{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 100, 0, 1}, {0, 101, 0, 2}, {99, 101, 0, 2}, {100, 200, 1, 2}, {150, 450, 1, 5},
	} {
		if c0, c1 := chunksTouched(c[0], c[1], 100); int64(c0) != c[2] || int64(c1) != c[3] {
			t.Errorf("chunksTouched(%d, %d) = %d, %d, want %d, %d", c[0], c[1], c0, c1, c[2], c[3])
		}
	}
}

// TestVMMDecommitCommit runs sequences of Decommit and Commit on views of
// a buffer of 6.5 chunks (1 KiB each, F32) and checks after each step
// which chunks are mapped, the device memory held, the live bytes, and
// every value (reading only mapped memory: the fake fails on anything
// else).
func TestVMMDecommitCommit(t *testing.T) {
	const gran = 1024
	const per = gran / 4 // F32 elements per chunk
	const n = 6*per + per/2
	type step struct {
		commit bool
		lo, n  int // elements
	}
	for _, c := range []struct {
		name   string
		steps  []step
		mapped []int // chunks mapped at the end
		zero   [][2]int
	}{
		{"whole chunks", []step{{false, per, 2 * per}}, []int{0, 3, 4, 5, 6}, [][2]int{{per, 3 * per}}},
		{"partial edges", []step{{false, per / 2, 2 * per}}, []int{0, 2, 3, 4, 5, 6}, [][2]int{{per / 2, per/2 + 2*per}}},
		{"inside one chunk", []step{{false, 10, 20}}, []int{0, 1, 2, 3, 4, 5, 6}, [][2]int{{10, 30}}},
		{"spanning all", []step{{false, 0, n}}, nil, [][2]int{{0, n}}},
		{"tail partial chunk", []step{{false, 6 * per, per / 2}}, []int{0, 1, 2, 3, 4, 5}, [][2]int{{6 * per, n}}},
		{"double decommit", []step{{false, per, 2 * per}, {false, per, 2 * per}}, []int{0, 3, 4, 5, 6}, [][2]int{{per, 3 * per}}},
		{"overlapping decommits", []step{{false, per, 2 * per}, {false, 2 * per, 3 * per}}, []int{0, 5, 6}, [][2]int{{per, 5 * per}}},
		{"commit resident memory", []step{{true, 0, n}}, []int{0, 1, 2, 3, 4, 5, 6}, nil},
		{"commit after decommit", []step{{false, per, 2 * per}, {true, per, 2 * per}}, []int{0, 1, 2, 3, 4, 5, 6}, [][2]int{{per, 3 * per}}},
		{"commit part of a released run", []step{{false, 0, n}, {true, per + 5, 10}}, []int{1}, [][2]int{{0, n}}},
		{"commit across the edge of a released run", []step{{false, per, 3 * per}, {true, 3*per + 1, per}}, []int{0, 3, 4, 5, 6}, [][2]int{{per, 4 * per}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, g := newFakeVMMDevice(t, 1<<20, gran, 0)
			b, err := d.Alloc(kernels.F32, n)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, n)
			for i := range want {
				want[i] = float32(i + 1)
			}
			d.WriteF32(b, want)
			for _, s := range c.steps {
				v := b.Slice(s.lo, s.n)
				if s.commit {
					if err := d.Commit(v); err != nil {
						t.Fatal(err)
					}
				} else {
					d.Decommit(v)
				}
			}
			for _, z := range c.zero {
				for i := z[0]; i < z[1]; i++ {
					want[i] = 0
				}
			}
			mapped := g.vm.mappedChunks(b)
			if !slices.Equal(mapped, c.mapped) {
				t.Errorf("mapped chunks %v, want %v", mapped, c.mapped)
			}
			if held := int64(len(mapped)) * gran; g.mem.used != held || d.MemStats().Live != held {
				t.Errorf("device holds %d bytes, live %d, want %d", g.mem.used, d.MemStats().Live, held)
			}
			// Read each mapped chunk's part of the buffer.
			for _, ch := range mapped {
				lo, hi := ch*per, min((ch+1)*per, n)
				got := read(d, b.Slice(lo, hi-lo))
				for i := range got {
					if got[i] != want[lo+i] {
						t.Fatalf("element %d = %v, want %v", lo+i, got[i], want[lo+i])
					}
				}
			}
			// Commit everything: released memory reads as zeros.
			if err := d.Commit(b); err != nil {
				t.Fatal(err)
			}
			if got := read(d, b); !slices.Equal(got, want) {
				t.Errorf("after Commit of the whole buffer: %v..., want %v...", got[:8], want[:8])
			}
			d.Free(b)
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if g.mem.used != 0 || len(g.vm.ranges) != 0 {
				t.Errorf("after Close: %d bytes held, %d reservations", g.mem.used, len(g.vm.ranges))
			}
		})
	}
}

// TestVMMUnmappedAccessFails: the fake catches a kernel, a copy and a
// GEMM that touch decommitted memory: the check every other test relies
// on.
func TestVMMUnmappedAccessFails(t *testing.T) {
	const gran = 1024
	d, g := newFakeVMMDevice(t, 1<<20, gran, 0)
	var got []string
	g.unmapped = func(msg string) { got = append(got, msg) }
	b, _ := d.Alloc(kernels.F32, 4*256)
	w, _ := d.Alloc(kernels.BF16, 4*256)
	d.Decommit(b.Slice(256, 256)) // chunk 1
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Copy into", func() { d.Copy(b.Slice(256, 10), b.Slice(0, 10)) }},
		{"Copy out of", func() { d.Copy(b.Slice(0, 10), b.Slice(300, 10)) }},
		{"Zero", func() { d.Zero(b.Slice(500, 20)) }},
		{"a kernel argument", func() { d.Copy(w.Slice(0, 300), b.Slice(0, 300)) }}, // f32 -> bf16: a launch
		{"ReadF32", func() { read(d, b.Slice(250, 10)) }},
		{"WriteF32", func() { d.WriteF32(b.Slice(256, 1), []float32{1}) }},
		{"a GEMM operand", func() { d.Gemm(false, false, 2, 2, 2, 1, b.Slice(255, 4), 2, b.Slice(0, 4), 2, 0, b.Slice(8, 4), 2) }},
	} {
		got = nil
		c.f()
		if len(got) == 0 {
			t.Errorf("%s decommitted memory: not caught", c.name)
		}
	}
	got = nil
	if err := d.Commit(b.Slice(256, 1)); err != nil {
		t.Fatal(err)
	}
	d.Copy(b.Slice(256, 10), b.Slice(0, 10))
	read(d, b)
	if len(got) != 0 {
		t.Errorf("after Commit: %v", got)
	}
}

// TestVMMSmallBuffersAndFallback: buffers under one chunk stay on the
// caching allocator (Decommit zeroes them, Commit does nothing), and a
// GPU without VMM says why and zeroes.
func TestVMMSmallBuffersAndFallback(t *testing.T) {
	d, g := newFakeVMMDevice(t, 1<<20, 1024, 0)
	if gr, why := d.VirtualMemory(); gr != 1024 || why != "" || !d.DecommitReturnsMemory() {
		t.Fatalf("VirtualMemory = %d, %q", gr, why)
	}
	small := upload(t, d, kernels.F32, []float32{1, 2, 3, 4, 5})
	if small.(*Buffer).blk != nil || g.vm.reserves != 0 {
		t.Fatal("a 20-byte buffer got its own chunks")
	}
	d.Decommit(small.Slice(1, 3))
	if err := d.Commit(small); err != nil {
		t.Fatal(err)
	}
	if got := read(d, small); !slices.Equal(got, []float32{1, 0, 0, 0, 5}) {
		t.Fatalf("small buffer after Decommit: %v", got)
	}

	d2, _ := newFakeDevice(t, 1<<20)
	if gr, why := d2.VirtualMemory(); gr != 0 || why == "" || d2.DecommitReturnsMemory() {
		t.Fatalf("without VMM: VirtualMemory = %d, %q", gr, why)
	}
	big := upload(t, d2, kernels.F32, make([]float32, 1000))
	d2.WriteF32(big, slices.Repeat([]float32{7}, 1000))
	d2.Decommit(big.Slice(10, 900))
	if err := d2.Commit(big); err != nil {
		t.Fatal(err)
	}
	got := read(d2, big)
	if got[9] != 7 || got[10] != 0 || got[909] != 0 || got[910] != 7 {
		t.Fatalf("without VMM, Decommit must zero: %v %v %v %v", got[9], got[10], got[909], got[910])
	}
}

// TestVMMOutOfMemory: a Commit the device cannot back empties the
// caches and retries, then fails with the numbers, and succeeds once
// memory is freed; the memory limit counts mapped chunks, for the caching
// allocator too.
func TestVMMOutOfMemory(t *testing.T) {
	const gran = 1024
	t.Run("device", func(t *testing.T) {
		d, g := newFakeVMMDevice(t, 4*gran, gran, 0)
		a, err := d.Alloc(kernels.F32, 3*256)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := d.Alloc(kernels.F32, 256) // the fourth chunk
		d.Decommit(a)
		if g.mem.used != gran {
			t.Fatalf("%d bytes held after Decommit, want %d", g.mem.used, gran)
		}
		tmp, _ := d.Alloc(kernels.F32, 2*256)
		d.Free(tmp) // pooled: two chunks cached
		if err := d.Commit(a); err != nil || g.vm.unreserves != 1 {
			t.Fatalf("Commit with the pool to empty: %v (%d ranges freed)", err, g.vm.unreserves)
		}
		d.Decommit(a)
		x, _ := d.Alloc(kernels.F32, 2*256)
		err = d.Commit(a)
		var oom *kernels.OutOfMemoryError
		if !errors.As(err, &oom) || oom.DeviceTotal != 4*gran || oom.DeviceFree != 0 || oom.Want != gran {
			t.Fatalf("Commit past the device: %v, want an OutOfMemoryError", err)
		}
		t.Log(err)
		d.Free(x)
		d.Trim()
		if err := d.Commit(a); err != nil {
			t.Fatalf("Commit after freeing: %v", err)
		}
		if got := read(d, a); slices.ContainsFunc(got, func(x float32) bool { return x != 0 }) {
			t.Fatal("committed memory is not zero")
		}
		d.Free(c)
	})
	t.Run("limit", func(t *testing.T) {
		d, _ := newFakeVMMDevice(t, 1<<20, gran, 3*gran)
		a, err := d.Alloc(kernels.F32, 3*256)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Alloc(kernels.F32, 10); err == nil {
			t.Fatal("the caching allocator ignores the chunks mapped under the limit")
		}
		d.Decommit(a.Slice(256, 256))
		if _, err := d.Alloc(kernels.F32, 10); err != nil {
			t.Fatalf("after a Decommit under the limit: %v", err)
		}
		var oom *kernels.OutOfMemoryError
		if err := d.Commit(a); !errors.As(err, &oom) || oom.Limit != 3*gran {
			t.Fatalf("Commit past the limit: %v", err)
		}
	})
}

// TestVMMPoolReuse: a freed buffer's range is kept for the next buffer of
// the same size, which is zeroed (also where the old one had values);
// its released chunks are mapped again.
func TestVMMPoolReuse(t *testing.T) {
	d, g := newFakeVMMDevice(t, 1<<20, 1024, 0)
	a := upload(t, d, kernels.F32, slices.Repeat([]float32{3}, 1000))
	d.Decommit(a.Slice(200, 600)) // bytes 800 to 3200: chunks 1 and 2
	base := a.(*Buffer).ptr
	d.Free(a)
	if d.MemStats().Live != 0 {
		t.Fatalf("live %d after Free", d.MemStats().Live)
	}
	_, cached, reserved, _ := d.CacheStats()
	if cached != 2*1024 || reserved != 2*1024 {
		t.Fatalf("cached %d, reserved %d; want the 2 mapped chunks", cached, reserved)
	}
	b, _ := d.Alloc(kernels.F32, 1000)
	if b.(*Buffer).ptr != base || g.vm.reserves != 1 {
		t.Fatal("the pooled range was not reused")
	}
	if got := read(d, b); slices.ContainsFunc(got, func(x float32) bool { return x != 0 }) {
		t.Fatal("a reused buffer is not zero")
	}
	if inUse, _, _, peak := d.CacheStats(); inUse != 4*1024 || peak != 4*1024 {
		t.Fatalf("in use %d, peak %d, want 4 chunks", inUse, peak)
	}
}

// checkRank collects unmapped accesses from the ranks' goroutines.
type violations struct {
	mu  sync.Mutex
	msg []string
}

func (v *violations) add(m string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.msg = append(v.msg, m)
}
