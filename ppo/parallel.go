package ppo

import (
	"fmt"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
)

// Data parallelism in step 3 (DeepSpeed-Chat's engines over several
// ranks): each rank generates the experience of its own generation
// batches, and a PPO iteration trains on one micro-batch of every
// *stream*. A stream is the experience of every S-th generation batch of
// a round (S = ranks × gradient-accumulation steps); rank r keeps
// streams r, r+ranks, ... and computes their micro-batches one after the
// other, accumulating gradients. The optimizers then sum the gradients
// over the ranks and divide by n, the streams that had a micro-batch at
// this iteration; advantages are whitened over all of them; score
// scaling folds the round's scores in generation-batch order. So N ranks
// with A accumulation steps compute what one process with N·A steps
// computes, up to the order of floating-point sums — the same global
// batch and seed give the same weights.

// group is the ranks a Trainer averages over: Comm, or this process
// alone.
type group struct {
	comm dist.Comm
	dev  kernels.Device
}

func (g group) size() int {
	if g.comm == nil {
		return 1
	}
	return g.comm.Size()
}

func (g group) rank() int {
	if g.comm == nil {
		return 0
	}
	return g.comm.Rank()
}

// gather makes every rank's local values known to every rank: rank r
// passes values at its own indices and zeros elsewhere (len(v) is the
// same on every rank), and v comes back with every rank's values. Each
// float64 travels as three float32 parts (24 bits each) that the
// all-reduce adds to zeros only, so values arrive exactly. On one rank v
// is returned as it is.
func (g group) gather(v []float64) error {
	if g.size() == 1 || len(v) == 0 {
		return nil
	}
	parts := make([]float32, 3*len(v))
	for i, x := range v {
		hi := float32(x)
		mid := float32(x - float64(hi))
		parts[3*i], parts[3*i+1], parts[3*i+2] = hi, mid, float32(x-float64(hi)-float64(mid))
	}
	buf, err := g.dev.Alloc(kernels.F32, len(parts))
	if err != nil {
		return err
	}
	defer g.dev.Free(buf)
	g.dev.WriteF32(buf, parts)
	if err := g.comm.AllReduceSum(buf); err != nil {
		return fmt.Errorf("ppo: exchange statistics over ranks: %w", err)
	}
	g.dev.ReadF32(parts, buf)
	for i := range v {
		v[i] = float64(parts[3*i]) + float64(parts[3*i+1]) + float64(parts[3*i+2])
	}
	return nil
}

// sum adds each rank's v element-wise (rank order, in float64: the same
// result on every rank); v is overwritten with the sums.
func (g group) sum(v []float64) error {
	if g.size() == 1 {
		return nil
	}
	n, r := len(v), g.rank()
	all := make([]float64, n*g.size())
	copy(all[r*n:], v)
	if err := g.gather(all); err != nil {
		return err
	}
	clear(v)
	for q := range g.size() {
		for i := range v {
			v[i] += all[q*n+i]
		}
	}
	return nil
}
