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

// gather makes every rank's local values known to every rank
// (dist.ShareFloat64s: exact, each rank's values at its own indices).
func (g group) gather(v []float64) error {
	if err := dist.ShareFloat64s(g.comm, g.dev, v); err != nil {
		return fmt.Errorf("ppo: exchange statistics over ranks: %w", err)
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
