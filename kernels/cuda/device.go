// Package cuda is gochat's NVIDIA GPU backend: kernels.Device on the CUDA
// driver API, NVRTC and cuBLAS, loaded at run time with purego (no cgo), so
// one CGO_ENABLED=0 binary runs on machines with and without GPUs.
//
// Nothing is loaded until New (or Probe) is called. New finds the
// libraries (discover.go: the driver by its soname, NVRTC and cuBLAS in
// GOCHAT_CUDA_LIB_DIR, LD_LIBRARY_PATH, CUDA_HOME/CUDA_PATH,
// /usr/local/cuda*, pip wheels' site-packages/nvidia/*/lib and torch/lib,
// the system folders), retains the device's primary context (shared with
// NCCL and anything else in the process), creates one stream and a cuBLAS
// handle on it. Every op is queued on that stream; Sync waits for it and
// reports a deferred error, and the host copies (Write*, Read*) wait for
// the work before them.
//
// The kernels are CUDA C in cu/*.cu, embedded, compiled by NVRTC on the
// first launch for the device's sm_XY (PTX for the newest architecture
// NVRTC knows when it does not know the device's) and kept in
// DefaultCacheDir keyed by a hash of the source, the target and NVRTC's
// version. GEMMs run through cublasGemmEx with fp32 compute: F32 operands
// as fp32 (no TF32), and a GEMM with a BF16 operand as a bf16 GEMM, the F32
// operand rounded to bf16 first (tensor cores, fp32 accumulation), as the
// contract's Precision section says.
//
// Memory comes from a caching allocator (alloc.go). Every op wrapper
// checks its buffers' dtypes, devices and lengths before it launches and
// panics naming the op and the operand, as the CPU backend panics on bad
// shapes. Where the CPU backend panics on bad values inside a buffer (a
// target, id or position out of range), which the host cannot see without
// a copy, the kernels write NaN instead (see each op).
package cuda

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// Buffer is device memory: a view of n elements of dt at a device address.
type Buffer struct {
	dev  *Device
	ptr  uintptr
	n    int
	dt   kernels.DType
	size int64 // the block's rounded size (a buffer Alloc returned), 0 for views
	root bool
	seq  uint64    // of a buffer Alloc returned: its place in the device's allocations (Mark)
	blk  *vmmBlock // the reserved range of a buffer with its own chunks (vmm.go), nil for the caching allocator's
}

// DType implements kernels.Buffer.
func (b *Buffer) DType() kernels.DType { return b.dt }

// Len implements kernels.Buffer.
func (b *Buffer) Len() int { return b.n }

// Slice implements kernels.Buffer.
func (b *Buffer) Slice(off, n int) kernels.Buffer {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("cuda: Slice(%d, %d) of a buffer of %d", off, n, b.n))
	}
	return &Buffer{dev: b.dev, ptr: b.ptr + uintptr(off*b.dt.Size()), n: n, dt: b.dt, blk: b.blk}
}

// Ptr is the device address of the buffer's first element (for code that
// hands buffers to other CUDA libraries, such as NCCL).
func (b *Buffer) Ptr() uintptr { return b.ptr }

// bytes is the buffer's size in bytes.
func (b *Buffer) bytes() int { return b.n * b.dt.Size() }

// Options configure a Device.
type Options struct {
	// Ordinal is the GPU's index as the driver counts them (cuda:N).
	Ordinal int
	// MemLimit caps the device memory the allocator holds (live buffers
	// and its cache); 0 means the device's memory.
	MemLimit int64
	// CacheDir is where compiled kernels are kept; "" means
	// DefaultCacheDir, "off" no disk cache.
	CacheDir string
	// OnBuild, if set, is told when the kernels are compiled (cached
	// false) or taken from the disk cache, and for which target.
	OnBuild func(target string, cached bool)
}

// Device is the CUDA backend on one GPU. It implements kernels.Device. It
// is not safe for concurrent use.
type Device struct {
	g       gpu
	ordinal int
	name    string
	cc      int // compute capability, 10·major + minor
	alloc   *cachingAllocator
	live    int64 // bytes of live buffers (as asked, not rounded)
	peak    int64
	limit   int64
	roots   map[*Buffer]struct{}
	seq     uint64 // buffers Alloc has returned (Mark)
	err     error  // the first deferred error

	vm     *vmmSpace // buffers with their own chunks (vmm.go); nil without VMM
	vmNote string    // why vm is nil
}

