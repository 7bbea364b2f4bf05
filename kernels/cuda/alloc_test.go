package cuda

import (
	"errors"
	"fmt"
	"testing"
)

// fakeMemory is a device of cap bytes for the allocator: addresses are
// handed out increasing, frees are checked.
type fakeMemory struct {
	cap, used int64
	next      uintptr
	blocks    map[uintptr]int64
	allocs    int
	frees     int
	failNext  error // returned by the next alloc (then cleared)
}

func newFakeMemory(cap int64) *fakeMemory {
	return &fakeMemory{cap: cap, next: 1 << 20, blocks: map[uintptr]int64{}}
}

func (m *fakeMemory) alloc(n int64) (uintptr, error) {
	if err := m.failNext; err != nil {
		m.failNext = nil
		return 0, err
	}
	if m.used+n > m.cap {
		return 0, cuErr("cuMemAlloc_v2", cudaErrorOutOfMemory)
	}
	p := m.next
	m.next += uintptr(n) + 256
	m.blocks[p] = n
	m.used += n
	m.allocs++
	return p, nil
}

func (m *fakeMemory) free(p uintptr) error {
	n, ok := m.blocks[p]
	if !ok {
		return fmt.Errorf("free of %#x, not allocated", p)
	}
	delete(m.blocks, p)
	m.used -= n
	m.frees++
	return nil
}

func (m *fakeMemory) memInfo() (int64, int64, error) { return m.cap - m.used, m.cap, nil }

func TestRoundSize(t *testing.T) {
	for _, c := range [][2]int64{
		{0, 0}, {1, 512}, {512, 512}, {513, 1024}, {1<<20 - 1, 1 << 20}, {1 << 20, 2 << 20},
		{2 << 20, 2 << 20}, {2<<20 + 1, 4 << 20}, {5 << 30, 5 << 30}, {5<<30 + 3, 5<<30 + 2<<20},
	} {
		if got := roundSize(c[0]); got != c[1] {
			t.Errorf("roundSize(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

func TestAllocatorReuse(t *testing.T) {
	m := newFakeMemory(1 << 30)
	a := newCachingAllocator(m, 0)
	p1, s1, err := a.alloc(1000)
	if err != nil || s1 != 1024 {
		t.Fatalf("alloc(1000) = %v, %d, %v", p1, s1, err)
	}
	p2, s2, _ := a.alloc(3 << 20)
	if s2 != 4<<20 {
		t.Fatalf("alloc(3 MiB) rounded to %d", s2)
	}
	if a.inUse != 1024+4<<20 || a.reserved != a.inUse || a.cached != 0 {
		t.Fatalf("inUse %d reserved %d cached %d", a.inUse, a.reserved, a.cached)
	}
	a.free(p1, s1)
	a.free(p2, s2)
	if a.inUse != 0 || a.cached != 1024+4<<20 || a.reserved != a.cached {
		t.Fatalf("after frees: inUse %d reserved %d cached %d", a.inUse, a.reserved, a.cached)
	}
	// The same rounded sizes come back from the cache: no new allocation.
	q1, _, _ := a.alloc(600)
	q2, _, _ := a.alloc(4<<20 - 5)
	if q1 != p1 || q2 != p2 || m.allocs != 2 {
		t.Fatalf("reuse: got %#x %#x (want %#x %#x), %d device allocations", q1, q2, p1, p2, m.allocs)
	}
	// Another size allocates.
	if _, _, err := a.alloc(5000); err != nil || m.allocs != 3 {
		t.Fatalf("new size: %v, %d allocations", err, m.allocs)
	}
	if a.peak != a.reserved {
		t.Fatalf("peak %d, reserved %d", a.peak, a.reserved)
	}
	// Zero bytes takes nothing.
	if p, s, err := a.alloc(0); p != 0 || s != 0 || err != nil {
		t.Fatalf("alloc(0) = %v %v %v", p, s, err)
	}
}

func TestAllocatorEmptiesCacheBeforeFailing(t *testing.T) {
	m := newFakeMemory(10 << 20)
	a := newCachingAllocator(m, 0)
	var ps []uintptr
	for range 4 { // 4 × 2 MiB
		p, _, err := a.alloc(2 << 20)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps[:3] {
		a.free(p, 2<<20)
	}
	// 6 MiB does not fit beside 8 MiB held, but does once the 6 MiB
	// cached are returned.
	if _, _, err := a.alloc(6 << 20); err != nil {
		t.Fatalf("alloc after emptying the cache: %v", err)
	}
	if a.cached != 0 || m.frees != 3 || a.reserved != 8<<20 || a.inUse != 8<<20 {
		t.Fatalf("cached %d, %d device frees, reserved %d, inUse %d", a.cached, m.frees, a.reserved, a.inUse)
	}
	// Now nothing is cached and 2 MiB are free: 4 MiB fails with the numbers.
	a.free(ps[3], 2<<20) // 2 MiB cached again
	_, _, err := a.alloc(5 << 20)
	var oom *allocOOM
	if !errors.As(err, &oom) {
		t.Fatalf("got %v, want an allocOOM", err)
	}
	if oom.want != 5<<20 || oom.inUse != 6<<20 || oom.cached != 2<<20 || oom.total != 10<<20 || oom.free != 4<<20 {
		t.Fatalf("numbers: %+v", oom)
	}
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("%v does not match ErrOutOfMemory", err)
	}
	if a.cached != 0 {
		t.Fatalf("the cache was not emptied: %d", a.cached)
	}
}

func TestAllocatorLimit(t *testing.T) {
	m := newFakeMemory(1 << 30)
	a := newCachingAllocator(m, 5<<20)
	p, s, err := a.alloc(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	a.free(p, s)
	// 4 MiB + 2 MiB cached passes the limit: the cache goes, then it fits.
	if _, _, err := a.alloc(4 << 20); err != nil {
		t.Fatal(err)
	}
	if m.frees != 1 {
		t.Fatalf("%d frees, want the cached block returned", m.frees)
	}
	_, _, err = a.alloc(2 << 20)
	var oom *allocOOM
	if !errors.As(err, &oom) || oom.limit != 5<<20 || oom.inUse != 4<<20 {
		t.Fatalf("got %v, want an allocOOM at the limit", err)
	}
}

func TestAllocatorPassesOtherErrors(t *testing.T) {
	m := newFakeMemory(1 << 30)
	a := newCachingAllocator(m, 0)
	m.failNext = cuErr("cuMemAlloc_v2", 201)
	_, _, err := a.alloc(100)
	var oom *allocOOM
	if err == nil || errors.As(err, &oom) || errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("got %v, want the driver's error as it is", err)
	}
	if a.inUse != 0 || a.reserved != 0 {
		t.Fatalf("a failed allocation was counted: %d %d", a.inUse, a.reserved)
	}
}
