package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// Decommit and Commit (kernels.Decommitter) on a GPU, through the CUDA
// driver's virtual memory management (VMM): a large buffer is a reserved
// range of device addresses backed by physical chunks of the driver's
// allocation granularity (2 MiB typically), each created, mapped and
// released on its own, so that ZeRO-3's gathered parameters, ZeRO-2's
// unowned gradients and an offloaded frozen model's layers hold device
// memory only while they are used. A buffer's address never changes:
// Decommit unmaps and releases the chunks wholly inside the view (and
// zeroes the partial chunks at its edges), Commit creates, maps and zeroes
// the missing chunks that intersect the view. GPUs have no demand paging:
// a kernel touching an unmapped chunk faults, hence kernels.Decommitter's
// rule that users Commit before they read or write.
//
// Buffers smaller than one chunk stay on the caching allocator (alloc.go),
// and so does everything when the driver or the GPU lacks VMM
// (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, or one of the
// cuMem* functions): Decommit then only zeroes, as before, and
// Device.VirtualMemory says why.

// vmmAPI is libcuda's virtual memory management functions (CUDA 10.2 and
// later); all optional: without them the device keeps the caching
// allocator for everything.
type vmmAPI struct {
	cuMemGetAllocationGranularity, cuMemAddressReserve, cuMemAddressFree uintptr
	cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap, cuMemSetAccess      uintptr
}

func (v *vmmAPI) symbols() []symbol {
	return []symbol{
		{"cuMemGetAllocationGranularity", &v.cuMemGetAllocationGranularity, true},
		{"cuMemAddressReserve", &v.cuMemAddressReserve, true},
		{"cuMemAddressFree", &v.cuMemAddressFree, true},
		{"cuMemCreate", &v.cuMemCreate, true},
		{"cuMemRelease", &v.cuMemRelease, true},
		{"cuMemMap", &v.cuMemMap, true},
		{"cuMemUnmap", &v.cuMemUnmap, true},
		{"cuMemSetAccess", &v.cuMemSetAccess, true},
	}
}

func (v *vmmAPI) complete() bool {
	for _, s := range v.symbols() {
		if *s.dst == 0 {
			return false
		}
	}
	return true
}

// The driver's VMM constants (cuda.h).
const (
	attrVMMSupported      = 102 // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
	memAllocationPinned   = 1   // CU_MEM_ALLOCATION_TYPE_PINNED
	memHandleNone         = 0   // CU_MEM_HANDLE_TYPE_NONE
	memLocationDevice     = 1   // CU_MEM_LOCATION_TYPE_DEVICE
	memAccessReadWrite    = 3   // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	memGranularityMinimum = 0   // CU_MEM_ALLOC_GRANULARITY_MINIMUM
)

// cuMemAllocationProp is CUmemAllocationProp as cuda.h lays it out on
// linux/amd64 (and every LP64 target), 32 bytes:
//
//	offset  0  CUmemAllocationType type              (enum, 4 bytes)
//	offset  4  CUmemAllocationHandleType requestedHandleTypes (enum, 4)
//	offset  8  CUmemLocation location: type (enum, 4), id (int, 4 at 12)
//	offset 16  void *win32HandleMetaData             (8, NULL here)
//	offset 24  allocFlags: compressionType (uchar), gpuDirectRDMACapable
//	           (uchar at 25), usage (ushort at 26), reserved[4] (28-31)
//
// TestVMMStructLayout checks these offsets.
type cuMemAllocationProp struct {
	typ         int32
	handleTypes int32
	locType     int32
	locID       int32
	win32Meta   uintptr
	compression uint8
	rdma        uint8
	usage       uint16
	reserved    [4]uint8
}

// cuMemAccessDesc is CUmemAccessDesc, 12 bytes: CUmemLocation location
// (type at 0, id at 4), CUmemAccess_flags flags (enum at 8).
type cuMemAccessDesc struct {
	locType int32
	locID   int32
	flags   int32
}

