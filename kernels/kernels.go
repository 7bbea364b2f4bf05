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
	// Alloc returns a zeroed buffer of n elements, or an error (an
	// *OutOfMemoryError when the memory is not there) instead of failing
	// later or taking the process down.
	Alloc(dt DType, n int) (Buffer, error)
	// Free releases a buffer Alloc returned (not a Slice of one); the
	// buffer and its views must not be used afterwards. nil is a no-op.
	Free(b Buffer)
	// MemStats reports the bytes of live buffers, their peak and the cap.
	MemStats() MemStats
	// WriteF32 copies src into dst (F32, or BF16 rounded to nearest even;
	// len(src) == dst.Len()).
	WriteF32(dst Buffer, src []float32)
	// ReadF32 copies src (F32, or BF16 widened) into dst (len(dst) ==
	// src.Len()).
	ReadF32(dst []float32, src Buffer)
	// WriteI32 copies src into dst (I32, len(src) == dst.Len()).
	WriteI32(dst Buffer, src []int32)
	// ReadI32 copies src (I32) into dst.
	ReadI32(dst []int32, src Buffer)
	// Zero sets every element of b to zero.
	Zero(b Buffer)
	// Copy copies src into dst of the same length: the same DType, or F32
	// into BF16 (rounded to nearest even) and BF16 into F32 (exact).
	Copy(dst, src Buffer)
	// Sync waits for queued work to finish and reports a deferred error.
	Sync() error
	Ops
}

// MemStats is a device's memory accounting, in bytes.
type MemStats struct {
	Live  int64 // buffers allocated and not freed
	Peak  int64 // the largest Live seen
	Limit int64 // the cap Alloc enforces; 0 for none
}

// OutOfMemoryError is Alloc's error when a buffer does not fit.
type OutOfMemoryError struct {
	Device string
	Want   int64 // bytes asked for
	Live   int64 // bytes live before the request
	Limit  int64 // the device's cap (0: the device itself refused)
	// A device with its own memory and a caching allocator (kernels/cuda)
	// also reports what it held in its cache when the request failed
	// (after emptying it and retrying) and the device's free and total
	// memory as its driver saw them; Total 0 means not known.
	Cached      int64
	DeviceFree  int64
	DeviceTotal int64
}

func (e *OutOfMemoryError) Error() string {
	var s string
	if e.Limit > 0 {
		s = fmt.Sprintf("%s: out of memory: a buffer of %s on top of %s live exceeds the limit of %s", e.Device, byteSize(e.Want), byteSize(e.Live), byteSize(e.Limit))
	} else {
		s = fmt.Sprintf("%s: out of memory: a buffer of %s on top of %s live", e.Device, byteSize(e.Want), byteSize(e.Live))
	}
	if e.DeviceTotal > 0 {
		s += fmt.Sprintf(" (%s cached; the device has %s free of %s)", byteSize(e.Cached), byteSize(e.DeviceFree), byteSize(e.DeviceTotal))
	}
	return s
}

// byteSize writes b bytes in the largest binary unit that keeps the value
// at least 1 (1536 -> "1.50 KiB"), so a size is readable at any scale (in
// GiB alone every buffer under 5 MiB read "0.00 GiB").
func byteSize(b int64) string {
	if b < 1024 && b > -1024 {
		return fmt.Sprintf("%d B", b)
	}
	v := float64(b) / 1024
	unit := "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB", "PiB"} {
		if v < 1024 && v > -1024 {
			break
		}
		v /= 1024
		unit = u
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

// Decommitter is an optional Device capability for memory that is used in
// turns (ZeRO-3 parameters gathered for one layer at a time, ZeRO-2
// gradients kept only in a rank's shard, a frozen model's weights brought
// to the device one layer at a time): Decommit zeroes b, a view of a live
// buffer, and returns the memory inside it to the system, as far as the
// device's unit of memory allows (kernels/cpu: the whole pages inside b;
// kernels/cuda: the whole chunks of the driver's allocation granularity,
// 2 MiB typically, of a buffer large enough to have them); the edges it
// cannot return are only zeroed. The buffer stays allocated, its views
// valid and its address unchanged.
//
// Commit makes b resident again before anything reads or writes it:
// memory of b that had been decommitted is committed and reads as zeros,
// memory that was resident keeps its values (committing resident memory
// does nothing). Its error is an *OutOfMemoryError when the device has
// not the memory (wrap it naming what was committed). A device with demand
// paging (kernels/cpu) commits a page on its first write and reads zeros
// before that, so its Commit does nothing; a GPU has no demand paging and
// faults on memory that is not committed, so every code path that
// decommits must Commit before the memory is used again, reads included.
// Decommit and Commit are ordered with the device's queued work as its
// ops are. Without the capability, callers zero the view and the memory
// stays committed.
type Decommitter interface {
	Decommit(b Buffer)
	Commit(b Buffer) error
}

// HostCopier is an optional Device capability for ZeRO-Offload: raw copies
// of a buffer's bytes between the device and host memory (the memory of a
// HostMemory device's buffers). The copies are queued in order with the
// device's other work, as an op is: CopyToHost's dst is complete, and
// CopyFromHost's src may be changed again, only once Sync returns. A
// device whose buffers are host memory (kernels/cpu) copies at once; a GPU
// (kernels/cuda) queues asynchronous copies on its stream, which overlap
// with host work when the host memory is page-locked. len(dst) or
// len(src) is the buffer's Len times its DType's Size; a copy moves bits
// (no conversion).
type HostCopier interface {
	CopyToHost(dst []byte, src Buffer)
	CopyFromHost(dst Buffer, src []byte)
}

// HostMemory is an optional Device capability of a device whose buffers
// live in the process's memory (kernels/cpu): Bytes is b's memory, for a
// HostCopier to copy into or out of. The slice aliases b.
type HostMemory interface {
	Bytes(b Buffer) []byte
}
