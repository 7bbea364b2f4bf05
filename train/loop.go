// Package train is gochat's one training loop, shared by every stage:
// epochs over the training examples in seeded order, rounds of batches
// (gradient accumulation in steps 1 and 2, generation batches in step 3),
// the update that ends a round, evaluation every N rounds and at the end,
// metrics, progress, timing, and checkpoints with exact resume. Optimizer
// is the update every stage takes: the learning-rate schedule, a finite
// check of the gradient norm before anything changes, global-norm
// clipping and AdamW.
//
// A stage plugs in as a RoundStage: Batch runs on each batch of examples,
// Update ends each round. Steps 1 and 2 write a Stage (what one
// micro-batch does) and call Run, which plugs it in with an Optimizer
// step as the update; step 3 (package ppo) plugs in its experience phase
// and its train phase and calls RunRounds.
//
// Determinism: the order of the training examples in epoch e is a
// permutation seeded by (seed, e), and batch k of the run is handed k, from
// which it derives its randomness (dropout, sampling), so a run resumed
// from a checkpoint replays exactly the computation an uninterrupted run
// would have done.
//
// # Data parallelism
//
// With a Config.Comm of N ranks (every rank calls Run or RunRounds with
// the same Config but its Comm), the loop runs as DeepSpeed-Chat's
// data-parallel engine at ZeRO stage 0: a round is GradAccum × N batches
// of MicroBatch examples (the global batch), cut from the same seeded
// order on every rank, and batch j of the run (counted from 0 over all
// ranks) is computed by rank j mod N: each rank takes every N-th batch of
// the single-process sequence, a disjoint slice of every global batch.
// The batches, their seeds (k = j) and the round boundaries are exactly
// those of one process with GradAccum × N batches per round, and so is
// the update: the stage's gradient sums are all-reduced (summed) over
// ranks before the optimizer divides by the round's batch count over all
// ranks and clips by the global norm of the reduced gradients. Each batch
// is weighted as in one process (the stage's loss is its mean over the
// batch), so N ranks reproduce one process up to the summation order.
// A short round at an epoch's end may leave a rank without a batch; it
// contributes zeros. Round.Stats (loss, tokens, extras) are summed over
// ranks before Update. Only rank 0 writes metrics, events, progress and
// checkpoints; every rank reads a checkpoint on resume.
package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/zero"
)

// BatchStats is what a stage reports for one batch.
type BatchStats struct {
	Loss   float64            // the batch's loss (mean over its examples/tokens)
	Tokens int                // tokens processed (for throughput)
	Extra  map[string]float64 // stage metrics averaged over the round (e.g. "accuracy")
}

// Stage is one training objective on fixed examples (steps 1 and 2).
type Stage interface {
	// TrainBatch runs forward and backward on the training examples idx,
	// accumulating into the gradients the gradient of its mean loss. seed
	// keys dropout.
	TrainBatch(idx []int, seed uint64) (BatchStats, error)
	// Evaluate describes the stage's evaluation (see Eval); nil without
	// an evaluation set.
	Evaluate() (*Eval, error)
}

// Eval is an evaluation cut into batches whose results add up, so that
// the ranks of a data-parallel run share it: the loop runs batches r,
// r+R, ... on rank r of R, shares every batch's values exactly
// (dist.ShareFloat64s) and adds them in batch order, so any number of
// ranks logs the float64 metrics of one process.
type Eval struct {
	Batches int      // evaluation batches
	Names   []string // the additive values each batch returns, in order
	// Batch evaluates batch b, 0 ≤ b < Batches, and returns one value per
	// name (sums over its examples or tokens, and their counts).
	Batch func(b int) ([]float64, error)
	// Metrics turns the values summed over all batches into the logged
	// metrics (e.g. "eval_loss").
	Metrics func(sum []float64) (map[string]float64, error)
}

// Run evaluates every batch in this process and returns the metrics.
func (e *Eval) Run() (map[string]float64, error) {
	vals, err := e.batches(0, 1, nil)
	if err != nil {
		return nil, err
	}
	return e.metrics(vals)
}