// vmmDriver is what a Device needs for buffers with chunks: reserved
// address ranges, and physical chunks of granularity() bytes mapped into
// them readable and writable by the device. driverVMM implements it on
// the driver API; the tests' fake records it.
type vmmDriver interface {
	granularity() int64
	// reserve returns bytes (a multiple of granularity) of device
	// addresses with no memory behind them.
	reserve(bytes int64) (uintptr, error)
	unreserve(va uintptr, bytes int64) error
	// mapChunk creates one chunk of memory (its contents undefined) and
	// maps it at va with read-write access; the error matches
	// ErrOutOfMemory when the device has not the memory.
	mapChunk(va uintptr) (handle uint64, err error)
	// unmapChunk unmaps the chunk at va and releases its memory; no queued
	// work may touch it any more (the caller synchronizes first).
	unmapChunk(va uintptr, handle uint64) error
}

// vmmProvider is a gpu that may have VMM: vmm returns nil and the reason
// when it has not.
type vmmProvider interface {
	vmm() (vmmDriver, string)
}

// driverVMM is VMM on the driver API, for the device of a driverGPU.
type driverVMM struct {
	g      *driverGPU
	gran   int64
	prop   cuMemAllocationProp
	access cuMemAccessDesc
}

// vmm implements vmmProvider: the GPU must report the VMM attribute and
// the driver export every function.
func (g *driverGPU) vmm() (vmmDriver, string) {
	v := &g.l.drv.vmm
	if !v.complete() {
		return nil, "the driver lacks the virtual memory management functions (cuMemCreate, cuMemMap, ...; CUDA 10.2 and later)"
	}
	on, err := g.l.attr(g.dev, attrVMMSupported)
	if err != nil {
		return nil, fmt.Sprintf("the VMM attribute could not be read: %v", err)
	}
	if on == 0 {
		return nil, "the GPU does not support virtual memory management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)"
	}
	d := &driverVMM{g: g}
	d.prop = cuMemAllocationProp{typ: memAllocationPinned, handleTypes: memHandleNone, locType: memLocationDevice, locID: g.dev}
	d.access = cuMemAccessDesc{locType: memLocationDevice, locID: g.dev, flags: memAccessReadWrite}
	if err := g.enter(); err != nil {
		return nil, err.Error()
	}
	defer g.leave()
	var gran uintptr
	if err := cuErr("cuMemGetAllocationGranularity", call(v.cuMemGetAllocationGranularity, uintptr(unsafe.Pointer(&gran)), uintptr(unsafe.Pointer(&d.prop)), memGranularityMinimum)); err != nil {
		return nil, err.Error()
	}
	if gran == 0 || gran&(gran-1) != 0 {
		return nil, fmt.Sprintf("the driver's allocation granularity %d is not a power of two", gran)
	}
	d.gran = int64(gran)
	return d, ""
}

func (d *driverVMM) granularity() int64 { return d.gran }

func (d *driverVMM) reserve(bytes int64) (uintptr, error) {
	if err := d.g.enter(); err != nil {
		return 0, err
	}
	defer d.g.leave()
	var va uintptr
	err := cuErr("cuMemAddressReserve", call(d.g.l.drv.vmm.cuMemAddressReserve, uintptr(unsafe.Pointer(&va)), uintptr(bytes), uintptr(d.gran), 0, 0))
	return va, err
}

func (d *driverVMM) unreserve(va uintptr, bytes int64) error {
	if err := d.g.enter(); err != nil {
		return err
	}
	defer d.g.leave()
	return cuErr("cuMemAddressFree", call(d.g.l.drv.vmm.cuMemAddressFree, va, uintptr(bytes)))
}

func (d *driverVMM) mapChunk(va uintptr) (uint64, error) {
	if err := d.g.enter(); err != nil {
		return 0, err
	}
	defer d.g.leave()
	v := &d.g.l.drv.vmm
	var h uint64
	if err := cuErr("cuMemCreate", call(v.cuMemCreate, uintptr(unsafe.Pointer(&h)), uintptr(d.gran), uintptr(unsafe.Pointer(&d.prop)), 0)); err != nil {
		return 0, err
	}
	if err := cuErr("cuMemMap", call(v.cuMemMap, va, uintptr(d.gran), 0, uintptr(h), 0)); err != nil {
		call(v.cuMemRelease, uintptr(h))
		return 0, err
	}
	if err := cuErr("cuMemSetAccess", call(v.cuMemSetAccess, va, uintptr(d.gran), uintptr(unsafe.Pointer(&d.access)), 1)); err != nil {
		call(v.cuMemUnmap, va, uintptr(d.gran))
		call(v.cuMemRelease, uintptr(h))
		return 0, err
	}
	return h, nil
}

