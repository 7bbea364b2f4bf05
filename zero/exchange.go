package zero

import (
	"fmt"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
)

// DefaultStageElems is the staging memory of an Exchange, in elements
// over all ranks (16 MiB of F32).
const DefaultStageElems = 1 << 22

// Exchange runs the collectives of a Layout over a Comm: it gathers a
// unit from its owners' pieces and reduce-scatters a unit's sum into
// them. Units larger than the staging memory go in chunks (chunk k of
// every rank's piece in one collective), so an Exchange never holds more
// than its staging buffers beside the flat buffers it works on.
type Exchange struct {
	comm  dist.Comm
	dev   kernels.Device
	lay   Layout
	chunk int                                 // elements of each rank's piece per collective
	stage map[kernels.DType][2]kernels.Buffer // per dtype: [chunk] and [Size·chunk]
}

// NewExchange prepares the collectives of lay over comm; stageElems is
// the staging memory in elements over all ranks (0: DefaultStageElems).
func NewExchange(dev kernels.Device, comm dist.Comm, lay Layout, stageElems int) (*Exchange, error) {
	if comm.Size() != lay.Size || comm.Rank() != lay.Rank {
		return nil, fmt.Errorf("zero: layout for rank %d of %d, communicator rank %d of %d", lay.Rank, lay.Size, comm.Rank(), comm.Size())
	}
	if stageElems <= 0 {
		stageElems = DefaultStageElems
	}
	chunk := max(Align, stageElems/lay.Size/Align*Align)
	return &Exchange{comm: comm, dev: dev, lay: lay, chunk: chunk, stage: map[kernels.DType][2]kernels.Buffer{}}, nil
}

// Layout is the layout the Exchange works on.
func (x *Exchange) Layout() Layout { return x.lay }

// Free releases the staging memory.
func (x *Exchange) Free() {
	for dt, b := range x.stage {
		x.dev.Free(b[0])
		x.dev.Free(b[1])
		delete(x.stage, dt)
	}
}

// buffers returns the staging buffers for dt, allocating them once.
func (x *Exchange) buffers(dt kernels.DType) (in, out kernels.Buffer, err error) {
	if b, ok := x.stage[dt]; ok {
		return b[0], b[1], nil
	}
	n := min(x.chunk, x.maxShard())
	if in, err = x.dev.Alloc(dt, n); err != nil {
		return nil, nil, fmt.Errorf("zero: staging memory: %w", err)
	}
	if out, err = x.dev.Alloc(dt, n*x.lay.Size); err != nil {
		x.dev.Free(in)
		return nil, nil, fmt.Errorf("zero: staging memory: %w", err)
	}
	x.stage[dt] = [2]kernels.Buffer{in, out}
	return in, out, nil
}

func (x *Exchange) maxShard() int {
	m := Align
	for _, u := range x.lay.Units {
		m = max(m, u.Plan.Shard)
	}
	return m
}

// chunk is one collective's share of a unit: elements [c0, c0+c) of
// every rank's piece, with the staging buffers of the unit's dtype.
type chunk struct {
	c0, c   int
	in, out kernels.Buffer // staging: c elements, and Size·c
	buf     kernels.Buffer
	un      Unit
}

// valid is the number of the chunk's elements of rank q's piece that lie
// inside the unit (the rest is padding).
func (k chunk) valid(q int) int { return max(0, min(k.c, k.un.N-(q*k.un.Plan.Shard+k.c0))) }

// piece is the first v elements of the chunk of rank q's piece, in buf.
func (k chunk) piece(q, v int) kernels.Buffer {
	return k.buf.Slice(k.un.Off+q*k.un.Plan.Shard+k.c0, v)
}

// chunks checks buf against the layout and calls f for each chunk of
// unit u; op names the collective in errors.
func (x *Exchange) chunks(op string, buf kernels.Buffer, u int, f func(k chunk) error) error {
	if buf.Len() != x.lay.N {
		return fmt.Errorf("zero: %s of a buffer of %d elements, layout of %d", op, buf.Len(), x.lay.N)
	}
	in, out, err := x.buffers(buf.DType())
	if err != nil {
		return err
	}
	un := x.lay.Units[u]
	for c0 := 0; c0 < un.Plan.Shard; c0 += x.chunk {
		c := min(x.chunk, un.Plan.Shard-c0)
		k := chunk{c0: c0, c: c, in: in.Slice(0, c), out: out.Slice(0, c*x.lay.Size), buf: buf, un: un}
		if err := f(k); err != nil {
			return fmt.Errorf("zero: %s of unit %d: %w", op, u, err)
		}
	}
	return nil
}