var (
	_ kernels.Device = (*Device)(nil)
	_ kernels.Buffer = (*Buffer)(nil)
)

// New opens GPU opts.Ordinal. The error names what is missing: a library
// (with every path tried), a driver that does not start, or no such GPU.
func New(opts Options) (*Device, error) {
	l, err := loadLibs(sysDL{}, SearchEnvFrom(os.Getenv), osGlobber{})
	if err != nil {
		return nil, err
	}
	cache := opts.CacheDir
	switch cache {
	case "":
		cache = DefaultCacheDir()
	case "off":
		cache = ""
	}
	g, err := openGPU(l, opts.Ordinal, cache)
	if err != nil {
		return nil, err
	}
	if g.nvrtcV, err = l.nvrtc.version(); err != nil {
		_ = g.close()
		return nil, err
	}
	if g.tgt, err = chooseTarget(g.cc, l.nvrtc.supportedArchs()); err != nil {
		_ = g.close()
		return nil, err
	}
	if opts.OnBuild != nil {
		g.onBuild = func(t target, hit bool) { opts.OnBuild(t.String(), hit) }
	}
	name := make([]byte, 256)
	call(l.drv.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(g.dev))
	full := fmt.Sprintf("cuda:%d (%s, sm_%d)", opts.Ordinal, cStringBytes(name), g.cc)
	d, err := newDevice(g, full, g.cc, opts.MemLimit)
	if err != nil {
		_ = g.close()
		return nil, err
	}
	d.ordinal = opts.Ordinal
	return d, nil
}

// newDevice wraps a gpu (the driver's, or the tests' fake).
func newDevice(g gpu, name string, cc int, limit int64) (*Device, error) {
	if limit < 0 {
		return nil, fmt.Errorf("cuda: negative memory limit %d", limit)
	}
	d := &Device{g: g, name: name, cc: cc, alloc: newCachingAllocator(g, limit), limit: limit, roots: make(map[*Buffer]struct{})}
	d.useVMM()
	d.alloc.outside = d.vmmBytes
	return d, nil
}

// Name implements kernels.Device, e.g. "cuda:0 (NVIDIA H100 80GB HBM3, sm_90)".
func (d *Device) Name() string { return d.name }

// NativeBF16 reports whether the GPU has bf16 tensor cores (sm_80 and
// later), which makes bf16 the automatic --dtype.
func (d *Device) NativeBF16() bool { return d.cc >= 80 }

// Close frees every buffer still live, returns the cached memory to the
// driver and releases the context: the device memory this Device held is
// free for the next Device opened on the GPU, even where another user of
// the primary context (NCCL, a second Device) keeps the context alive.
// Buffers of this Device must not be used afterwards.
func (d *Device) Close() error {
	prior := d.err
	d.ReleaseSince(0)
	var err error
	if prior == nil {
		err = d.err // the release's own error (an earlier one is Sync's)
	}
	if cerr := d.g.close(); err == nil {
		err = cerr
	}
	return err
}

// Ordinal is the GPU's index as the driver counts them: N of cuda:N.
func (d *Device) Ordinal() int { return d.ordinal }

// OnStream runs f on an OS thread where the device's (primary) context is
// current, with the handle of the stream every op of the device is queued
// on (a CUstream, which is also a cudaStream_t), so that another CUDA
// library (NCCL) queues its work in order with the device's: after the
// ops before it and before the ops after it. f must not keep the handle
// past Close.
func (d *Device) OnStream(f func(stream uintptr) error) error { return d.g.onStream(f) }

// StreamDone reports whether the work queued on the stream has finished
// (cuStreamQuery), without waiting as Sync does; its error is the first
// error since the device was made, as Sync's.
func (d *Device) StreamDone() (bool, error) {
	done, err := d.g.query()
	d.fail(err)
	if d.err != nil {
		return true, d.err
	}
	return done, nil
}

