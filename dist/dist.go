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
