// Package disttest is a group of ranks inside one process, for tests of
// code written against dist.Comm: N goroutines, one per rank, each with
// its own Comm, exchanging buffers through shared memory. Reductions sum
// in rank order (in float64, BF16 results rounded once), so a result does
// not depend on timing. It is a test double, not a transport: real runs
// use dist/mpi.
package disttest

import (
	"fmt"
	"sync"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
)

// group is the state the ranks of one Run share.
type group struct {
	size int

	mu      sync.Mutex
	cond    *sync.Cond
	arrived int
	gen     uint64
	bufs    []kernels.Buffer // each rank's input of the current collective
	op      []string
	failed  error
}

// comm is one rank's view of a group; dev is the rank's own device,
// through which it reads the other ranks' buffers.
type comm struct {
	g    *group
	rank int
	dev  kernels.Device
}

var _ dist.Comm = (*comm)(nil)

// Run starts len(devs) ranks, rank r calling f with its Comm and devs[r]
// (a Device is not safe for concurrent use, so each rank has its own;
// they must share host memory, as CPU devices do), and waits for all of
// them. The first error a rank returns is Run's; a rank whose partner
// failed or returned early gets an error from its next collective instead
// of hanging.
func Run(devs []kernels.Device, f func(c dist.Comm, dev kernels.Device) error) error {
	size := len(devs)
	g := &group{size: size, bufs: make([]kernels.Buffer, size), op: make([]string, size)}
	g.cond = sync.NewCond(&g.mu)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f(&comm{g: g, rank: r, dev: devs[r]}, devs[r])
			if err == nil {
				err = g.leave(r)
			} else {
				g.fail(fmt.Errorf("rank %d: %w", r, err))
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// fail makes every waiting and later collective return err.
func (g *group) fail(err error) {
	g.mu.Lock()
	if g.failed == nil {
		g.failed = err
	}
	g.cond.Broadcast()
	g.mu.Unlock()
}

// leave marks a rank done; a rank still waiting in a collective fails.
func (g *group) leave(rank int) error {
	g.fail(fmt.Errorf("rank %d returned while others still communicate", rank))
	return nil
}

// barrier waits until every rank has arrived; it returns the group's
// failure if there is one.
func (g *group) barrier() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed != nil {
		return g.failed
	}
	gen := g.gen
	g.arrived++
	if g.arrived == g.size {
		g.arrived = 0
		g.gen++
		g.cond.Broadcast()
		return nil
	}
	for gen == g.gen && g.failed == nil {
		g.cond.Wait()
	}
	if gen == g.gen {
		return g.failed
	}
	return nil
}

// exchange publishes this rank's buffer, waits for every rank's, runs f
// (which reads the others' buffers and writes only this rank's output),
// and waits until every rank is done reading.
func (c *comm) exchange(op string, b kernels.Buffer, f func(bufs []kernels.Buffer) error) error {
	g := c.g
	g.mu.Lock()
	g.bufs[c.rank], g.op[c.rank] = b, op
	g.mu.Unlock()
	if err := g.barrier(); err != nil {
		return err
	}
	for r := range g.size {
		if g.op[r] != op || g.bufs[r].Len() != b.Len() || g.bufs[r].DType() != b.DType() {
			err := fmt.Errorf("disttest: rank %d calls %s on %d %v elements, rank %d %s on %d %v",
				c.rank, op, b.Len(), b.DType(), r, g.op[r], g.bufs[r].Len(), g.bufs[r].DType())
			g.fail(err)
			return err
		}
	}
	err := f(g.bufs)
	if err != nil {
		g.fail(err)
	}
	if berr := g.barrier(); err == nil {
		err = berr
	}
	return err
}

// sum reads bufs[r].Slice(off, n) of every rank and returns their sum in
// rank order (float64; I32 sums are exact below 2^24).
func (c *comm) sum(bufs []kernels.Buffer, off, n int) []float64 {
	acc := make([]float64, n)
	for _, b := range bufs {
		for i, v := range read(c.dev, b.Slice(off, n)) {
			acc[i] += float64(v)
		}
	}
	return acc
}

func narrow(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func (c *comm) Rank() int { return c.rank }
func (c *comm) Size() int { return c.g.size }

// AllReduceSum implements dist.Comm.
func (c *comm) AllReduceSum(buf kernels.Buffer) error {
	return c.reduce("all-reduce", buf, 0, buf)
}

// ReduceScatterSum implements dist.Comm.
func (c *comm) ReduceScatterSum(out, in kernels.Buffer) error {
	n := out.Len()
	if in.Len() != n*c.g.size {
		return fmt.Errorf("disttest: reduce-scatter of %d elements into %d on %d ranks", in.Len(), n, c.g.size)
	}
	return c.reduce("reduce-scatter", in, c.rank*n, out)
}

// reduce writes into out the sum over ranks of elements [off, off+out.Len())
// of their in. out is written only after every rank has read (exchange's
// second barrier), so it may be in.
func (c *comm) reduce(op string, in kernels.Buffer, off int, out kernels.Buffer) error {
	var res []float32
	err := c.exchange(op, in, func(bufs []kernels.Buffer) error {
		res = narrow(c.sum(bufs, off, out.Len()))
		return nil
	})
	if err != nil {
		return err
	}
	write(c.dev, out, res)
	return c.g.barrier()
}

// AllGather implements dist.Comm.
func (c *comm) AllGather(out, in kernels.Buffer) error {
	n := in.Len()
	if out.Len() != n*c.g.size {
		return fmt.Errorf("disttest: all-gather of %d elements into %d on %d ranks", n, out.Len(), c.g.size)
	}
	return c.exchange("all-gather", in, func(bufs []kernels.Buffer) error {
		for r, b := range bufs {
			c.dev.Copy(out.Slice(r*n, n), b)
		}
		return nil
	})
}

// Broadcast implements dist.Comm.
func (c *comm) Broadcast(buf kernels.Buffer, root int) error {
	if root < 0 || root >= c.g.size {
		return fmt.Errorf("disttest: broadcast from rank %d in a group of %d", root, c.g.size)
	}
	var res kernels.Buffer
	err := c.exchange("broadcast", buf, func(bufs []kernels.Buffer) error {
		if c.rank != root {
			tmp, err := c.dev.Alloc(buf.DType(), buf.Len())
			if err != nil {
				return err
			}
			c.dev.Copy(tmp, bufs[root])
			res = tmp
		}
		return nil
	})
	if err != nil {
		return err
	}
	if res != nil {
		c.dev.Copy(buf, res)
		c.dev.Free(res)
	}
	return c.g.barrier()
}

// Barrier implements dist.Comm.
func (c *comm) Barrier() error { return c.g.barrier() }
