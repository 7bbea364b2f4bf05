// Package train is gochat's one training loop, shared by every stage: epochs
// of shuffled micro-batches, gradient accumulation, the learning-rate
// schedule, global-norm clipping, AdamW, evaluation every N steps and at the
// end, metrics, progress, and checkpoints with exact resume. A stage plugs in
// what one micro-batch does (Stage); the loop owns the order of everything
// else.
//
// Determinism: the order of the training examples in epoch e is a
// permutation seeded by (seed, e), and micro-batch k of the run gets the
// dropout seed (seed, k), so a run resumed from a checkpoint replays exactly
// the computation an uninterrupted run would have done.
package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/optim"
)

// BatchStats is what a stage reports for one micro-batch.
type BatchStats struct {
	Loss   float64            // the micro-batch's loss (mean over its examples/tokens)
	Tokens int                // tokens processed (for throughput)
	Extra  map[string]float64 // stage metrics averaged over the step (e.g. "accuracy")
}

// Stage is one training objective.
type Stage interface {
	// TrainBatch runs forward and backward on the training examples idx,
	// accumulating into the gradients the gradient of its mean loss. seed
	// keys dropout.
	TrainBatch(idx []int, seed uint64) (BatchStats, error)
	// Evaluate computes evaluation metrics (e.g. "eval_loss").
	Evaluate() (map[string]float64, error)
}

// Trainable describes the state the loop optimises and checkpoints.
type Trainable struct {
	// Groups are the optimizer's parameter groups.
	Groups []optim.Group
	// Grads are the gradient buffers: zeroed before each step, clipped by
	// their global norm.
	Grads []kernels.Buffer
	// State are the buffers a checkpoint saves and restores, by name
	// (the parameters: model, adapters).
	State map[string]kernels.Buffer
}

// Config configures the loop.
type Config struct {
	TrainSize   int // number of training examples
	MicroBatch  int // examples per micro-batch (--per-device-train-batch-size)
	GradAccum   int // micro-batches per optimizer step
	Epochs      int
	MaxSteps    int // optimizer steps of the run, overriding Epochs (0: Epochs decide)
	Schedule    string
	Warmup      int
	ClipNorm    float64 // global-norm clipping (0: off)
	AdamW       optim.AdamWConfig
	EvalEvery   int // evaluate every N optimizer steps (0: only at the end)
	SaveEvery   int // checkpoint every N optimizer steps (0: at the end of each epoch)
	LogEvery    int // metrics every N steps (default 1)
	Seed        uint64
	Dir         string // output directory: metrics.jsonl and checkpoint/
	Fingerprint string // identifies the run; a checkpoint of another run is refused
	Resume      bool
	Log         zerolog.Logger
	Progress    io.Writer // a terminal for the progress bar, or nil for log lines
	// Events, when set, also receives every metrics record (TensorBoard).
	Events interface {
		Scalars(step int, values map[string]float64) error
	}
}

// StepsPerEpoch is the number of optimizer steps in one epoch.
func (c *Config) StepsPerEpoch() int {
	batches := (c.TrainSize + c.MicroBatch - 1) / c.MicroBatch
	return (batches + c.GradAccum - 1) / c.GradAccum
}

// TotalSteps is the number of optimizer steps of the run (the schedule's
// length). MaxSteps, when set, overrides the epochs (as in transformers'
// Trainer): the data is cycled as many times as needed.
func (c *Config) TotalSteps() int {
	if c.MaxSteps > 0 {
		return c.MaxSteps
	}
	return c.Epochs * c.StepsPerEpoch()
}

func (c *Config) validate() error {
	switch {
	case c.TrainSize <= 0:
		return errors.New("the training split is empty (check --data-split and the dataset)")
	case c.MicroBatch <= 0:
		return fmt.Errorf("--per-device-train-batch-size must be > 0, got %d", c.MicroBatch)
	case c.GradAccum <= 0:
		return fmt.Errorf("--gradient-accumulation-steps must be > 0, got %d", c.GradAccum)
	case c.Epochs <= 0 && c.MaxSteps <= 0:
		return fmt.Errorf("--num-train-epochs must be > 0, got %d", c.Epochs)
	case c.MaxSteps < 0:
		return fmt.Errorf("--max-steps must be >= 0, got %d", c.MaxSteps)
	}
	return nil
}

// Result summarises a finished run.
type Result struct {
	Steps       int
	FirstLoss   float64
	LastLoss    float64
	Eval        map[string]float64
	Seconds     float64
	TokensTotal int
}

