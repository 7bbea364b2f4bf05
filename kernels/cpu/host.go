package cpu

import (
	"fmt"
	"unsafe"

	"github.com/gochat-ai/gochat/kernels"
)

// Allocator supplies the memory of a Device's buffers in place of the Go
// heap: kernels/cuda's PinnedAllocator gives page-locked host memory, which
// a GPU copies to and from asynchronously (ZeRO-Offload's host device).
// Alloc returns bytes of memory that stay valid until Free is given the
// same slice; its contents need not be zero. The memory must hold no Go
// pointers (buffers hold numbers only).
type Allocator interface {
	Alloc(bytes int) ([]byte, error)
	Free(mem []byte)
}

var (
	_ kernels.HostCopier = (*Device)(nil)
	_ kernels.HostMemory = (*Device)(nil)
)

// allocFrom returns a zeroed buffer of n elements of dt in memory from
// d.alloc.
func (d *Device) allocFrom(dt kernels.DType, n int) (kernels.Buffer, error) {
	size := n * dt.Size()
	if size == 0 {
		return d.view(dt, nil, n), nil
	}
	mem, err := d.alloc.Alloc(size)
	if err != nil {
		return nil, fmt.Errorf("cpu: Alloc of %d bytes: %w", size, err)
	}
	if len(mem) < size {
		d.alloc.Free(mem)
		return nil, fmt.Errorf("cpu: the allocator returned %d bytes for %d", len(mem), size)
	}
	mem = mem[:size:size]
	clear(mem)
	return d.view(dt, mem, n), nil
}

// view is the buffer of n elements of dt over mem (nil when n is 0).
func (d *Device) view(dt kernels.DType, mem []byte, n int) kernels.Buffer {
	var p unsafe.Pointer
	if len(mem) > 0 {
		p = unsafe.Pointer(&mem[0])
	}
	switch dt {
	case kernels.F32:
		if p == nil {
			return F32{}
		}
		return F32(unsafe.Slice((*float32)(p), n))
	case kernels.BF16:
		if p == nil {
			return BF16{}
		}
		return BF16(unsafe.Slice((*uint16)(p), n))
	default:
		if p == nil {
			return I32{}
		}
		return I32(unsafe.Slice((*int32)(p), n))
	}
}

// Bytes implements kernels.HostMemory: the memory of b (a buffer or a view
// of one), aliased.
func (d *Device) Bytes(b kernels.Buffer) []byte {
	n := b.Len() * b.DType().Size()
	if n == 0 {
		return nil
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
		panic(fmt.Sprintf("cpu: Bytes of %T", b))
	}
	return unsafe.Slice((*byte)(p), n)
}

// CopyToHost implements kernels.HostCopier: the copy is done when it
// returns.
func (d *Device) CopyToHost(dst []byte, src kernels.Buffer) {
	s := d.Bytes(src)
	if len(dst) != len(s) {
		panic(fmt.Sprintf("cpu: CopyToHost of %d bytes into %d", len(s), len(dst)))
	}
	copy(dst, s)
}

// CopyFromHost implements kernels.HostCopier: the copy is done when it
// returns.
func (d *Device) CopyFromHost(dst kernels.Buffer, src []byte) {
	b := d.Bytes(dst)
	if len(b) != len(src) {
		panic(fmt.Sprintf("cpu: CopyFromHost of %d bytes into %d", len(src), len(b)))
	}
	copy(b, src)
}
