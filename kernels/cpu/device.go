// Package cpu is gochat's CPU backend and the numerical reference for every
// other backend. Buffers are Go slices (F32, I32); GEMM runs through Go
// assembly micro-kernels (AVX-512 or AVX2+FMA, chosen at run time from the
// CPU's features, with a portable Go fallback); every other kernel is plain Go
// fanned out over goroutines.
package cpu

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// F32 is a CPU buffer of float32.
type F32 []float32

// DType implements kernels.Buffer.
func (F32) DType() kernels.DType { return kernels.F32 }

// Len implements kernels.Buffer.
func (b F32) Len() int { return len(b) }

// Slice implements kernels.Buffer.
func (b F32) Slice(off, n int) kernels.Buffer { return b[off : off+n : off+n] }

// I32 is a CPU buffer of int32.
type I32 []int32

// DType implements kernels.Buffer.
func (I32) DType() kernels.DType { return kernels.I32 }

// Len implements kernels.Buffer.
func (b I32) Len() int { return len(b) }

// Slice implements kernels.Buffer.
func (b I32) Slice(off, n int) kernels.Buffer { return b[off : off+n : off+n] }

// f32 returns the slice behind a buffer; nil stays nil.
func f32(b kernels.Buffer) []float32 {
	if b == nil {
		return nil
	}
	s, ok := b.(F32)
	if !ok {
		panic(fmt.Sprintf("cpu: want an F32 buffer, got %T", b))
	}
	return s
}

// i32 returns the slice behind an index buffer; nil stays nil.
func i32(b kernels.Buffer) []int32 {
	if b == nil {
		return nil
	}
	s, ok := b.(I32)
	if !ok {
		panic(fmt.Sprintf("cpu: want an I32 buffer, got %T", b))
	}
	return s
}

// Options configure a Device.
type Options struct {
	// Threads is the number of goroutines kernels fan out to; 0 means
	// runtime.NumCPU().
	Threads int
	// ISA forces a GEMM micro-kernel: "avx512", "avx2" or "generic".
	// Empty picks the best the CPU supports.
	ISA string
	// MemLimit caps the bytes of live buffers (allocated and not freed);
	// an Alloc past it fails with an error instead of the kernel killing
	// the process. 0 means no cap.
	MemLimit int64
	// Allocator, when set, supplies the buffers' memory instead of the Go
	// heap (page-locked memory for a GPU's copies; see Allocator). Free
	// then returns a buffer's memory to it at once, and Decommit only
	// zeroes.
	Allocator Allocator
}

// Device is the CPU backend. It implements kernels.Device.
type Device struct {
	threads int
	isa     isa
	limit   int64
	alloc   Allocator    // nil: the Go heap
	live    atomic.Int64 // bytes of buffers allocated and not freed
	peak    atomic.Int64
}

var (
	_ kernels.Device      = (*Device)(nil)
	_ kernels.Decommitter = (*Device)(nil)
)

// New returns a CPU device.
func New(opts Options) (*Device, error) {
	t := opts.Threads
	if t <= 0 {
		t = runtime.NumCPU()
	}
	is, err := pickISA(opts.ISA)
	if err != nil {
		return nil, err
	}
	if opts.MemLimit < 0 {
		return nil, fmt.Errorf("cpu: negative memory limit %d", opts.MemLimit)
	}
	return &Device{threads: t, isa: is, limit: opts.MemLimit, alloc: opts.Allocator}, nil
}

// Threads is the number of goroutines kernels use.
func (d *Device) Threads() int { return d.threads }

// Name implements kernels.Device.
func (d *Device) Name() string { return fmt.Sprintf("cpu/%s (%d threads)", d.isa, d.threads) }

