package kernels

import "fmt"

// DType is the element type of a Buffer.
type DType uint8

// Element types.
const (
	F32 DType = iota + 1
	F16
	BF16
	I32
)

// Size is the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Buffer is a run of Len elements of one DType in a device's memory.
// Slice returns a view sharing the memory; views of views are allowed.
type Buffer interface {
	DType() DType
	Len() int
	// Slice returns the view of elements [off, off+n).
	Slice(off, n int) Buffer
}

// Device is a compute backend: memory plus the operations of Ops.
// A Device is not safe for concurrent use by several goroutines; it may use
// many goroutines (or a GPU stream) internally.
type Device interface {
	// Name identifies the backend and its variant, e.g. "cpu/avx512 (2 threads)".
	Name() string
	// Alloc returns a zeroed buffer of n elements.
	Alloc(dt DType, n int) Buffer
	// WriteF32 copies src into dst (F32, len(src) == dst.Len()).
	WriteF32(dst Buffer, src []float32)
	// ReadF32 copies src (F32) into dst (len(dst) == src.Len()).
	ReadF32(dst []float32, src Buffer)
	// WriteI32 copies src into dst (I32, len(src) == dst.Len()).
	WriteI32(dst Buffer, src []int32)
	// ReadI32 copies src (I32) into dst.
	ReadI32(dst []int32, src Buffer)
	// Zero sets every element of b to zero.
	Zero(b Buffer)
	// Copy copies src into dst; both have the same DType and length.
	Copy(dst, src Buffer)
	// Sync waits for queued work to finish and reports a deferred error.
	Sync() error
	Ops
}