func (d *driverVMM) unmapChunk(va uintptr, h uint64) error {
	if err := d.g.enter(); err != nil {
		return err
	}
	defer d.g.leave()
	v := &d.g.l.drv.vmm
	err := cuErr("cuMemUnmap", call(v.cuMemUnmap, va, uintptr(d.gran)))
	if rerr := cuErr("cuMemRelease", call(v.cuMemRelease, uintptr(h))); err == nil {
		err = rerr
	}
	return err
}

// vmmBlock is one buffer's reserved range and its chunks.
type vmmBlock struct {
	base    uintptr
	size    int64    // reserved bytes, a multiple of the granularity
	used    int64    // the buffer's bytes (the rest of the last chunk is never used)
	handles []uint64 // per chunk: its memory, while mapped
	mapped  []bool
	live    bool // handed out (not in the pool)
}

// chunkPlan is what Decommit does to a block for a view of bytes [lo,
// hi) from its base: the chunks [whole[0], whole[1]) lie wholly inside and
// are released; the edges (at most two byte ranges, each inside one chunk)
// are only zeroed.
type chunkPlan struct {
	whole [2]int
	edges [][2]int64
}

// planDecommit splits the view [lo, hi) of a block with chunks of gran
// bytes.
func planDecommit(lo, hi, gran int64) chunkPlan {
	var p chunkPlan
	if hi <= lo {
		return p
	}
	c0, c1 := (lo+gran-1)/gran, hi/gran // first chunk starting at or after lo, chunks ending by hi
	if c0 > c1 {                        // inside one chunk, touching neither of its ends
		p.edges = [][2]int64{{lo, hi}}
		return p
	}
	p.whole = [2]int{int(c0), int(c1)}
	if lo < c0*gran {
		p.edges = append(p.edges, [2]int64{lo, c0 * gran})
	}
	if c1*gran < hi {
		p.edges = append(p.edges, [2]int64{c1 * gran, hi})
	}
	return p
}

// chunksTouched is the chunks [c0, c1) that bytes [lo, hi) intersect.
func chunksTouched(lo, hi, gran int64) (c0, c1 int) {
	if hi <= lo {
		return 0, 0
	}
	return int(lo / gran), int((hi + gran - 1) / gran)
}

// vmmSpace is a Device's buffers with chunks: the driver, the blocks
// handed out and those freed and kept for reuse (by reserved size, with
// whatever chunks they had mapped), and the bytes mapped.
type vmmSpace struct {
	drv       vmmDriver
	gran      int64
	pool      map[int64][]*vmmBlock
	committed int64 // bytes of mapped chunks, live and pooled blocks
	pooled    int64 // the part of committed in pooled blocks
}

// VirtualMemory reports whether Decommit returns device memory: the
// driver's allocation granularity (the unit Decommit returns and the size
// from which buffers get their own chunks) or 0, and when 0, why not.
func (d *Device) VirtualMemory() (granularity int64, why string) {
	if d.vm == nil {
		return 0, d.vmNote
	}
	return d.vm.gran, ""
}

// DecommitReturnsMemory reports whether Decommit gives device memory back
// (VirtualMemory); without VMM it only zeroes.
func (d *Device) DecommitReturnsMemory() bool { return d.vm != nil }

var _ kernels.Decommitter = (*Device)(nil)

// useVMM sets up the device's VMM when its gpu has it.
func (d *Device) useVMM() {
	p, ok := d.g.(vmmProvider)
	if !ok {
		d.vmNote = "the GPU interface has no virtual memory management"
		return
	}
	drv, why := p.vmm()
	if drv == nil {
		d.vmNote = why
		return
	}
	d.vm = &vmmSpace{drv: drv, gran: drv.granularity(), pool: map[int64][]*vmmBlock{}}
}