// Addr returns the device address of b's first element (for another CUDA
// library, such as NCCL), or an error when b is not this device's memory.
func (d *Device) Addr(b kernels.Buffer) (uintptr, error) {
	cb, ok := b.(*Buffer)
	if !ok {
		return 0, fmt.Errorf("cuda: a %T is not device memory", b)
	}
	if cb.dev != d {
		return 0, fmt.Errorf("cuda: a buffer of %s, not of %s", cb.dev.name, d.name)
	}
	return cb.ptr, nil
}

// Trim returns the allocator's cached blocks to the device (the hybrid
// engine calls it after releasing its inference workspace).
func (d *Device) Trim() { d.trimAll() }

// A Mark is a point in a Device's allocations: ReleaseSince(m) frees the
// buffers allocated after it. The zero Mark is before the first.
type Mark uint64

// Mark returns the point the buffers allocated from now on come after, for
// ReleaseSince: a user of the device for a while (a step of gochat train
// on a GPU shared by the steps) marks where its allocations begin.
func (d *Device) Mark() Mark { return Mark(d.seq) }

// ReleaseSince frees every buffer allocated after m that is still live,
// newest first, then returns the cached blocks and pooled chunks to the
// driver (Trim), so that the device holds what it held at m, less its
// cache: the memory is free for whatever comes next, this process's or
// another's. It returns the bytes of the live buffers it freed (what the
// user since m had not freed itself). Those buffers, and views of them,
// must not be used afterwards; buffers allocated before m are untouched.
// Errors are deferred to Sync.
func (d *Device) ReleaseSince(m Mark) (freed int64) {
	var left []*Buffer
	for b := range d.roots {
		if b.seq > uint64(m) {
			left = append(left, b)
		}
	}
	slices.SortFunc(left, func(a, b *Buffer) int { return cmp.Compare(b.seq, a.seq) })
	before := d.live
	for _, b := range left {
		d.Free(b)
	}
	freed = before - d.live
	d.fail(d.g.sync()) // the queued work may still use them
	d.trimAll()
	return freed
}

// ResetPeak restarts the peaks MemStats and CacheStats report from the
// memory held now, so that the next user of the device (the next step of
// gochat train) sees its own high-water marks.
func (d *Device) ResetPeak() {
	d.peak = d.live
	d.alloc.peak = d.alloc.reserved + d.vmmBytes()
}

// fail keeps the first deferred error, for Sync.
func (d *Device) fail(err error) {
	if err != nil && d.err == nil {
		d.err = err
	}
}

// must panics on a host copy's error: Read and Write have no error to
// return, and their data is wrong after one.
func (d *Device) must(op string, err error) {
	if err != nil {
		d.fail(err)
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
}

// Alloc implements kernels.Device: a zeroed buffer of F32, BF16 or I32.
func (d *Device) Alloc(dt kernels.DType, n int) (kernels.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cuda: Alloc of %d %v elements", n, dt)
	}
	if dt != kernels.F32 && dt != kernels.BF16 && dt != kernels.I32 {
		return nil, fmt.Errorf("cuda: Alloc of %v is not supported (F32, BF16 and I32 are)", dt)
	}
	want := int64(n) * int64(dt.Size())
	if d.vm != nil && want >= d.vm.gran {
		return d.allocVMM(dt, n, want)
	}
	ptr, size, err := d.alloc.alloc(want)
	if err != nil && d.vm != nil && d.vm.pooled > 0 && errors.Is(err, ErrOutOfMemory) {
		d.emptyVMMPool()
		ptr, size, err = d.alloc.alloc(want)
	}
	if err != nil {
		if oom, ok := err.(*allocOOM); ok {
			return nil, &kernels.OutOfMemoryError{Device: d.name, Want: want, Live: d.live, Limit: oom.limit,
				Cached: oom.cached, DeviceFree: oom.free, DeviceTotal: oom.total}
		}
		return nil, fmt.Errorf("cuda: Alloc of %d bytes: %w", want, err)
	}
	b := &Buffer{dev: d, ptr: ptr, n: n, dt: dt, size: size, root: true}
	if err := d.g.memsetZero(ptr, int(want)); err != nil {
		d.alloc.free(ptr, size)
		return nil, err
	}
	d.seq++
	b.seq = d.seq
	d.roots[b] = struct{}{}
	d.live += want
	d.peak = max(d.peak, d.live)
	return b, nil
}