// batches runs this rank's batches, calling idle (when non-nil) in place
// of each batch it lacks against rank 0 (every rank makes ⌈Batches/ranks⌉
// passes), and returns Batches×len(Names) values with zeros for the
// batches of other ranks.
func (e *Eval) batches(rank, ranks int, idle func() error) ([]float64, error) {
	k := len(e.Names)
	vals := make([]float64, e.Batches*k)
	for b := rank; b < (e.Batches+ranks-1)/ranks*ranks; b += ranks {
		if b >= e.Batches {
			if idle != nil {
				if err := idle(); err != nil {
					return nil, err
				}
			}
			continue
		}
		v, err := e.Batch(b)
		if err != nil {
			return nil, fmt.Errorf("evaluation batch %d: %w", b, err)
		}
		if len(v) != k {
			return nil, fmt.Errorf("evaluation batch %d: %d values for %d names %v", b, len(v), k, e.Names)
		}
		copy(vals[b*k:], v)
	}
	return vals, nil
}

// metrics adds the batches' values in batch order and finishes them.
func (e *Eval) metrics(vals []float64) (map[string]float64, error) {
	k := len(e.Names)
	sum := make([]float64, k)
	for b := range e.Batches {
		for j := range sum {
			sum[j] += vals[b*k+j]
		}
	}
	if e.Metrics == nil {
		return map[string]float64{}, nil
	}
	return e.Metrics(sum)
}

// RoundStage is what any stage plugs into the loop.
type RoundStage interface {
	// Batch runs the first phase of a round on the training examples idx:
	// forward and backward of a micro-batch (steps 1 and 2), or the
	// experience phase on a batch of prompts (step 3). k counts the batches
	// of the run from 0 and keys their randomness.
	Batch(ctx context.Context, idx []int, k int) (BatchStats, error)
	// Update ends round r (the optimizer step of steps 1 and 2, the PPO
	// train phase of step 3) and returns its metrics record; the loop adds
	// step, epoch and tokens_per_sec. A *NonFiniteError stops the run (the
	// loop fills in its step and checkpoint).
	Update(ctx context.Context, r Round) (map[string]float64, error)
	// Evaluate describes the evaluation; nil without one.
	Evaluate() (*Eval, error)
	// State returns what a checkpoint keeps: device buffers by name and a
	// JSON-serialisable record of host state. Restore sets the host state
	// back from the record, after the loop has loaded the buffers.
	State() (map[string]kernels.Buffer, any)
	Restore(record json.RawMessage) error
}

// Round describes the round an Update ends.
type Round struct {
	Step    int // 1-based index of the round in the run (the optimizer step of steps 1 and 2)
	Epoch   int // 0-based epoch
	Batches int // batches in the round
	Last    bool
	Stats   BatchStats // the batches' stats: Loss, Tokens and Extra summed
}

// Trainable describes the state an Optimizer updates and checkpoints.
type Trainable struct {
	// Groups are the optimizer's parameter groups.
	Groups []optim.Group
	// Grads are the gradient buffers: zeroed after each step, clipped by
	// their global norm.
	Grads []kernels.Buffer
	// State are the model buffers a checkpoint saves and restores, by name
	// (the parameters: model, adapters).
	State map[string]kernels.Buffer
	// Flats are the flat buffers the segments are views of, for ZeRO and
	// checkpoints, and At[g][s] is where Groups[g].Segments[s] lies in
	// them. Without Flats every segment is a flat buffer of its own.
	Flats []Flat
	At    [][]SegmentAt
}

// Config configures the loop.
type Config struct {
	TrainSize  int // number of training examples
	MicroBatch int // examples per batch (--per-device-train-batch-size; step 3: generation batch)
	GradAccum  int // batches per round (gradient accumulation; step 3: --generation-batches)
	Epochs     int
	MaxSteps   int // rounds of the run, overriding Epochs (0: Epochs decide)
	// MaxBatches, when > 0, ends the run after this many batches (step 3's
	// --max-steps counts generation batches), the last round cut short.
	MaxBatches int
	Schedule   string // Run: the learning-rate schedule over rounds
	Warmup     int
	ClipNorm   float64 // Run: global-norm clipping (0: off)
	AdamW      optim.AdamWConfig
	EvalEvery  int // evaluate every N rounds (0: only at the end)
	// SaveEvery checkpoints once N rounds have passed since the last
	// checkpoint (0: at the end of each epoch).
	SaveEvery   int
	LogEvery    int // metrics every N rounds (default 1)
	Seed        uint64
	Dir         string // output directory: metrics.jsonl and checkpoint/
	Fingerprint string // identifies the run; a checkpoint of another run is refused
	Resume      bool
	Log         zerolog.Logger
	// LogMsg names the per-round log line ("train" by default); ProgressKey
	// is the record field the progress bar shows ("loss" by default).
	LogMsg, ProgressKey string
	Progress            io.Writer // a terminal for the progress bar, or nil for log lines
	// Events, when set, also receives every metrics record (TensorBoard).
	Events interface {
		Scalars(step int, values map[string]float64) error
	}
	// Comm is the group of ranks training together (nil: this process
	// alone). See "Data parallelism" in the package comment.
	Comm dist.Comm
	// ZeRO is Run's ZeRO stage over Comm (OptimizerConfig.ZeRO).
	ZeRO zero.Stage
	// Offload is Run's ZeRO-Offload (OptimizerConfig.Offload).
	Offload Offload
	// Stop, when closed, asks the run to stop at the next safe point: the
	// end of a round, after its evaluation and checkpoint if due. The run
	// then saves a checkpoint and returns an *InterruptedError. Under
	// several ranks it is enough that one rank's Stop is closed.
	Stop <-chan struct{}
}