// vmmBytes is the device memory mapped for buffers with their own chunks
// (live and pooled), for the caching allocator's limit and peak.
func (d *Device) vmmBytes() int64 {
	if d.vm == nil {
		return 0
	}
	return d.vm.committed
}

// allocVMM returns a zeroed buffer with its own chunks (bytes ≥ one
// chunk), reusing a pooled block of the same reserved size.
func (d *Device) allocVMM(dt kernels.DType, n int, want int64) (kernels.Buffer, error) {
	v := d.vm
	size := (want + v.gran - 1) / v.gran * v.gran
	var blk *vmmBlock
	reused := false
	if p := v.pool[size]; len(p) > 0 {
		reused = true
		blk = p[len(p)-1]
		v.pool[size] = p[:len(p)-1]
		v.pooled -= blk.committedBytes(v.gran)
	} else {
		va, err := v.drv.reserve(size)
		if err != nil {
			return nil, fmt.Errorf("cuda: Alloc of %d bytes: reserving addresses: %w", want, err)
		}
		nc := int(size / v.gran)
		blk = &vmmBlock{base: va, size: size, handles: make([]uint64, nc), mapped: make([]bool, nc)}
	}
	blk.live, blk.used = true, want
	b := &Buffer{dev: d, ptr: blk.base, n: n, dt: dt, root: true, blk: blk}
	d.live += blk.committedBytes(v.gran)
	d.peak = max(d.peak, d.live)
	if err := d.commitRange(blk, 0, size); err != nil {
		d.releaseBlock(blk)
		return nil, fmt.Errorf("cuda: Alloc of %d bytes: %w", want, err)
	}
	if reused { // the chunks kept in the pool hold old values (commitRange zeroed the new ones)
		d.fail(d.g.memsetZero(blk.base, int(want)))
	}
	d.seq++
	b.seq = d.seq
	d.roots[b] = struct{}{}
	return b, nil
}

func (b *vmmBlock) committedBytes(gran int64) int64 {
	n := int64(0)
	for _, m := range b.mapped {
		if m {
			n += gran
		}
	}
	return n
}

// commitRange maps the missing chunks that bytes [lo, hi) of blk
// intersect and zeroes them. A refusal empties the caches and retries
// once; then the error is an *kernels.OutOfMemoryError.
func (d *Device) commitRange(blk *vmmBlock, lo, hi int64) error {
	v := d.vm
	c0, c1 := chunksTouched(lo, hi, v.gran)
	for c := c0; c < c1; c++ {
		if blk.mapped[c] {
			continue
		}
		va := blk.base + uintptr(int64(c)*v.gran)
		h, err := d.mapChunk(va)
		if err != nil {
			return err
		}
		blk.handles[c], blk.mapped[c] = h, true
		v.committed += v.gran
		d.live += v.gran
		d.peak = max(d.peak, d.live)
		d.alloc.peak = max(d.alloc.peak, d.alloc.reserved+v.committed)
		d.fail(d.g.memsetZero(va, int(v.gran)))
	}
	return nil
}

// mapChunk maps one chunk at va within the limit, emptying the caches and
// retrying once when the memory is not there.
func (d *Device) mapChunk(va uintptr) (uint64, error) {
	v := d.vm
	cached := d.alloc.cached + v.pooled
	over := func() bool { return d.limit > 0 && d.alloc.reserved+v.committed+v.gran > d.limit }
	if over() {
		d.trimAll()
		if over() {
			return 0, d.commitOOM(v.gran, cached, d.limit)
		}
	}
	h, err := v.drv.mapChunk(va)
	if err != nil && errors.Is(err, ErrOutOfMemory) && cached > 0 {
		d.trimAll()
		h, err = v.drv.mapChunk(va)
	}
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			return 0, d.commitOOM(v.gran, cached, 0)
		}
		return 0, fmt.Errorf("cuda: mapping %d bytes of device memory: %w", v.gran, err)
	}
	return h, nil
}

func (d *Device) commitOOM(want, cached, limit int64) error {
	e := &kernels.OutOfMemoryError{Device: d.name, Want: want, Live: d.live, Limit: limit, Cached: cached}
	if f, t, err := d.g.memInfo(); err == nil {
		e.DeviceFree, e.DeviceTotal = f, t
	}
	return e
}

