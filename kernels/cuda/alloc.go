package cuda

import (
	"errors"
	"fmt"
	"slices"
)

// rawMemory is the device memory a cachingAllocator takes blocks from:
// cuMemAlloc/cuMemFree/cuMemGetInfo on a GPU, a fake in tests. alloc's
// error matches ErrOutOfMemory (errors.Is) when the memory is not there.
type rawMemory interface {
	alloc(bytes int64) (uintptr, error)
	free(ptr uintptr) error
	memInfo() (free, total int64, err error)
}

// Rounding of block sizes: small requests to 512 bytes (cuMemAlloc's
// alignment is 256), requests of 1 MiB and more to 2 MiB (the driver's
// large-page granularity), so that a freed block serves any later request
// of the same rounded size and the waste of a large block stays under
// 2 MiB.
const (
	smallAlign = 512
	largeFrom  = 1 << 20
	largeAlign = 2 << 20
)

// roundSize is the size of the block that holds n bytes.
func roundSize(n int64) int64 {
	if n <= 0 {
		return 0
	}
	if n < largeFrom {
		return (n + smallAlign - 1) / smallAlign * smallAlign
	}
	return (n + largeAlign - 1) / largeAlign * largeAlign
}

// cachingAllocator hands out device memory blocks of rounded sizes and
// keeps freed blocks in per-size pools for reuse, the way PyTorch's CUDA
// caching allocator does (without splitting blocks): cuMemAlloc and
// cuMemFree synchronize the device, and a training step allocates the same
// sizes every time. When the device refuses a block, the cache is emptied
// and the request retried once before it fails with the numbers. All work
// runs on the device's one stream, so a block freed while kernels that
// use it are queued can be handed out at once: its next user's work is
// queued behind theirs.
//
// It is not safe for concurrent use (neither is the Device).
type cachingAllocator struct {
	raw   rawMemory
	limit int64 // cap on reserved bytes; 0: none

	pools    map[int64][]uintptr // rounded size -> free blocks
	inUse    int64               // bytes of blocks handed out (rounded)
	cached   int64               // bytes of blocks in the pools
	reserved int64               // bytes held from the device: inUse + cached
	peak     int64               // the largest reserved (plus outside)
	allocs   int                 // raw allocations made (for tests and stats)
	// outside, if set, is the device memory held beside the allocator
	// (buffers with their own chunks, vmm.go): it counts against limit
	// and in peak.
	outside func() int64
}

func (a *cachingAllocator) outsideBytes() int64 {
	if a.outside == nil {
		return 0
	}
	return a.outside()
}

func newCachingAllocator(raw rawMemory, limit int64) *cachingAllocator {
	return &cachingAllocator{raw: raw, limit: limit, pools: make(map[int64][]uintptr)}
}

// allocOOM is the allocator's out-of-memory error, with the numbers at the
// time of the failure.
type allocOOM struct {
	want        int64 // bytes asked for (before rounding)
	inUse       int64 // bytes in use by live blocks
	cached      int64 // bytes that were in the cache when the request failed first
	limit       int64 // the cap, when it was the limit that refused
	free, total int64 // the device's memory after emptying the cache (0 total: unknown)
	cause       error
}

func (e *allocOOM) Error() string {
	s := fmt.Sprintf("out of device memory: %d bytes wanted, %d in use, %d cached (released and retried), device %d free of %d", e.want, e.inUse, e.cached, e.free, e.total)
	if e.limit > 0 {
		s += fmt.Sprintf(", limit %d", e.limit)
	}
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

func (e *allocOOM) Unwrap() error { return e.cause }

// alloc returns a block of at least n bytes and its rounded size.
func (a *cachingAllocator) alloc(n int64) (uintptr, int64, error) {
	size := roundSize(n)
	if size == 0 {
		return 0, 0, nil
	}
	if p := a.pools[size]; len(p) > 0 {
		ptr := p[len(p)-1]
		a.pools[size] = p[:len(p)-1]
		a.cached -= size
		a.inUse += size
		return ptr, size, nil
	}
	cachedBefore := a.cached
	if a.limit > 0 && a.reserved+a.outsideBytes()+size > a.limit {
		if err := a.emptyCache(); err != nil {
			return 0, 0, err
		}
		if a.reserved+a.outsideBytes()+size > a.limit {
			return 0, 0, a.oom(n, cachedBefore, nil, a.limit)
		}
	}
	ptr, err := a.raw.alloc(size)
	if err != nil && errors.Is(err, ErrOutOfMemory) && a.cached > 0 {
		if ferr := a.emptyCache(); ferr != nil {
			return 0, 0, ferr
		}
		ptr, err = a.raw.alloc(size)
	}
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			return 0, 0, a.oom(n, cachedBefore, err, 0)
		}
		return 0, 0, err
	}
	a.allocs++
	a.inUse += size
	a.reserved += size
	a.peak = max(a.peak, a.reserved+a.outsideBytes())
	return ptr, size, nil
}

func (a *cachingAllocator) oom(n, cached int64, cause error, limit int64) *allocOOM {
	e := &allocOOM{want: n, inUse: a.inUse, cached: cached, limit: limit, cause: cause}
	if f, t, err := a.raw.memInfo(); err == nil {
		e.free, e.total = f, t
	}
	return e
}

// free returns a block of the rounded size alloc gave to the cache.
func (a *cachingAllocator) free(ptr uintptr, size int64) {
	if size == 0 {
		return
	}
	a.pools[size] = append(a.pools[size], ptr)
	a.inUse -= size
	a.cached += size
}

// emptyCache returns every cached block to the device.
func (a *cachingAllocator) emptyCache() error {
	sizes := make([]int64, 0, len(a.pools))
	for s := range a.pools {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	var first error
	for _, s := range sizes {
		for _, p := range a.pools[s] {
			if err := a.raw.free(p); err != nil && first == nil {
				first = err
			}
			a.cached -= s
			a.reserved -= s
		}
		delete(a.pools, s)
	}
	return first
}