// ranks is the number of ranks training together.
func (c *Config) ranks() int {
	if c.Comm == nil {
		return 1
	}
	return c.Comm.Size()
}

// rank is this process's rank.
func (c *Config) rank() int {
	if c.Comm == nil {
		return 0
	}
	return c.Comm.Rank()
}

// RoundBatches is the number of batches of a full round over all ranks:
// GradAccum × ranks (the global batch is MicroBatch × RoundBatches
// examples).
func (c *Config) RoundBatches() int { return c.GradAccum * c.ranks() }

// batchesPerEpoch is the number of batches in one epoch.
func (c *Config) batchesPerEpoch() int { return (c.TrainSize + c.MicroBatch - 1) / c.MicroBatch }

// StepsPerEpoch is the number of rounds (optimizer steps in steps 1 and 2)
// in one epoch; a round never spans two epochs.
func (c *Config) StepsPerEpoch() int {
	return (c.batchesPerEpoch() + c.RoundBatches() - 1) / c.RoundBatches()
}

// TotalSteps is the number of rounds of the run (in steps 1 and 2 the
// schedule's length). MaxSteps, when set, overrides the epochs (as in
// transformers' Trainer): the data is cycled as many times as needed;
// MaxBatches cuts the run after that many batches.
func (c *Config) TotalSteps() int {
	if c.MaxBatches > 0 {
		bpe := c.batchesPerEpoch()
		n := c.MaxBatches/bpe*c.StepsPerEpoch() + (c.MaxBatches%bpe+c.RoundBatches()-1)/c.RoundBatches()
		if c.MaxSteps > 0 {
			n = min(n, c.MaxSteps)
		}
		return n
	}
	if c.MaxSteps > 0 {
		return c.MaxSteps
	}
	return c.Epochs * c.StepsPerEpoch()
}

// TotalBatches is the number of batches of the run.
func (c *Config) TotalBatches() int {
	rounds, spe, bpe := c.TotalSteps(), c.StepsPerEpoch(), c.batchesPerEpoch()
	n := rounds/spe*bpe + min(rounds%spe*c.RoundBatches(), bpe)
	if c.MaxBatches > 0 {
		n = min(n, c.MaxBatches)
	}
	return n
}

func (c *Config) validate() error {
	switch {
	case c.TrainSize <= 0:
		return errors.New("the training split is empty (check --data-split and the dataset)")
	case c.MicroBatch <= 0:
		return fmt.Errorf("--per-device-train-batch-size must be > 0, got %d", c.MicroBatch)
	case c.GradAccum <= 0:
		return fmt.Errorf("--gradient-accumulation-steps must be > 0, got %d", c.GradAccum)
	case c.Epochs <= 0 && c.MaxSteps <= 0 && c.MaxBatches <= 0:
		return fmt.Errorf("--num-train-epochs must be > 0, got %d", c.Epochs)
	case c.MaxSteps < 0:
		return fmt.Errorf("--max-steps must be >= 0, got %d", c.MaxSteps)
	case c.MaxBatches < 0:
		return fmt.Errorf("--max-steps must be >= 0, got %d", c.MaxBatches)
	}
	return nil
}