// Free implements kernels.Device: the block goes back to the allocator's
// cache. Freeing a view, another device's buffer or a buffer twice panics.
func (d *Device) Free(b kernels.Buffer) {
	if b == nil {
		return
	}
	cb, ok := b.(*Buffer)
	if !ok || cb.dev != d || !cb.root {
		panic(fmt.Sprintf("cuda: Free of %T that %s did not Alloc (a view, or another device's)", b, d.name))
	}
	if _, live := d.roots[cb]; !live {
		panic("cuda: Free of a buffer freed before")
	}
	delete(d.roots, cb)
	if cb.blk != nil {
		d.releaseBlock(cb.blk)
		return
	}
	d.alloc.free(cb.ptr, cb.size)
	d.live -= int64(cb.bytes())
}

// MemStats implements kernels.Device: the bytes of live buffers as asked
// for (the allocator's rounding and cache are not counted; of a buffer
// with its own chunks, the chunks mapped: what Decommit released is not
// counted), their peak, and the memory limit.
func (d *Device) MemStats() kernels.MemStats {
	return kernels.MemStats{Live: d.live, Peak: d.peak, Limit: d.limit}
}

// CacheStats reports the bytes held from the device: in use by live
// buffers (rounded; of buffers with their own chunks, the chunks mapped),
// cached for reuse, held in all (both), and the peak of the last.
func (d *Device) CacheStats() (inUse, cached, reserved, peak int64) {
	a := d.alloc
	inUse, cached = a.inUse, a.cached
	if v := d.vm; v != nil {
		inUse += v.committed - v.pooled
		cached += v.pooled
	}
	return inUse, cached, a.reserved + d.vmmBytes(), a.peak
}

// MemInfo reports the GPU's free and total memory as the driver sees it
// (cuMemGetInfo, in bytes; free counts neither this context's allocations
// nor its allocator's cache, which it can give back). Under
// Options.MemLimit it reports the limit's instead where they are smaller:
// total the limit, free the limit less what the allocator holds. The
// memory pre-flight plans with these figures, so a capped device is
// planned as a GPU of that size.
func (d *Device) MemInfo() (free, total int64, err error) {
	free, total, err = d.g.memInfo()
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: %s: %w", d.name, err)
	}
	if d.limit > 0 {
		// What the limit leaves beside what the allocator holds (its
		// blocks, cached ones included, and the mapped chunks), as the
		// driver's free leaves beside what every context holds.
		held := d.alloc.reserved + d.vmmBytes()
		free, total = min(free, max(d.limit-held, 0)), min(total, d.limit)
	}
	return free, total, nil
}

// buffer returns b as this device's buffer, or panics.
func (d *Device) buffer(op, name string, b kernels.Buffer) *Buffer {
	cb, ok := b.(*Buffer)
	if !ok {
		panic(fmt.Sprintf("cuda: %s: %s is a %T, not a CUDA buffer", op, name, b))
	}
	if cb.dev != d {
		panic(fmt.Sprintf("cuda: %s: %s belongs to %s, not %s", op, name, cb.dev.name, d.name))
	}
	return cb
}

// WriteF32 implements kernels.Device; a BF16 dst receives src rounded to
// nearest even (on the host).
func (d *Device) WriteF32(dst kernels.Buffer, src []float32) {
	b := d.buffer("WriteF32", "dst", dst)
	if len(src) != b.n {
		panic(fmt.Sprintf("cuda: WriteF32 of %d elements into %d", len(src), b.n))
	}
	if b.n == 0 {
		return
	}
	switch b.dt {
	case kernels.F32:
		d.must("WriteF32", d.g.htod(b.ptr, unsafe.Pointer(&src[0]), b.bytes()))
	case kernels.BF16:
		h := make([]uint16, len(src))
		for i, f := range src {
			h[i] = toBF16(f)
		}
		d.must("WriteF32", d.g.htod(b.ptr, unsafe.Pointer(&h[0]), b.bytes()))
	default:
		panic(fmt.Sprintf("cuda: WriteF32 into a %v buffer", b.dt))
	}
}