// Alloc implements kernels.Device: a zeroed F32, BF16 or I32 buffer. It
// fails when n is negative or the buffer would take the live bytes past
// Options.MemLimit.
func (d *Device) Alloc(dt kernels.DType, n int) (kernels.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cpu: Alloc of %d %v elements", n, dt)
	}
	size := int64(n) * int64(dt.Size())
	if dt != kernels.F32 && dt != kernels.BF16 && dt != kernels.I32 {
		return nil, fmt.Errorf("cpu: Alloc of %v is not supported (F32, BF16 and I32 are)", dt)
	}
	live := d.live.Add(size)
	if d.limit > 0 && live > d.limit {
		d.live.Add(-size)
		return nil, &kernels.OutOfMemoryError{Device: d.Name(), Want: size, Live: live - size, Limit: d.limit}
	}
	if d.alloc != nil {
		b, err := d.allocFrom(dt, n)
		if err != nil {
			d.live.Add(-size)
			return nil, err
		}
		d.notePeak(live)
		return b, nil
	}
	d.notePeak(live)
	switch dt {
	case kernels.F32:
		b := make(F32, n)
		if n > 0 {
			adviseHuge(unsafe.Pointer(&b[0]), int(size))
		}
		return b, nil
	case kernels.BF16:
		b := make(BF16, n)
		if n > 0 {
			adviseHuge(unsafe.Pointer(&b[0]), int(size))
		}
		return b, nil
	default:
		return make(I32, n), nil
	}
}

// notePeak raises the peak to live.
func (d *Device) notePeak(live int64) {
	for p := d.peak.Load(); live > p && !d.peak.CompareAndSwap(p, live); p = d.peak.Load() {
	}
}

// Free implements kernels.Device: it returns b's bytes to the live count;
// the garbage collector reclaims the memory once nothing refers to it (or,
// with Options.Allocator, the allocator takes it back now).
func (d *Device) Free(b kernels.Buffer) {
	if b == nil {
		return
	}
	d.live.Add(-int64(b.Len()) * int64(b.DType().Size()))
	if d.alloc != nil && b.Len() > 0 {
		d.alloc.Free(d.Bytes(b))
	}
}

// Trim returns the memory of freed buffers to the operating system now (a
// garbage collection, then debug.FreeOSMemory's scavenge) instead of when
// the collector next runs. Callers that have just freed large buffers they
// will allocate again in other shapes call it (the hybrid engine leaving
// Generate mode): freed spans of one size do not serve allocations of
// another, and until the next collection they stay resident.
func (d *Device) Trim() { debug.FreeOSMemory() }

// MemStats implements kernels.Device.
func (d *Device) MemStats() kernels.MemStats {
	return kernels.MemStats{Live: d.live.Load(), Peak: d.peak.Load(), Limit: d.limit}
}

// WriteF32 implements kernels.Device; a BF16 dst receives src rounded to
// nearest even.
func (d *Device) WriteF32(dst kernels.Buffer, src []float32) {
	if h, ok := dst.(BF16); ok {
		roundSliceBF16(h, src)
		return
	}
	mustCopy(f32(dst), src)
}

// ReadF32 implements kernels.Device; a BF16 src is widened (exact).
func (d *Device) ReadF32(dst []float32, src kernels.Buffer) {
	if h, ok := src.(BF16); ok {
		widenSliceBF16(dst, h)
		return
	}
	mustCopy(dst, f32(src))
}

// WriteI32 implements kernels.Device.
func (d *Device) WriteI32(dst kernels.Buffer, src []int32) { mustCopy(i32(dst), src) }

// ReadI32 implements kernels.Device.
func (d *Device) ReadI32(dst []int32, src kernels.Buffer) { mustCopy(dst, i32(src)) }

func mustCopy[T any](dst, src []T) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("cpu: copy of %d elements into %d", len(src), len(dst)))
	}
	copy(dst, src)
}

// Zero implements kernels.Device.
func (d *Device) Zero(b kernels.Buffer) {
	switch s := b.(type) {
	case F32:
		clear(s)
	case I32:
		clear(s)
	case BF16:
		clear(s)
	default:
		panic(fmt.Sprintf("cpu: Zero of %T", b))
	}
}

