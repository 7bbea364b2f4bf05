package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// ZeRO-Offload's side of the backend: raw copies between device buffers
// and host memory (kernels.HostCopier), queued on the stream, and
// page-locked host memory for the host device's buffers (PinnedAllocator),
// which those copies read and write without a staging copy and while the
// host computes.

var _ kernels.HostCopier = (*Device)(nil)

// asyncCopier is a gpu that queues host copies on its stream without
// waiting for them (driverGPU); a gpu without it copies synchronously.
type asyncCopier interface {
	htodAsync(dst uintptr, src unsafe.Pointer, bytes int) error
	dtohAsync(dst unsafe.Pointer, src uintptr, bytes int) error
}

// pinnedHost is a gpu that allocates page-locked host memory.
type pinnedHost interface {
	hostAlloc(bytes int) (unsafe.Pointer, error)
	hostFree(p unsafe.Pointer) error
}

// CopyToHost implements kernels.HostCopier: the copy of src's bytes into
// dst is queued behind the work before it (cuMemcpyDtoHAsync); dst holds
// them once Sync returns. An error is deferred to Sync.
func (d *Device) CopyToHost(dst []byte, src kernels.Buffer) {
	b := d.buffer("CopyToHost", "src", src)
	if len(dst) != b.bytes() {
		panic(fmt.Sprintf("cuda: CopyToHost of %d bytes into %d", b.bytes(), len(dst)))
	}
	if len(dst) == 0 {
		return
	}
	if a, ok := d.g.(asyncCopier); ok {
		d.fail(a.dtohAsync(unsafe.Pointer(&dst[0]), b.ptr, len(dst)))
		return
	}
	d.fail(d.g.dtoh(unsafe.Pointer(&dst[0]), b.ptr, len(dst)))
}

// CopyFromHost implements kernels.HostCopier: the copy of src into dst is
// queued (cuMemcpyHtoDAsync); src must not change until Sync returns. An
// error is deferred to Sync.
func (d *Device) CopyFromHost(dst kernels.Buffer, src []byte) {
	b := d.buffer("CopyFromHost", "dst", dst)
	if len(src) != b.bytes() {
		panic(fmt.Sprintf("cuda: CopyFromHost of %d bytes into %d", len(src), b.bytes()))
	}
	if len(src) == 0 {
		return
	}
	if a, ok := d.g.(asyncCopier); ok {
		d.fail(a.htodAsync(b.ptr, unsafe.Pointer(&src[0]), len(src)))
		return
	}
	d.fail(d.g.htod(b.ptr, unsafe.Pointer(&src[0]), len(src)))
}

// PinnedAllocator hands out page-locked host memory (cuMemHostAlloc,
// portable to every context): the memory of ZeRO-Offload's host device
// (kernels/cpu.Options.Allocator), which the GPU's copies read and write
// by DMA while the host computes. It counts what it holds. It is not safe
// for concurrent use (neither is the Device).
type PinnedAllocator struct {
	d    *Device
	h    pinnedHost
	held int64
}

// PinnedAllocator returns the allocator of page-locked host memory for
// this GPU, or an error when the driver cannot allocate it.
func (d *Device) PinnedAllocator() (*PinnedAllocator, error) {
	h, ok := d.g.(pinnedHost)
	if !ok {
		return nil, errors.New("cuda: this GPU has no page-locked host memory")
	}
	if g, ok := h.(*driverGPU); ok && (g.l.drv.cuMemHostAlloc == 0 || g.l.drv.cuMemFreeHost == 0) {
		return nil, fmt.Errorf("cuda: %s exports no cuMemHostAlloc/cuMemFreeHost", g.l.drv.path)
	}
	return &PinnedAllocator{d: d, h: h}, nil
}

// Alloc returns bytes of page-locked host memory (not zeroed).
func (a *PinnedAllocator) Alloc(bytes int) ([]byte, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: page-locked allocation of %d bytes", bytes)
	}
	p, err := a.h.hostAlloc(bytes)
	if err != nil {
		return nil, fmt.Errorf("cuda: %d bytes of page-locked host memory (%d held): %w", bytes, a.held, err)
	}
	a.held += int64(bytes)
	return unsafe.Slice((*byte)(p), bytes), nil
}

// Free returns memory Alloc gave (the same slice); an error is deferred
// to the Device's Sync.
func (a *PinnedAllocator) Free(mem []byte) {
	if len(mem) == 0 {
		return
	}
	a.held -= int64(len(mem))
	a.d.fail(a.h.hostFree(unsafe.Pointer(&mem[0])))
}

// Held is the bytes of page-locked memory handed out and not freed.
func (a *PinnedAllocator) Held() int64 { return a.held }

// cuMemHostAlloc's flag: the memory is page-locked for every context.
const memHostAllocPortable = 0x01

func (g *driverGPU) hostAlloc(bytes int) (unsafe.Pointer, error) {
	if err := g.enter(); err != nil {
		return nil, err
	}
	defer g.leave()
	var p uintptr
	if err := cuErr("cuMemHostAlloc", call(g.l.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes), memHostAllocPortable)); err != nil {
		return nil, err
	}
	return unsafe.Add(unsafe.Pointer(nil), p), nil // C memory, not Go's
}

func (g *driverGPU) hostFree(p unsafe.Pointer) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return cuErr("cuMemFreeHost", call(g.l.drv.cuMemFreeHost, uintptr(p)))
}

// htodAsync queues the copy; src must stay as it is until the stream
// passes it (page-locked memory, or memory the caller keeps until Sync).
func (g *driverGPU) htodAsync(dst uintptr, src unsafe.Pointer, bytes int) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return cuErr("cuMemcpyHtoDAsync_v2", call(g.l.drv.cuMemcpyHtoDAsync, dst, uintptr(src), uintptr(bytes), g.stream))
}

// dtohAsync queues the copy; dst holds the bytes once the stream is
// synchronized.
func (g *driverGPU) dtohAsync(dst unsafe.Pointer, src uintptr, bytes int) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return cuErr("cuMemcpyDtoHAsync_v2", call(g.l.drv.cuMemcpyDtoHAsync, uintptr(dst), src, uintptr(bytes), g.stream))
}