// Result summarises a finished run.
type Result struct {
	Steps       int // rounds done
	FirstLoss   float64
	LastLoss    float64
	Eval        map[string]float64
	Seconds     float64
	TokensTotal int
	// BatchSeconds and UpdateSeconds split this process's time between the
	// two phases (after a resume, only the part it ran).
	BatchSeconds, UpdateSeconds float64
	// Last is the last round's metrics record.
	Last map[string]float64
}

// NonFiniteError reports a NaN or Inf loss or gradient norm, found before
// any parameter changed.
type NonFiniteError struct {
	What       string // e.g. "loss", "gradient norm", "critic loss"
	Step       int    // round being computed (1-based)
	Checkpoint int    // round of the last checkpoint left intact (0: none)
}

func (e *NonFiniteError) Error() string {
	ck := "no checkpoint was written yet"
	if e.Checkpoint > 0 {
		ck = fmt.Sprintf("the checkpoint of step %d is intact (--resume continues from it)", e.Checkpoint)
	}
	return fmt.Sprintf("non-finite %s at step %d; stopped before any weight changed; %s. "+
		"Try a lower learning rate, more warm-up steps, or gradient clipping", e.What, e.Step, ck)
}

// Run trains a Stage (steps 1 and 2): each round accumulates GradAccum
// micro-batches of gradients, then one Optimizer step with the
// schedule over rounds.
func Run(ctx context.Context, dev kernels.Device, cfg Config, st Stage, tr Trainable) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opt, err := NewOptimizer(dev, tr, OptimizerConfig{AdamW: cfg.AdamW, Schedule: cfg.Schedule, Warmup: cfg.Warmup,
		Total: cfg.TotalSteps(), ClipNorm: cfg.ClipNorm, Comm: cfg.Comm, ZeRO: cfg.ZeRO, Offload: cfg.Offload})
	if err != nil {
		return nil, err
	}
	defer opt.Free()
	if cfg.Offload.Enabled() {
		p, g, s := opt.Held()
		cfg.Log.Info().Float64("ratio", cfg.Offload.Ratio).Str("host", cfg.Offload.Host.Name()).Int64("host_bytes", opt.HostHeld()).
			Int64("device_model_state_bytes", p+g+s).Msg("ZeRO-Offload: optimizer state on the host")
	}
	if cfg.ranks() > 1 {
		p, g, s := opt.Held()
		cfg.Log.Info().Int("zero_stage", int(cfg.ZeRO)).Int64("param_bytes", p).Int64("grad_bytes", g).
			Int64("optimizer_bytes", s).Int64("model_state_bytes", p+g+s).Msg("trained state held per rank")
	}
	res, err := RunRounds(ctx, dev, cfg, &sgdStage{st: st, opt: opt, seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	// The caller saves the model: ZeRO-3 gives every rank all of it back.
	if err := opt.Consolidate(); err != nil {
		return nil, err
	}
	return res, nil
}

// sgdStage plugs a Stage into the loop: its micro-batches accumulate
// gradients and each round ends with an optimizer step.
type sgdStage struct {
	st   Stage
	opt  *Optimizer
	seed uint64
}

func (s *sgdStage) Batch(_ context.Context, idx []int, k int) (BatchStats, error) {
	bs, err := s.st.TrainBatch(idx, microSeed(s.seed, k))
	if err == nil && (math.IsNaN(bs.Loss) || math.IsInf(bs.Loss, 0)) {
		err = &NonFiniteError{What: "loss"}
	}
	return bs, err
}

func (s *sgdStage) Update(_ context.Context, r Round) (map[string]float64, error) {
	u, err := s.opt.Step(r.Step-1, r.Batches)
	if err != nil {
		return nil, err
	}
	avg := 1 / float64(r.Batches)
	rec := map[string]float64{"loss": r.Stats.Loss * avg, "lr": u.LR, "grad_norm": u.GradNorm}
	for k, v := range r.Stats.Extra {
		rec[k] = v * avg
	}
	return rec, nil
}

func (s *sgdStage) Evaluate() (*Eval, error) { return s.st.Evaluate() }

// IdleEval implements evalIdler: the collectives of an evaluation batch
// this rank lacks.
func (s *sgdStage) IdleEval() error { return s.opt.IdleForward() }

// Idle implements idler: the collectives of a batch this rank lacks.
func (s *sgdStage) Idle() error { return s.opt.Idle() }

// Sharded implements shardedState.
func (s *sgdStage) Sharded() bool { return s.opt.Sharded() }

// evalIdler is a RoundStage whose evaluation batches make collectives
// (ZeRO-3's gathers): a rank with fewer evaluation batches than rank 0
// calls IdleEval for each one it lacks.
type evalIdler interface{ IdleEval() error }

// idler is a RoundStage whose batches make collectives (ZeRO 2 and 3): a
// rank that computes fewer batches in a round than rank 0 calls Idle once
// for each batch it lacks.
type idler interface{ Idle() error }

// shardedState is a RoundStage whose ranks hold different parts of its
// state (ZeRO 1-3): each rank checkpoints its own part.
type shardedState interface{ Sharded() bool }

// sgdState is the host state of a step-1/2 checkpoint.
type sgdState struct {
	OptSteps int `json:"optimizer_steps"`
}

func (s *sgdStage) State() (map[string]kernels.Buffer, any) {
	bufs := map[string]kernels.Buffer{}
	s.opt.StateBuffers(bufs, "")
	return bufs, sgdState{OptSteps: s.opt.Steps()}
}

func (s *sgdStage) Restore(b json.RawMessage) error {
	var st sgdState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	s.opt.SetSteps(st.OptSteps)
	return nil
}

// RunRounds runs a RoundStage until the configured epochs, rounds or
// batches are done: the one loop of every step. dev holds the buffers
// of st.State.
func RunRounds(ctx context.Context, dev kernels.Device, cfg Config, st RoundStage) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 1
	}
	if cfg.LogMsg == "" {
		cfg.LogMsg = "train"
	}
	if cfg.ProgressKey == "" {
		cfg.ProgressKey = "loss"
	}
	l := &loop{ctx: ctx, dev: dev, cfg: cfg, st: st, res: &Result{}, start: time.Now(),
		rank: cfg.rank(), ranks: cfg.ranks(), writer: cfg.rank() == 0}
	if !l.writer {
		// Only rank 0 writes: metrics, events, the progress bar and
		// checkpoints.
		cfg.Events, cfg.Progress = nil, nil
		l.cfg = cfg
	}
	if cfg.Dir != "" && l.writer {
		removePartialCheckpoints(cfg.Dir, cfg.Log)
	}
	if cfg.Resume {
		pos, rows, ok, err := loadCheckpoint(dev, cfg, st)
		if err != nil {
			return nil, err
		}
		if !ok {
			cfg.Log.Warn().Str("dir", cfg.Dir).Msg("--resume: no checkpoint there; starting from step 1")
		}
		if ok {
			l.pos = pos
			if l.metrics, err = OpenMetrics(l.metricsDir(), rows); err != nil {
				return nil, err
			}
			cfg.Log.Info().Int("step", pos.Step).Int("epoch", pos.Epoch).Msg("resumed from checkpoint")
		}
	}
	if l.metrics == nil {
		var err error
		if l.metrics, err = OpenMetrics(l.metricsDir(), 0); err != nil {
			return nil, err
		}
	}
	l.metrics.events = cfg.Events
	defer l.metrics.Close()
	l.bar = newProgress(cfg.Progress, cfg.TotalSteps())
	return l.run()
}

