// Package zero is the data movement of ZeRO data parallelism (stages 0-3)
// over a dist.Comm: which rank owns which range of a flat parameter,
// gradient or optimizer buffer (Layout: the buffer cut into units, each
// split evenly over the ranks), and the collectives that gather a unit
// from its owners or reduce-scatter its sum into them (Exchange). Stage 1
// partitions the optimizer state, stage 2 also the gradients
// (reduce-scattered instead of all-reduced), stage 3 also the parameters
// (gathered for the forward and backward passes, and once per generation
// phase by the hybrid engine). train.Optimizer applies the stages; the
// model's passes drive stages 2 and 3 through model.ParamHook.
package zero

import "fmt"

// Stage is a ZeRO stage.
type Stage int

// Validate checks the stage number.
func (s Stage) Validate() error {
	if s < 0 || s > 3 {
		return fmt.Errorf("ZeRO stage %d: want 0, 1, 2 or 3", int(s))
	}
	return nil
}

// PartitionsOptimizer, PartitionsGrads and PartitionsParams say what the
// stage shards across ranks.
func (s Stage) PartitionsOptimizer() bool { return s >= 1 }

// PartitionsGrads reports whether gradients are reduce-scattered.
func (s Stage) PartitionsGrads() bool { return s >= 2 }

// PartitionsParams reports whether parameters are sharded between steps.
func (s Stage) PartitionsParams() bool { return s >= 3 }

// Plan splits a flat buffer of N elements over Size ranks into equal shards
// of Shard elements (the last padded), as reduce-scatter and all-gather
// need equal pieces. Padded is Size·Shard ≥ N; the padding is zero.
type Plan struct {
	N, Size, Shard, Padded int
}

// NewPlan plans n elements over size ranks, each shard a multiple of align
// elements (e.g. 16 floats = one 64-byte cache line) so shards start aligned.
func NewPlan(n, size, align int) (Plan, error) {
	if n < 0 || size < 1 || align < 1 {
		return Plan{}, fmt.Errorf("zero: plan of %d elements over %d ranks (align %d)", n, size, align)
	}
	shard := (n + size - 1) / size
	shard = (shard + align - 1) / align * align
	return Plan{N: n, Size: size, Shard: shard, Padded: shard * size}, nil
}

// Range returns the elements [lo, hi) of the unpadded buffer that rank owns
// (possibly empty for trailing ranks).
func (p Plan) Range(rank int) (lo, hi int) {
	lo = min(rank*p.Shard, p.N)
	hi = min(lo+p.Shard, p.N)
	return lo, hi
}