// ReadF32 implements kernels.Device; a BF16 src is widened.
func (d *Device) ReadF32(dst []float32, src kernels.Buffer) {
	b := d.buffer("ReadF32", "src", src)
	if len(dst) != b.n {
		panic(fmt.Sprintf("cuda: ReadF32 of %d elements into %d", b.n, len(dst)))
	}
	if d.err != nil {
		panic(fmt.Sprintf("cuda: ReadF32 after an earlier error: %v", d.err))
	}
	if b.n == 0 {
		return
	}
	switch b.dt {
	case kernels.F32:
		d.must("ReadF32", d.g.dtoh(unsafe.Pointer(&dst[0]), b.ptr, b.bytes()))
	case kernels.BF16:
		h := make([]uint16, b.n)
		d.must("ReadF32", d.g.dtoh(unsafe.Pointer(&h[0]), b.ptr, b.bytes()))
		for i, v := range h {
			dst[i] = math.Float32frombits(uint32(v) << 16)
		}
	default:
		panic(fmt.Sprintf("cuda: ReadF32 of a %v buffer", b.dt))
	}
}

// WriteI32 implements kernels.Device.
func (d *Device) WriteI32(dst kernels.Buffer, src []int32) {
	b := d.buffer("WriteI32", "dst", dst)
	if b.dt != kernels.I32 || len(src) != b.n {
		panic(fmt.Sprintf("cuda: WriteI32 of %d elements into %d %v", len(src), b.n, b.dt))
	}
	if b.n > 0 {
		d.must("WriteI32", d.g.htod(b.ptr, unsafe.Pointer(&src[0]), b.bytes()))
	}
}

// ReadI32 implements kernels.Device.
func (d *Device) ReadI32(dst []int32, src kernels.Buffer) {
	b := d.buffer("ReadI32", "src", src)
	if b.dt != kernels.I32 || len(dst) != b.n {
		panic(fmt.Sprintf("cuda: ReadI32 of %d %v elements into %d", b.n, b.dt, len(dst)))
	}
	if d.err != nil {
		panic(fmt.Sprintf("cuda: ReadI32 after an earlier error: %v", d.err))
	}
	if b.n > 0 {
		d.must("ReadI32", d.g.dtoh(unsafe.Pointer(&dst[0]), b.ptr, b.bytes()))
	}
}

// Zero implements kernels.Device.
func (d *Device) Zero(b kernels.Buffer) {
	cb := d.buffer("Zero", "b", b)
	d.fail(d.g.memsetZero(cb.ptr, cb.bytes()))
}

// Copy implements kernels.Device: same dtypes copy; F32 into BF16 rounds
// to nearest even and BF16 into F32 widens, on the device.
func (d *Device) Copy(dst, src kernels.Buffer) {
	db, sb := d.buffer("Copy", "dst", dst), d.buffer("Copy", "src", src)
	if db.n != sb.n {
		panic(fmt.Sprintf("cuda: Copy of %d elements into %d", sb.n, db.n))
	}
	switch {
	case db.dt == sb.dt:
		d.fail(d.g.dtod(db.ptr, sb.ptr, db.bytes()))
	case sb.dt == kernels.F32 && db.dt == kernels.BF16:
		d.launchN(kF32ToBF16, db.n, ptr(db), ptr(sb), i64(db.n))
	case sb.dt == kernels.BF16 && db.dt == kernels.F32:
		d.launchN(kBF16ToF32, db.n, ptr(db), ptr(sb), i64(db.n))
	default:
		panic(fmt.Sprintf("cuda: Copy of %v into %v", sb.dt, db.dt))
	}
}

// Sync implements kernels.Device: it waits for the stream and returns the
// first error since the device was made (a failed launch, a kernel fault).
func (d *Device) Sync() error {
	d.fail(d.g.sync())
	return d.err
}

// toBF16 rounds f to the nearest bfloat16, ties to even, NaNs quiet
// (kernels/cpu.ToBF16, which the f32_to_bf16 of the sources mirrors).
func toBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// scratch is device memory for an op's temporaries: returned to the cache
// by release right after the launches that use it are queued (the one
// stream orders any later user behind them).
type scratch struct {
	ptr  uintptr
	size int64
}

func (d *Device) scratch(op string, bytes int64) scratch {
	p, size, err := d.alloc.alloc(bytes)
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %d bytes of scratch: %v", op, bytes, err))
	}
	return scratch{p, size}
}

func (d *Device) release(s scratch) { d.alloc.free(s.ptr, s.size) }