// position is where a run is: the next batch to compute.
type position struct {
	Step      int `json:"step"`       // rounds done
	Epoch     int `json:"epoch"`      // current epoch (0-based)
	Batch     int `json:"batch"`      // next batch within the epoch
	MicroStep int `json:"micro_step"` // batches done in the whole run
	LastCkpt  int `json:"last_checkpoint"`
}

type loop struct {
	ctx     context.Context
	dev     kernels.Device
	cfg     Config
	st      RoundStage
	pos     position
	metrics *MetricsLog
	res     *Result
	start   time.Time
	bar     *progress
	// rank of ranks; writer: this rank writes metrics and checkpoints.
	rank, ranks int
	writer      bool
}

// metricsDir is where this rank writes metrics: cfg.Dir on rank 0,
// nowhere on the others.
func (l *loop) metricsDir() string {
	if !l.writer {
		return ""
	}
	return l.cfg.Dir
}

// order is the permutation of the training set in epoch e.
func (l *loop) order(e int) []int {
	return rand.New(rand.NewPCG(l.cfg.Seed, uint64(e)+1)).Perm(l.cfg.TrainSize)
}

// fail completes a NonFiniteError with the loop's position.
func (l *loop) fail(err error) error {
	var nf *NonFiniteError
	if errors.As(err, &nf) {
		nf.Step, nf.Checkpoint = l.pos.Step+1, l.pos.LastCkpt
	}
	return err
}

