package cuda

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// Kernel arguments.

func ptr(b *Buffer) kernelArg {
	if b == nil {
		return kernelArg{kind: argPtr}
	}
	return kernelArg{kind: argPtr, bits: uint64(b.ptr), span: uint64(b.bytes())}
}

func rawPtr(p uintptr) kernelArg { return kernelArg{kind: argPtr, bits: uint64(p)} }

func i32(v int) kernelArg {
	if v < math.MinInt32 || v > math.MaxInt32 {
		panic(fmt.Sprintf("cuda: kernel argument %d does not fit an int", v))
	}
	return kernelArg{kind: argI32, bits: uint64(uint32(int32(v)))}
}

func f32(v float32) kernelArg { return kernelArg{kind: argF32, bits: uint64(math.Float32bits(v))} }
func i64(v int) kernelArg     { return kernelArg{kind: argI64, bits: uint64(int64(v))} }
func u64(v uint64) kernelArg  { return kernelArg{kind: argU64, bits: v} }

// isBF16 is the int flag kernels take for an F32-or-BF16 operand.
func isBF16(b *Buffer) kernelArg {
	if b != nil && b.dt == kernels.BF16 {
		return i32(1)
	}
	return i32(0)
}

// launch queues kernel k; an error is kept for Sync.
func (d *Device) launch(k kernel, grid, block dim3, args ...kernelArg) {
	if d.err != nil {
		return // the stream is in an error state; Sync reports the first one
	}
	d.fail(d.g.launch(k, grid, block, args))
}

// launchN launches an elementwise kernel over n items (grid-stride loops:
// the grid is capped).
func (d *Device) launchN(k kernel, n int, args ...kernelArg) {
	if n <= 0 {
		return
	}
	blocks := min((n+elemBlock-1)/elemBlock, maxGrid)
	d.launch(k, dim3{uint32(blocks), 1, 1}, dim3{elemBlock, 1, 1}, args...)
}

// launchRows launches a row kernel: one block of rowThreads per row.
func (d *Device) launchRows(k kernel, rows int, args ...kernelArg) {
	if rows <= 0 {
		return
	}
	d.launch(k, dim3{uint32(rows), 1, 1}, dim3{rowThreads, 1, 1}, args...)
}

// check validates the operands of one op call before it launches; every
// failure panics naming the op and the operand.
type check struct {
	d  *Device
	op string
}

func (c check) fail(format string, a ...any) {
	panic(fmt.Sprintf("cuda: %s: %s", c.op, fmt.Sprintf(format, a...)))
}

// buf requires b to be a buffer of this device of one of the dtypes want
// with at least need elements.
func (c check) buf(name string, b kernels.Buffer, need int, want ...kernels.DType) *Buffer {
	if b == nil {
		c.fail("%s is nil", name)
	}
	return c.opt(name, b, need, want...)
}

// opt is buf for an operand that may be nil.
func (c check) opt(name string, b kernels.Buffer, need int, want ...kernels.DType) *Buffer {
	if b == nil {
		return nil
	}
	cb, ok := b.(*Buffer)
	if !ok {
		c.fail("%s is a %T, not a CUDA buffer", name, b)
	}
	if cb.dev != c.d {
		c.fail("%s belongs to %s, not %s", name, cb.dev.name, c.d.name)
	}
	okType := false
	for _, w := range want {
		okType = okType || cb.dt == w
	}
	if !okType {
		c.fail("%s is %v, want %v", name, cb.dt, dtypeList(want))
	}
	if cb.n < need {
		c.fail("%s has %d elements, need %d", name, cb.n, need)
	}
	return cb
}

// dims requires every dimension to be >= 0.
func (c check) dims(names string, v ...int) {
	for _, x := range v {
		if x < 0 {
			c.fail("negative dimension in (%s) = %v", names, v)
		}
	}
}

func dtypeList(ds []kernels.DType) string {
	s := ""
	for i, d := range ds {
		if i > 0 {
			s += " or "
		}
		s += d.String()
	}
	return s
}

var (
	tF32   = []kernels.DType{kernels.F32}
	tI32   = []kernels.DType{kernels.I32}
	tF32BF = []kernels.DType{kernels.F32, kernels.BF16}
)

func (c check) f32(name string, b kernels.Buffer, need int) *Buffer {
	return c.buf(name, b, need, tF32...)
}
func (c check) optF32(name string, b kernels.Buffer, need int) *Buffer {
	return c.opt(name, b, need, tF32...)
}
func (c check) i32(name string, b kernels.Buffer, need int) *Buffer {
	return c.buf(name, b, need, tI32...)
}
func (c check) optI32(name string, b kernels.Buffer, need int) *Buffer {
	return c.opt(name, b, need, tI32...)
}
func (c check) w(name string, b kernels.Buffer, need int) *Buffer {
	return c.buf(name, b, need, tF32BF...)
}
func (c check) optW(name string, b kernels.Buffer, need int) *Buffer {
	return c.opt(name, b, need, tF32BF...)
}