// Gather fills unit u of buf on every rank with the pieces their owners
// hold (all-gather). It commits the unit first (Commit): a released unit
// becomes resident again.
func (x *Exchange) Gather(buf kernels.Buffer, u int) error {
	r, d := x.lay.Rank, x.dev
	if err := x.Commit(buf, u); err != nil {
		return err
	}
	return x.chunks("all-gather", buf, u, func(k chunk) error {
		src := k.in
		if v := k.valid(r); v == k.c {
			src = k.piece(r, v) // whole: sent from where it lies
		} else {
			d.Zero(src)
			if v > 0 {
				d.Copy(src.Slice(0, v), k.piece(r, v))
			}
		}
		if err := x.comm.AllGather(k.out, src); err != nil {
			return err
		}
		for q := range x.lay.Size {
			if v := k.valid(q); q != r && v > 0 {
				d.Copy(k.piece(q, v), k.out.Slice(q*k.c, v))
			}
		}
		return nil
	})
}

// ReduceScatter sums unit u of buf over the ranks into this rank's piece
// (in place). The rest of the unit keeps this rank's own values; callers
// zero or Release it. The unit must be resident: whoever wrote the values
// it sums committed it (Commit) after the last Release.
func (x *Exchange) ReduceScatter(buf kernels.Buffer, u int) error {
	r, d := x.lay.Rank, x.dev
	return x.chunks("reduce-scatter", buf, u, func(k chunk) error {
		for q := range x.lay.Size {
			dst := k.out.Slice(q*k.c, k.c)
			v := k.valid(q)
			if v < k.c {
				d.Zero(dst)
			}
			if v > 0 {
				d.Copy(dst.Slice(0, v), k.piece(q, v))
			}
		}
		if err := x.comm.ReduceScatterSum(k.in, k.out); err != nil {
			return err
		}
		if v := k.valid(r); v > 0 {
			d.Copy(k.piece(r, v), k.in.Slice(0, v))
		}
		return nil
	})
}

// Release zeroes unit u of buf outside this rank's piece and, on a device
// that can (kernels.Decommitter), returns that memory to the system until
// the next Gather or Commit, which must come before anything reads or
// writes the unit again.
func (x *Exchange) Release(buf kernels.Buffer, u int) {
	un, p := x.lay.Units[u], x.lay.Piece(u, x.lay.Rank)
	if p.Len() == 0 {
		p = Range{un.Off, un.Off}
	}
	for _, r := range []Range{{un.Off, p.Lo}, {p.Hi, un.Off + un.N}} {
		if r.Len() > 0 {
			Decommit(x.dev, buf.Slice(r.Lo, r.Len()))
		}
	}
}

// Commit makes unit u of buf resident again after a Release (see
// kernels.Decommitter): the released part reads as zeros, this rank's
// piece keeps its values. The error names the unit.
func (x *Exchange) Commit(buf kernels.Buffer, u int) error {
	un := x.lay.Units[u]
	if buf.Len() != x.lay.N {
		return fmt.Errorf("zero: commit of a buffer of %d elements, layout of %d", buf.Len(), x.lay.N)
	}
	if err := Commit(x.dev, buf.Slice(un.Off, un.N)); err != nil {
		return fmt.Errorf("zero: commit of unit %d (elements %d to %d): %w", u, un.Off, un.Off+un.N, err)
	}
	return nil
}

// Commit makes b resident again after a Decommit when dev can decommit
// (kernels.Decommitter); otherwise b never left and there is nothing to
// do.
func Commit(dev kernels.Device, b kernels.Buffer) error {
	if dc, ok := dev.(kernels.Decommitter); ok {
		return dc.Commit(b)
	}
	return nil
}

// Decommit zeroes b and returns its memory to the system when dev can
// (kernels.Decommitter); otherwise it only zeroes b. Commit b before it
// is used again.
func Decommit(dev kernels.Device, b kernels.Buffer) {
	if dc, ok := dev.(kernels.Decommitter); ok {
		dc.Decommit(b)
		return
	}
	dev.Zero(b)
}