func (l *loop) run() (*Result, error) {
	cfg := l.cfg
	total, totalBatches := cfg.TotalSteps(), cfg.TotalBatches()
	batches := cfg.batchesPerEpoch()
	for l.pos.Step < total && l.pos.MicroStep < totalBatches {
		// The safe point: between rounds, every evaluation and checkpoint
		// due done, so a resume from here continues exactly.
		if stop, err := l.stopRequested(); err != nil {
			return nil, err
		} else if stop {
			return nil, l.interrupt()
		}
		if l.pos.Batch >= batches {
			l.pos.Epoch++
			l.pos.Batch = 0
		}
		perm := l.order(l.pos.Epoch)
		roundStart := time.Now()
		// One round: up to GradAccum × ranks batches, never across an epoch
		// end; this rank computes every ranks-th of them.
		r := Round{Step: l.pos.Step + 1, Epoch: l.pos.Epoch}
		local := 0
		for k := 0; k < cfg.RoundBatches() && l.pos.Batch < batches && l.pos.MicroStep < totalBatches; k++ {
			if err := l.ctx.Err(); err != nil {
				return nil, err
			}
			r.Batches++
			if k%l.ranks == l.rank {
				lo := l.pos.Batch * cfg.MicroBatch
				idx := perm[lo:min(lo+cfg.MicroBatch, cfg.TrainSize)]
				bs, err := l.st.Batch(l.ctx, idx, l.pos.MicroStep)
				if err != nil {
					return nil, l.fail(fmt.Errorf("step %d, batch %d of epoch %d: %w", l.pos.Step+1, l.pos.Batch, l.pos.Epoch, err))
				}
				local++
				r.Stats.Loss += bs.Loss
				r.Stats.Tokens += bs.Tokens
				for k, v := range bs.Extra {
					if r.Stats.Extra == nil {
						r.Stats.Extra = map[string]float64{}
					}
					r.Stats.Extra[k] += v
				}
			}
			l.pos.Batch++
			l.pos.MicroStep++
		}
		if id, ok := l.st.(idler); ok && l.ranks > 1 {
			// Rank 0 computes the most batches of a round: ⌈batches/ranks⌉.
			for range (r.Batches+l.ranks-1)/l.ranks - local {
				if err := id.Idle(); err != nil {
					return nil, fmt.Errorf("step %d: %w", l.pos.Step+1, err)
				}
			}
		}
		if l.ranks > 1 {
			if err := l.reduceStats(&r.Stats, local > 0); err != nil {
				return nil, fmt.Errorf("step %d: %w", l.pos.Step+1, err)
			}
		}
		batchEnd := time.Now()
		l.res.BatchSeconds += batchEnd.Sub(roundStart).Seconds()
		r.Last = l.pos.Step+1 == total || l.pos.MicroStep == totalBatches
		if err := l.ctx.Err(); err != nil {
			return nil, err
		}
		rec, err := l.st.Update(l.ctx, r)
		if err != nil {
			return nil, l.fail(fmt.Errorf("step %d: %w", l.pos.Step+1, err))
		}
		l.res.UpdateSeconds += time.Since(batchEnd).Seconds()
		l.pos.Step++
		if err := l.log(r, rec, time.Since(roundStart)); err != nil {
			return nil, err
		}
		endOfEpoch := l.pos.Batch >= batches
		if r.Last {
			break
		}
		if cfg.EvalEvery > 0 && l.pos.Step%cfg.EvalEvery == 0 {
			if err := l.evaluate(false); err != nil {
				return nil, err
			}
		}
		if (cfg.SaveEvery > 0 && l.pos.Step-l.pos.LastCkpt >= cfg.SaveEvery) || (cfg.SaveEvery == 0 && endOfEpoch) {
			if err := l.checkpoint(); err != nil {
				return nil, err
			}
		}
	}
	// The last checkpoint comes before the final evaluation, so that it
	// does not cover the evaluation's metrics record: a run killed after
	// it resumes there, drops the record if it was written, and evaluates
	// again, leaving one record as an uninterrupted run does (saved after
	// it, every resume from it appended another).
	if err := l.checkpoint(); err != nil {
		return nil, err
	}
	if err := l.evaluate(true); err != nil {
		return nil, err
	}
	l.bar.done()
	l.res.Steps = l.pos.Step
	l.res.Seconds = time.Since(l.start).Seconds()
	return l.res, nil
}