// NonFiniteError reports a NaN or Inf loss or gradient norm.
type NonFiniteError struct {
	What       string // "loss" or "gradient norm"
	Step       int    // optimizer step being computed (1-based)
	Checkpoint int    // step of the last checkpoint left intact (0: none)
}

func (e *NonFiniteError) Error() string {
	ck := "no checkpoint was written yet"
	if e.Checkpoint > 0 {
		ck = fmt.Sprintf("the checkpoint of step %d is intact (--resume continues from it)", e.Checkpoint)
	}
	return fmt.Sprintf("non-finite %s at step %d; stopped without writing anything for this step; %s. "+
		"Try a lower --learning-rate, more --num-warmup-steps, or gradient clipping", e.What, e.Step, ck)
}

// Run trains st until the configured epochs or steps are done.
func Run(ctx context.Context, dev kernels.Device, cfg Config, st Stage, tr Trainable) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 1
	}
	sched, err := optim.NewSchedule(cfg.Schedule, cfg.Warmup, cfg.TotalSteps())
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewAdamW(dev, tr.Groups, cfg.AdamW)
	if err != nil {
		return nil, err
	}
	pos := position{}
	metrics, err := openMetrics(cfg.Dir, cfg.Resume)
	if err != nil {
		return nil, err
	}
	metrics.events = cfg.Events
	defer metrics.Close()
	if cfg.Resume {
		p, ok, err := loadCheckpoint(dev, cfg, tr, opt)
		if err != nil {
			return nil, err
		}
		if ok {
			pos = p
			if err := metrics.truncate(pos.Step); err != nil {
				return nil, err
			}
			cfg.Log.Info().Int("step", pos.Step).Int("epoch", pos.Epoch).Msg("resumed from checkpoint")
		}
	}
	for _, g := range tr.Grads {
		dev.Zero(g)
	}
	l := &loop{ctx: ctx, dev: dev, cfg: cfg, st: st, tr: tr, opt: opt, sched: sched, pos: pos, metrics: metrics,
		res: &Result{}, start: time.Now(), bar: newProgress(cfg.Progress, cfg.TotalSteps())}
	return l.run()
}

// position is where a run is: the next micro-batch to compute.
type position struct {
	Step      int `json:"step"`       // optimizer steps done
	Epoch     int `json:"epoch"`      // current epoch (0-based)
	Batch     int `json:"batch"`      // next micro-batch within the epoch
	MicroStep int `json:"micro_step"` // micro-batches done in the whole run
	LastCkpt  int `json:"last_checkpoint"`
}

type loop struct {
	ctx     context.Context
	dev     kernels.Device
	cfg     Config
	st      Stage
	tr      Trainable
	opt     *optim.AdamW
	sched   optim.Schedule
	pos     position
	metrics *MetricsLog
	res     *Result
	start   time.Time
	bar     *progress
}

// order is the permutation of the training set in epoch e.
func (l *loop) order(e int) []int {
	return rand.New(rand.NewPCG(l.cfg.Seed, uint64(e)+1)).Perm(l.cfg.TrainSize)
}

func (l *loop) run() (*Result, error) {
	cfg := l.cfg
	total := cfg.TotalSteps()
	batches := (cfg.TrainSize + cfg.MicroBatch - 1) / cfg.MicroBatch
	var acc stepAcc
	stepStart := time.Now()
	for l.pos.Step < total {
		if l.pos.Batch >= batches {
			l.pos.Epoch++
			l.pos.Batch = 0
		}
		perm := l.order(l.pos.Epoch)
		// One optimizer step: up to GradAccum micro-batches, never across an epoch end.
		for k := 0; k < cfg.GradAccum && l.pos.Batch < batches; k++ {
			if err := l.ctx.Err(); err != nil {
				return nil, err
			}
			lo := l.pos.Batch * cfg.MicroBatch
			idx := perm[lo:min(lo+cfg.MicroBatch, cfg.TrainSize)]
			bs, err := l.st.TrainBatch(idx, microSeed(cfg.Seed, l.pos.MicroStep))
			if err != nil {
				return nil, fmt.Errorf("step %d, micro-batch %d of epoch %d: %w", l.pos.Step+1, l.pos.Batch, l.pos.Epoch, err)
			}
			if math.IsNaN(bs.Loss) || math.IsInf(bs.Loss, 0) {
				return nil, &NonFiniteError{What: "loss", Step: l.pos.Step + 1, Checkpoint: l.pos.LastCkpt}
			}
			acc.add(bs)
			l.pos.Batch++
			l.pos.MicroStep++
		}
		if err := l.step(&acc, stepStart); err != nil {
			return nil, err
		}
		stepStart = time.Now()
		acc = stepAcc{}
		endOfEpoch := l.pos.Batch >= batches
		last := l.pos.Step == total
		if cfg.EvalEvery > 0 && l.pos.Step%cfg.EvalEvery == 0 && !last {
			if err := l.evaluate(false); err != nil {
				return nil, err
			}
		}
		if !last && ((cfg.SaveEvery > 0 && l.pos.Step%cfg.SaveEvery == 0) || (cfg.SaveEvery == 0 && endOfEpoch)) {
			if err := l.checkpoint(); err != nil {
				return nil, err
			}
		}
	}
	if err := l.evaluate(true); err != nil {
		return nil, err
	}
	if err := l.checkpoint(); err != nil {
		return nil, err
	}
	l.bar.done()
	l.res.Steps = l.pos.Step
	l.res.Seconds = time.Since(l.start).Seconds()
	return l.res, nil
}

