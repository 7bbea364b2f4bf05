package reward

import (
	"fmt"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/train"
)

// Model is what a Stage uses of the reward model it trains: training and
// evaluation passes of its value head. *model.Model implements it.
type Model interface {
	ModelConfig() *model.Config
	HasValueHead() bool
	ReuseActsIn(slot **model.Acts, s model.ActsShape) (*model.Acts, error)
	Forward(a *model.Acts, in model.Batch) error
	Values(a *model.Acts) ([]float32, error)
	Backward(a *model.Acts, g model.Grad) error
}

var _ Model = (*model.Model)(nil)

// Stage trains a reward model (a model with a value head) on pairs.
type Stage struct {
	m        Model
	trainSet *data.Set
	evalSet  *data.Set
	col      data.Collator
	opts     Options
	// acts and evalActs are the one set of activation buffers of each kind,
	// sized for the largest batch so far (model.ReuseActs): a short last
	// batch uses a prefix of them instead of a set of its own.
	acts, evalActs *model.Acts
}

// Options configure the stage.
type Options struct {
	MaxSeqLen  int
	PAD        int32
	EvalBatch  int
	Dropout    bool
	Checkpoint bool
}

// New returns the stage for m, which must have a value head.
func New(m Model, trainSet, evalSet *data.Set, o Options) (*Stage, error) {
	if !m.HasValueHead() {
		return nil, fmt.Errorf("reward: the model has no value head")
	}
	if c := m.ModelConfig(); o.MaxSeqLen > c.MaxPositions {
		return nil, fmt.Errorf("--max-seq-len %d exceeds the model's max_position_embeddings %d", o.MaxSeqLen, c.MaxPositions)
	}
	if o.EvalBatch <= 0 {
		return nil, fmt.Errorf("--per-device-eval-batch-size must be > 0, got %d", o.EvalBatch)
	}
	return &Stage{m: m, trainSet: trainSet, evalSet: evalSet, col: data.Collator{T: o.MaxSeqLen, PAD: o.PAD}, opts: o}, nil
}

// Acts are the activation buffers the stage keeps when its micro-batches
// have up to batch pairs: one set for training and one for evaluation
// (batches of up to EvalBatch pairs), both [2·pairs, MaxSeqLen] (chosen and
// rejected run as one batch) without logits; evaluation keeps one layer's
// buffers for every layer (Checkpoint: it has no backward pass). The stage
// allocates exactly these (a memory planner reads them).
func (o Options) Acts(batch int) (train, eval model.ActsShape) {
	return model.ActsShape{B: 2 * batch, T: o.MaxSeqLen, Opts: model.ActsOptions{Train: true, Dropout: o.Dropout,
			Checkpoint: o.Checkpoint, NoLogits: true}},
		model.ActsShape{B: 2 * o.EvalBatch, T: o.MaxSeqLen, Opts: model.ActsOptions{Checkpoint: true, NoLogits: true}}
}

// pairs runs the model over chosen and rejected sequences as one batch of
// 2B rows and returns the pairwise loss.
func (s *Stage) pairs(exs []data.Example, a *model.Acts, seed uint64) (PairResult, int, error) {
	c, r, err := s.col.Pairs(exs)
	if err != nil {
		return PairResult{}, 0, err
	}
	ids := append(append([]int32{}, c.IDs...), r.IDs...)
	mask := append(append([]int32{}, c.Mask...), r.Mask...)
	if err := s.m.Forward(a, model.Batch{IDs: ids, Mask: mask, Seed: seed}); err != nil {
		return PairResult{}, 0, err
	}
	v, err := s.m.Values(a)
	if err != nil {
		return PairResult{}, 0, err
	}
	n := c.B * c.T
	res, err := PairwiseLoss(PairBatch{B: c.B, T: c.T, ChosenIDs: c.IDs, RejectedIDs: r.IDs,
		ChosenMask: c.Mask, RejectedMask: r.Mask, ChosenValues: v[:n], RejectValues: v[n:]})
	tokens := 0
	for _, m := range mask {
		tokens += int(m)
	}
	return res, tokens, err
}

// actsFor returns the training or evaluation activations for b pairs.
func (s *Stage) actsFor(b int, train bool) (*model.Acts, error) {
	tr, ev := s.opts.Acts(b)
	if train {
		return s.m.ReuseActsIn(&s.acts, tr)
	}
	ev.B = 2 * b
	return s.m.ReuseActsIn(&s.evalActs, ev)
}

// TrainBatch implements train.Stage.
func (s *Stage) TrainBatch(idx []int, seed uint64) (train.BatchStats, error) {
	exs := make([]data.Example, len(idx))
	for i, j := range idx {
		exs[i] = s.trainSet.Examples[j]
	}
	a, err := s.actsFor(len(exs), true)
	if err != nil {
		return train.BatchStats{}, err
	}
	res, tokens, err := s.pairs(exs, a, seed)
	if err != nil {
		return train.BatchStats{}, err
	}
	dv := append(append([]float32{}, res.DChosen...), res.DRejected...)
	if err := s.m.Backward(a, model.Grad{DValues: dv}); err != nil {
		return train.BatchStats{}, err
	}
	return train.BatchStats{Loss: res.Loss, Tokens: tokens, Extra: map[string]float64{
		"accuracy":    float64(res.Correct) / float64(len(exs)),
		"chosen_mean": mean(res.ChosenScore), "rejected_mean": mean(res.RejScore)}}, nil
}

// Evaluate implements train.Stage: accuracy (chosen score > rejected score),
// mean chosen and rejected scores, and the mean loss over the evaluation
// pairs, in batches of EvalBatch pairs.
func (s *Stage) Evaluate() (*train.Eval, error) {
	if s.evalSet == nil || len(s.evalSet.Examples) == 0 {
		return &train.Eval{}, nil
	}
	exs := s.evalSet.Examples
	return &train.Eval{
		Batches: (len(exs) + s.opts.EvalBatch - 1) / s.opts.EvalBatch,
		Names:   []string{"loss_sum", "correct", "chosen_sum", "rejected_sum", "pairs"},
		Batch: func(b int) ([]float64, error) {
			lo := b * s.opts.EvalBatch
			chunk := exs[lo:min(lo+s.opts.EvalBatch, len(exs))]
			a, err := s.actsFor(len(chunk), false)
			if err != nil {
				return nil, err
			}
			res, _, err := s.pairs(chunk, a, 0)
			if err != nil {
				return nil, err
			}
			v := []float64{res.Loss * float64(len(chunk)), float64(res.Correct), 0, 0, float64(len(chunk))}
			for i := range chunk {
				v[2] += float64(res.ChosenScore[i])
				v[3] += float64(res.RejScore[i])
			}
			return v, nil
		},
		Metrics: func(sum []float64) (map[string]float64, error) {
			n := sum[4]
			return map[string]float64{"eval_loss": sum[0] / n, "eval_accuracy": sum[1] / n,
				"chosen_mean": sum[2] / n, "rejected_mean": sum[3] / n}, nil
		},
	}, nil
}

func mean(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s / float64(len(x))
}