// log records one round: the result, the metrics log, the progress bar or
// a log line.
func (l *loop) log(r Round, rec map[string]float64, elapsed time.Duration) error {
	cfg := l.cfg
	if rec == nil {
		rec = map[string]float64{}
	}
	if r.Stats.Tokens > 0 {
		rec["tokens_per_sec"] = float64(r.Stats.Tokens) / elapsed.Seconds()
	}
	if loss, ok := rec["loss"]; ok {
		if l.pos.Step == 1 {
			l.res.FirstLoss = loss
		}
		l.res.LastLoss = loss
	}
	l.res.TokensTotal += r.Stats.Tokens
	l.res.Last = rec
	l.bar.update(l.pos.Step, cfg.ProgressKey, rec[cfg.ProgressKey], rec["tokens_per_sec"])
	if l.pos.Step%cfg.LogEvery != 0 && !r.Last {
		return nil
	}
	out := map[string]any{"step": l.pos.Step, "epoch": l.pos.Epoch}
	keys := make([]string, 0, len(rec))
	for k, v := range rec {
		out[k] = v
		keys = append(keys, k)
	}
	if err := l.metrics.Write(out); err != nil {
		return err
	}
	if cfg.Progress == nil {
		sort.Strings(keys)
		ev := cfg.Log.Info().Int("step", l.pos.Step).Int("of", cfg.TotalSteps())
		for _, k := range keys {
			ev = ev.Float64(k, rec[k])
		}
		ev.Msg(cfg.LogMsg)
	}
	return nil
}

func (l *loop) evaluate(final bool) error {
	e, err := l.st.Evaluate()
	if err != nil {
		return fmt.Errorf("evaluate at step %d: %w", l.pos.Step, err)
	}
	if e == nil {
		return nil
	}
	var idle func() error
	if id, ok := l.st.(evalIdler); ok && l.ranks > 1 {
		idle = id.IdleEval
	}
	vals, err := e.batches(l.rank, l.ranks, idle)
	if err == nil {
		err = dist.ShareFloat64s(l.cfg.Comm, l.dev, vals)
	}
	var m map[string]float64
	if err == nil {
		m, err = e.metrics(vals)
	}
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

// reduceStats sums a round's stats over the ranks (in fp32): loss and
// tokens, then the extras by sorted name. A rank that computed no batch
// in the round (had is false) has no extras and contributes zeros; rank 0
// always has the round's first batch.
func (l *loop) reduceStats(s *BatchStats, had bool) error {
	keys := sortedKeys(s.Extra)
	head := []float32{float32(s.Loss), float32(s.Tokens), 0, float32(len(keys))}
	if had {
		head[2] = 1
	}
	if err := l.allReduce(head); err != nil {
		return err
	}
	s.Loss, s.Tokens = float64(head[0]), int(math.Round(float64(head[1])))
	withBatches, nkeys := int(head[2]), int(head[3])
	if nkeys == 0 {
		return nil
	}
	if withBatches == 0 || nkeys%withBatches != 0 || (had && len(keys) != nkeys/withBatches) {
		return fmt.Errorf("train: ranks report different batch metrics (%d names over %d ranks, %d here)", nkeys, withBatches, len(keys))
	}
	vals := make([]float32, nkeys/withBatches)
	for i, k := range keys {
		vals[i] = float32(s.Extra[k])
	}
	if err := l.allReduce(vals); err != nil {
		return err
	}
	if !had {
		return nil
	}
	for i, k := range keys {
		s.Extra[k] = float64(vals[i])
	}
	return nil
}

// allReduce sums v over the ranks through a device buffer.
func (l *loop) allReduce(v []float32) error {
	buf, err := l.dev.Alloc(kernels.F32, len(v))
	if err != nil {
		return err
	}
	defer l.dev.Free(buf)
	l.dev.WriteF32(buf, v)
	if err := l.cfg.Comm.AllReduceSum(buf); err != nil {
		return fmt.Errorf("reduce the batch metrics: %w", err)
	}
	l.dev.ReadF32(v, buf)
	return nil
}