// trimAll empties the caching allocator's cache and the pool of blocks.
func (d *Device) trimAll() {
	d.fail(d.alloc.emptyCache())
	d.emptyVMMPool()
}

// emptyVMMPool releases the pooled blocks: their chunks and addresses.
func (d *Device) emptyVMMPool() {
	if d.vm == nil || len(d.vm.pool) == 0 {
		return
	}
	d.fail(d.g.sync()) // queued work may still use them
	for size, blks := range d.vm.pool {
		for _, b := range blks {
			d.vm.pooled -= b.committedBytes(d.vm.gran)
			d.destroyBlock(b)
		}
		delete(d.vm.pool, size)
	}
}

// destroyBlock unmaps a block's chunks and frees its addresses (after a
// sync).
func (d *Device) destroyBlock(b *vmmBlock) {
	v := d.vm
	for c, m := range b.mapped {
		if m {
			d.fail(v.drv.unmapChunk(b.base+uintptr(int64(c)*v.gran), b.handles[c]))
			b.mapped[c] = false
			v.committed -= v.gran
		}
	}
	d.fail(v.drv.unreserve(b.base, b.size))
}

// releaseBlock takes a live block out of the live bytes and pools it.
func (d *Device) releaseBlock(b *vmmBlock) {
	c := b.committedBytes(d.vm.gran)
	d.live -= c
	b.live = false
	d.vm.pooled += c
	d.vm.pool[b.size] = append(d.vm.pool[b.size], b)
}

// Decommit implements kernels.Decommitter: b reads as zeros afterwards;
// on a buffer with chunks the chunks wholly inside b are unmapped and
// their memory returned to the device (after the queued work: Decommit
// waits for the stream when it releases a chunk), the partial chunks at
// its edges are zeroed where mapped. Elsewhere (small buffers, a GPU
// without VMM) it zeroes b.
func (d *Device) Decommit(b kernels.Buffer) {
	cb := d.buffer("Decommit", "b", b)
	if cb.blk == nil {
		d.Zero(b)
		return
	}
	d.mustLive("Decommit", cb)
	v, blk := d.vm, cb.blk
	lo := int64(cb.ptr - blk.base)
	hi := lo + int64(cb.bytes())
	if hi == blk.used {
		hi = blk.size // to the buffer's end: its last chunk's unused rest goes too
	}
	p := planDecommit(lo, hi, v.gran)
	for _, e := range p.edges {
		if blk.mapped[e[0]/v.gran] {
			d.fail(d.g.memsetZero(blk.base+uintptr(e[0]), int(e[1]-e[0])))
		}
	}
	synced := false
	for c := p.whole[0]; c < p.whole[1]; c++ {
		if !blk.mapped[c] {
			continue
		}
		if !synced {
			d.fail(d.g.sync()) // the queued work that uses these chunks
			synced = true
		}
		d.fail(v.drv.unmapChunk(blk.base+uintptr(int64(c)*v.gran), blk.handles[c]))
		blk.mapped[c], blk.handles[c] = false, 0
		v.committed -= v.gran
		d.live -= v.gran
	}
}

// Commit implements kernels.Decommitter: the chunks of b's buffer that b
// intersects and that Decommit released are created, mapped and zeroed
// again (whole chunks: a chunk was released only when a Decommit covered
// all of it, so all of it reads as zeros). Resident memory is untouched;
// small buffers and a GPU without VMM have nothing to do. The error is an
// *kernels.OutOfMemoryError when the device has not the memory.
func (d *Device) Commit(b kernels.Buffer) error {
	cb := d.buffer("Commit", "b", b)
	if cb.blk == nil {
		return nil
	}
	d.mustLive("Commit", cb)
	lo := int64(cb.ptr - cb.blk.base)
	return d.commitRange(cb.blk, lo, lo+int64(cb.bytes()))
}

func (d *Device) mustLive(op string, b *Buffer) {
	if !b.blk.live {
		panic(fmt.Sprintf("cuda: %s of a freed buffer", op))
	}
}
