// Package sft is step 1 of the pipeline: supervised fine-tuning of a causal
// LM on prompt+chosen texts (REFERENCE.md §3), as a train.Stage.
package sft

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/train"
)

// Model is what a Stage uses of the causal LM it trains: training and
// evaluation passes of its mean next-token loss. *model.Model implements
// it.
type Model interface {
	ModelConfig() *model.Config
	ReuseActsIn(slot **model.Acts, s model.ActsShape) (*model.Acts, error)
	Forward(a *model.Acts, in model.Batch) error
	MeanLoss(a *model.Acts) (float32, int, error)
	MeanLossGrad(a *model.Acts) model.Grad
	Backward(a *model.Acts, g model.Grad) error
}

var _ Model = (*model.Model)(nil)

// Stage trains a model on SFT examples with the next-token loss.
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
	MaxSeqLen    int
	PAD          int32
	ResponseOnly bool // --loss-on response
	EvalBatch    int  // --per-device-eval-batch-size
	Dropout      bool // apply the config's dropout while training
	Checkpoint   bool // gradient checkpointing
}

// New returns the stage for m on the given example sets.
func New(m Model, trainSet, evalSet *data.Set, o Options) (*Stage, error) {
	if c := m.ModelConfig(); o.MaxSeqLen > c.MaxPositions {
		return nil, fmt.Errorf("--max-seq-len %d exceeds the model's max_position_embeddings %d", o.MaxSeqLen, c.MaxPositions)
	}
	if o.EvalBatch <= 0 {
		return nil, fmt.Errorf("--per-device-eval-batch-size must be > 0, got %d", o.EvalBatch)
	}
	return &Stage{m: m, trainSet: trainSet, evalSet: evalSet, opts: o,
		col: data.Collator{T: o.MaxSeqLen, PAD: o.PAD, ResponseOnly: o.ResponseOnly}}, nil
}

// Acts are the activation buffers the stage keeps when its micro-batches
// have up to batch examples: one set for training and one for evaluation
// (batches of up to EvalBatch), both [rows, MaxSeqLen]; evaluation keeps
// one layer's buffers for every layer (Checkpoint: it has no backward
// pass). The stage allocates exactly these (a memory planner reads them).
func (o Options) Acts(batch int) (train, eval model.ActsShape) {
	return model.ActsShape{B: batch, T: o.MaxSeqLen, Opts: model.ActsOptions{Train: true, Dropout: o.Dropout, Checkpoint: o.Checkpoint}},
		model.ActsShape{B: o.EvalBatch, T: o.MaxSeqLen, Opts: model.ActsOptions{Checkpoint: true}}
}

func pick(s *data.Set, idx []int) []data.Example {
	out := make([]data.Example, len(idx))
	for i, j := range idx {
		out[i] = s.Examples[j]
	}
	return out
}

// batch collates examples into a model batch with shifted targets.
func (s *Stage) batch(exs []data.Example, seed uint64) (model.Batch, int, error) {
	b, err := s.col.SFT(exs)
	if err != nil {
		return model.Batch{}, 0, err
	}
	tokens := 0
	for _, m := range b.Mask {
		tokens += int(m)
	}
	return model.Batch{IDs: b.IDs, Mask: b.Mask, Targets: model.ShiftLabels(b.Labels, b.B, b.T), Seed: seed}, tokens, nil
}

// TrainBatch implements train.Stage.
func (s *Stage) TrainBatch(idx []int, seed uint64) (train.BatchStats, error) {
	mb, tokens, err := s.batch(pick(s.trainSet, idx), seed)
	if err != nil {
		return train.BatchStats{}, err
	}
	shape, _ := s.opts.Acts(len(idx))
	a, err := s.m.ReuseActsIn(&s.acts, shape)
	if err != nil {
		return train.BatchStats{}, err
	}
	if err := s.m.Forward(a, mb); err != nil {
		return train.BatchStats{}, err
	}
	loss, _, err := s.m.MeanLoss(a)
	if err != nil {
		return train.BatchStats{}, err
	}
	if err := s.m.Backward(a, s.m.MeanLossGrad(a)); err != nil {
		return train.BatchStats{}, err
	}
	return train.BatchStats{Loss: float64(loss), Tokens: tokens}, nil
}

// Evaluate implements train.Stage: the token-weighted mean loss over the
// evaluation set and its perplexity, in batches of EvalBatch examples.
func (s *Stage) Evaluate() (*train.Eval, error) {
	if s.evalSet == nil || len(s.evalSet.Examples) == 0 {
		return &train.Eval{}, nil
	}
	exs := s.evalSet.Examples
	return &train.Eval{
		Batches: (len(exs) + s.opts.EvalBatch - 1) / s.opts.EvalBatch,
		Names:   []string{"loss_sum", "tokens"},
		Batch: func(b int) ([]float64, error) {
			lo := b * s.opts.EvalBatch
			chunk := exs[lo:min(lo+s.opts.EvalBatch, len(exs))]
			mb, _, err := s.batch(chunk, 0)
			if err != nil {
				return nil, err
			}
			_, shape := s.opts.Acts(0)
			shape.B = len(chunk)
			a, err := s.m.ReuseActsIn(&s.evalActs, shape)
			if err != nil {
				return nil, err
			}
			if err := s.m.Forward(a, mb); err != nil {
				return nil, err
			}
			loss, n, err := s.m.MeanLoss(a)
			if err != nil {
				return nil, err
			}
			return []float64{float64(loss) * float64(n), float64(n)}, nil
		},
		Metrics: evalMetrics,
	}, nil
}

// evalMetrics is the mean loss per target token of the evaluation and its
// perplexity, from the summed loss and token count.
func evalMetrics(sum []float64) (map[string]float64, error) {
	if sum[1] == 0 {
		return nil, fmt.Errorf("the evaluation set has no target tokens")
	}
	l := sum[0] / sum[1]
	return map[string]float64{"eval_loss": l, "perplexity": math.Exp(l)}, nil
}