// Copy implements kernels.Device. F32 and BF16 convert into each other
// (rounding to nearest even, or widening).
func (d *Device) Copy(dst, src kernels.Buffer) {
	if dst.Len() != src.Len() {
		panic(fmt.Sprintf("cpu: copy of %d elements into %d", src.Len(), dst.Len()))
	}
	switch s := src.(type) {
	case F32:
		if h, ok := dst.(BF16); ok {
			d.parallelFor(len(s), elemGrain, func(lo, hi int) { roundSliceBF16(h[lo:hi], s[lo:hi]) })
			return
		}
		mustCopy(f32(dst), s)
	case BF16:
		if f, ok := dst.(F32); ok {
			d.parallelFor(len(s), elemGrain, func(lo, hi int) { widenSliceBF16(f[lo:hi], s[lo:hi]) })
			return
		}
		mustCopy(bf16(dst), s)
	case I32:
		mustCopy(i32(dst), s)
	default:
		panic(fmt.Sprintf("cpu: Copy of %T", src))
	}
}

// Sync implements kernels.Device; CPU work is synchronous.
func (d *Device) Sync() error { return nil }

// parallelFor splits [0,n) into at most d.threads contiguous chunks of at
// least grain items and runs fn on each, the last one on the calling
// goroutine.
func (d *Device) parallelFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	chunks := min(d.threads, (n+grain-1)/grain)
	if chunks <= 1 {
		fn(0, n)
		return
	}
	per := (n + chunks - 1) / chunks
	chunks = (n + per - 1) / per
	// The GEMM's polling workers run the chunks (gemmFanOutN): a worker
	// that has just finished a GEMM is still polling and starts at once,
	// where a new goroutine would wait for a parked thread to wake.
	gemmFanOutN(chunks, chunks, func(i int) {
		fn(i*per, min((i+1)*per, n))
	})
}

// NativeBF16 reports whether this device computes bf16 products natively,
// faster than fp32: its bf16 GEMM multiplies bf16 tiles (AMX, or
// VDPBF16PS where that kernel is chosen: see gemmBF16ImplFor). Elsewhere,
// Intel CPUs whose AMX is missing or refused included, bf16 still works,
// through the fp32 kernels on converted panels, and saves memory but no
// time (opt-125m training at 4×128 on an Emerald Rapids VM without AMX:
// 248 tokens/s in bf16 and in fp32).
func (d *Device) NativeBF16() bool {
	return d.isa == isaAVX512 && hasBF16() && gemmBF16ImplFor(d.isa).tile != nil
}

// Decommit implements kernels.Decommitter: b reads as zeros afterwards, and
// the whole pages inside it go back to the operating system (resident
// memory drops) until something writes to them again.
func (d *Device) Decommit(b kernels.Buffer) {
	n, es := b.Len(), b.DType().Size()
	if n == 0 {
		return
	}
	if d.alloc != nil { // the allocator's memory (page-locked) stays
		d.Zero(b)
		return
	}
	var p unsafe.Pointer
	switch s := b.(type) {
	case F32:
		p = unsafe.Pointer(&s[0])
	case BF16:
		p = unsafe.Pointer(&s[0])
	case I32:
		p = unsafe.Pointer(&s[0])
	default:
		panic(fmt.Sprintf("cpu: Decommit of %T", b))
	}
	head, tail := releasePages(p, n*es)
	// Element-aligned edges: head and tail are multiples of the element
	// size (pages and the buffer both are).
	d.Zero(b.Slice(0, head/es))
	d.Zero(b.Slice(n-tail/es, tail/es))
}

// DecommitReturnsMemory reports whether Decommit gives memory back to the
// operating system: not for buffers in an Options.Allocator's memory.
func (d *Device) DecommitReturnsMemory() bool { return d.alloc == nil }

// Commit implements kernels.Decommitter: nothing to do, the operating
// system commits a decommitted page on its first write (and a read before
// that sees zeros, as the contract wants).
func (d *Device) Commit(b kernels.Buffer) error { return nil }
