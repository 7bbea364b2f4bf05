// Package dist is gochat's communication contract for data-parallel
// training: a group of ranks that reduce, scatter and gather device
// buffers. Implementations are real engines — this process alone (Single),
// MPI for processes and nodes, NCCL for GPUs — never a home-made network
// layer. Library code sees only Comm; the CLI constructs an implementation.
package dist

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// Comm is a group of Size ranks; this process is rank Rank. Every
// collective must be called by all ranks in the same order with buffers of
// the same length and DType.
type Comm interface {
	Rank() int
	Size() int
	// AllReduceSum replaces buf on every rank with the element-wise sum over
	// ranks.
	AllReduceSum(buf kernels.Buffer) error
	// ReduceScatterSum sums in (len = Size·len(out)) over ranks and leaves
	// rank r's out with elements [r·n, (r+1)·n) of the sum.
	ReduceScatterSum(out, in kernels.Buffer) error
	// AllGather concatenates every rank's in (len n) into out (len Size·n),
	// rank order.
	AllGather(out, in kernels.Buffer) error
	// Broadcast copies root's buf to every rank.
	Broadcast(buf kernels.Buffer, root int) error
	// Barrier returns when every rank has reached it.
	Barrier() error
}

// Single is the group of one rank: every collective is a copy or nothing.
type Single struct{ Dev kernels.Device }

var _ Comm = Single{}

// Rank implements Comm.
func (Single) Rank() int { return 0 }

// Size implements Comm.
func (Single) Size() int { return 1 }

// AllReduceSum implements Comm: the sum over one rank is the buffer.
func (Single) AllReduceSum(kernels.Buffer) error { return nil }

// ReduceScatterSum implements Comm.
func (s Single) ReduceScatterSum(out, in kernels.Buffer) error {
	if out.Len() != in.Len() {
		return fmt.Errorf("dist: reduce-scatter of %d elements into %d on 1 rank", in.Len(), out.Len())
	}
	s.Dev.Copy(out, in)
	return nil
}

// AllGather implements Comm.
func (s Single) AllGather(out, in kernels.Buffer) error {
	if out.Len() != in.Len() {
		return fmt.Errorf("dist: all-gather of %d elements into %d on 1 rank", in.Len(), out.Len())
	}
	s.Dev.Copy(out, in)
	return nil
}

// Broadcast implements Comm.
func (Single) Broadcast(_ kernels.Buffer, root int) error {
	if root != 0 {
		return fmt.Errorf("dist: broadcast from rank %d in a group of 1", root)
	}
	return nil
}

// Barrier implements Comm.
func (Single) Barrier() error { return nil }

// ShareFloat64s makes every rank's float64 values known to every rank:
// each rank passes v (the same length everywhere) with its own values at
// its own indices and zeros elsewhere, and v comes back holding every
// rank's values. Each value travels as three float32 parts (24 bits
// each) that the all-reduce only adds to zeros, so it arrives exactly
// (for zero and magnitudes between about 1e-23 and 3e38, where all three
// parts are normal floats);
// summing the shared values in index order then gives the same float64 on
// every rank. On one rank v is left as it is.
func ShareFloat64s(c Comm, dev kernels.Device, v []float64) error {
	if c == nil || c.Size() == 1 || len(v) == 0 {
		return nil
	}
	parts := make([]float32, 3*len(v))
	for i, x := range v {
		hi := float32(x)
		mid := float32(x - float64(hi))
		parts[3*i], parts[3*i+1], parts[3*i+2] = hi, mid, float32(x-float64(hi)-float64(mid))
	}
	buf, err := dev.Alloc(kernels.F32, len(parts))
	if err != nil {
		return err
	}
	defer dev.Free(buf)
	dev.WriteF32(buf, parts)
	if err := c.AllReduceSum(buf); err != nil {
		return err
	}
	dev.ReadF32(parts, buf)
	for i := range v {
		v[i] = float64(parts[3*i]) + float64(parts[3*i+1]) + float64(parts[3*i+2])
	}
	return nil
}