// stepAcc accumulates the micro-batches of one optimizer step.
type stepAcc struct {
	n      int
	loss   float64
	tokens int
	extra  map[string]float64
}

func (a *stepAcc) add(bs BatchStats) {
	a.n++
	a.loss += bs.Loss
	a.tokens += bs.Tokens
	for k, v := range bs.Extra {
		if a.extra == nil {
			a.extra = map[string]float64{}
		}
		a.extra[k] += v
	}
}

// step clips, updates the parameters and logs one optimizer step.
func (l *loop) step(acc *stepAcc, start time.Time) error {
	cfg := l.cfg
	// The gradients hold the sum of acc.n micro-batch mean-loss gradients;
	// the step uses their mean.
	avg := 1 / float64(acc.n)
	norm := optim.GradNorm(l.dev, l.tr.Grads...) * avg
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return &NonFiniteError{What: "gradient norm", Step: l.pos.Step + 1, Checkpoint: l.pos.LastCkpt}
	}
	lrScale := l.sched(l.pos.Step)
	l.opt.Step(lrScale, float32(avg*optim.ClipScale(norm, cfg.ClipNorm)))
	for _, g := range l.tr.Grads {
		l.dev.Zero(g)
	}
	l.pos.Step++
	elapsed := time.Since(start) // the whole step: micro-batches and update
	loss := acc.loss * avg
	if l.pos.Step == 1 {
		l.res.FirstLoss = loss
	}
	l.res.LastLoss = loss
	l.res.TokensTotal += acc.tokens
	tps := float64(acc.tokens) / elapsed.Seconds()
	rec := map[string]any{"step": l.pos.Step, "epoch": l.pos.Epoch, "loss": loss, "lr": l.groupLR(lrScale),
		"grad_norm": norm, "tokens_per_sec": tps}
	for k, v := range acc.extra {
		rec[k] = v * avg
	}
	l.bar.update(l.pos.Step, loss, tps)
	if l.pos.Step%cfg.LogEvery == 0 || l.pos.Step == cfg.TotalSteps() {
		if err := l.metrics.Write(rec); err != nil {
			return err
		}
		if l.cfg.Progress == nil {
			ev := cfg.Log.Info().Int("step", l.pos.Step).Int("of", cfg.TotalSteps()).Float64("loss", loss).
				Float64("lr", l.groupLR(lrScale)).Float64("grad_norm", norm).Float64("tokens_per_sec", tps)
			for k, v := range acc.extra {
				ev = ev.Float64(k, v*avg)
			}
			ev.Msg("train")
		}
	}
	return nil
}

// groupLR is the learning rate of the first group at the schedule value s.
func (l *loop) groupLR(s float64) float64 {
	if len(l.tr.Groups) == 0 {
		return 0
	}
	return l.tr.Groups[0].LR * s
}

func (l *loop) evaluate(final bool) error {
	m, err := l.st.Evaluate()
	if err != nil {
		return fmt.Errorf("evaluate at step %d: %w", l.pos.Step, err)
	}
	if final {
		l.res.Eval = m
	}
	rec := map[string]any{"step": l.pos.Step, "epoch": l.pos.Epoch}
	ev := l.cfg.Log.Info().Int("step", l.pos.Step)
	for k, v := range m {
		rec[k] = v
		ev = ev.Float64(k, v)
	}
	l.bar.clear()
	ev.Msg("eval")
	return l.metrics.Write(rec)
}

// microSeed is the dropout seed of micro-batch k of a run.
func microSeed(seed uint64, k int) uint64 {
	x := seed*0x9E3779B97F4A7C15 + uint64(k) + 1
	x ^= x >> 33
	x *= 0xFF51AFD7ED558CCD
	return x ^ x>>33
}
