package ppo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/internal/atomicfile"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/train"
)

// RunConfig configures Run: step 3 on the training loop.
type RunConfig struct {
	Config  // the PPO constants
	Options // the trainer's options; Run sets Iterations from the run's length

	GenBatch   int // prompts per generation batch (per_device_generation_batch_size)
	TrainBatch int // experience rows per PPO micro-batch (per_device_training_batch_size)
	// GradAccum is the streams each rank trains on per PPO iteration
	// (gradient_accumulation_steps; 0 means 1): a round holds
	// GenerationBatches generation batches per stream, and each PPO
	// iteration accumulates one micro-batch of every stream before the
	// optimizer steps (see the package's data parallelism).
	GradAccum int
	Epochs    int // passes over the prompts (num_train_epochs)
	MaxSteps  int // generation batches of the run, overriding Epochs (0: Epochs decide)
	// SaveEvery checkpoints once this many generation batches have been
	// trained on since the last checkpoint, at the end of a round (0: at
	// the end of each epoch over the prompts).
	SaveEvery    int
	Dir          string // output directory: metrics.jsonl, checkpoint/, timing.json ("": none)
	Fingerprint  string // identifies the run; a checkpoint of another run is refused
	Resume       bool
	PrintAnswers bool // log up to four prompts and answers of every generation batch
	Log          zerolog.Logger
	Progress     io.Writer // a terminal for the progress bar, or nil for log lines
	Events       interface {
		Scalars(step int, values map[string]float64) error
	}
	// Stop, when closed, stops the run after the round in progress with a
	// checkpoint (train.Config.Stop; Run then returns a
	// *train.InterruptedError).
	Stop <-chan struct{}
}

// Data is step 3's data.
type Data struct {
	// Prompts are the phase-3 prompts (IDs without padding), left-padded to
	// PromptLen with PAD for generation.
	Prompts   []data.Example
	PromptLen int
	PAD       int32
	// Unsup, when not nil, are the blocks of the unsupervised dataset for
	// mixture training (data.LoadUnsupervised), right-padded to UnsupLen.
	Unsup    []data.Example
	UnsupLen int
	// Show, when set, renders a prompt and its answer (ids, the answer with
	// its EOS or stop token) as text for PrintAnswers: best the texts the reward model
	// scores (reward.Texts).
	Show func(prompt, answer []int32) (string, string, error)
	// Check, when set, grades an answer (ids without EOS or stop token) to a prompt; each
	// round then logs answer_accuracy, the fraction of the sampled answers
	// it can grade that are right.
	Check func(prompt, answer []int32) (right, ok bool)
}

// Timing splits a step-3 run's time (this process's part of it, after a
// resume): decoding (the hybrid engine in Generate mode, switches
// included), the gradient-free forwards that score the experience, and the
// PPO updates (actor, critic and unsupervised passes).
type Timing struct {
	TotalSeconds           float64 `json:"total_seconds"`
	GenerationSeconds      float64 `json:"generation_seconds"`
	ExperienceSeconds      float64 `json:"experience_seconds"`
	TrainingSeconds        float64 `json:"training_seconds"`
	GeneratedTokens        int     `json:"generated_tokens"`
	GenerationTokensPerSec float64 `json:"generation_tokens_per_sec"`
	TrainingTokens         int     `json:"training_tokens"`
	TrainingTokensPerSec   float64 `json:"training_tokens_per_sec"`
}

// TimingFile is where Run writes Timing in RunConfig.Dir.
const TimingFile = "timing.json"

// Result summarises a finished step 3.
type Result struct {
	Rounds   int // training rounds (generation_batches generation batches each)
	PPOSteps int // TrainStep calls
	Timing   Timing
	// Last is the last round's metrics record.
	Last map[string]float64
	// Trainer holds the trained state (EMA for saving).
	Trainer *Trainer
}

// Run is step 3 on the training loop (train.RunRounds): each round
// generates experience for GenerationBatches batches of prompts (the
// experience phase), then trains PPOEpochs passes of micro-batches over
// it (the train phase), logging one metrics record per round. It writes
// metrics.jsonl, checkpoints (resumed bit-identically) and timing.json to
// cfg.Dir; saving the models is the caller's (Result.Trainer.EMA for the
// EMA).
func Run(ctx context.Context, dev kernels.Device, cfg RunConfig, m Models, d Data) (*Result, error) {
	if err := cfg.check(m, d); err != nil {
		return nil, err
	}
	if cfg.GradAccum == 0 {
		cfg.GradAccum = 1
	}
	g := group{comm: cfg.Comm, dev: dev}
	ranks := g.size()
	gb := cfg.GenerationBatches * cfg.GradAccum // a rank's generation batches per round
	tcfg := train.Config{TrainSize: len(d.Prompts), MicroBatch: cfg.GenBatch, GradAccum: gb, Epochs: cfg.Epochs,
		MaxBatches: cfg.MaxSteps, Seed: cfg.Seed, Dir: cfg.Dir, Fingerprint: cfg.Fingerprint, Resume: cfg.Resume,
		Log: cfg.Log, LogMsg: "ppo", ProgressKey: "reward_score", Progress: cfg.Progress, Events: cfg.Events, Comm: cfg.Comm,
		Stop: cfg.Stop}
	if cfg.SaveEvery > 0 {
		tcfg.SaveEvery = (cfg.SaveEvery + gb*ranks - 1) / (gb * ranks)
	}
	// The schedules count PPO iterations: an estimate (rows with at most one
	// answer token are dropped), past which they hold their end value.
	streams := cfg.GradAccum * ranks
	perBatch := (cfg.GenBatch + cfg.TrainBatch - 1) / cfg.TrainBatch
	cfg.Iterations = (tcfg.TotalBatches()*perBatch + streams - 1) / streams * cfg.PPOEpochs
	tr, err := NewTrainer(cfg.Config, cfg.Options, m)
	if err != nil {
		return nil, err
	}
	if ranks > 1 {
		ap, ag, as := tr.actorOpt.Held()
		cp, cg, cs := tr.criticOpt.Held()
		cfg.Log.Info().Int("actor_zero_stage", int(cfg.ActorZeRO)).Int("critic_zero_stage", int(cfg.CriticZeRO)).
			Int64("actor_state_bytes", ap+ag+as).Int64("critic_state_bytes", cp+cg+cs).Msg("trained state held per rank")
	}
	if cfg.Offload.Enabled() {
		cfg.Log.Info().Float64("ratio", cfg.Offload.Ratio).Str("host", cfg.Offload.Host.Name()).
			Int64("actor_host_bytes", tr.actorOpt.HostHeld()).Int64("critic_host_bytes", tr.criticOpt.HostHeld()).
			Msg("ZeRO-Offload: optimizer state on the host")
	}
	st := newStage(cfg, d, tr, g, func(p hybridengine.Prompts) (*Batch, error) { return tr.generate(p, false) })
	st.stops = m.Actor.Stops
	cfg.Log.Info().Int("prompts", len(d.Prompts)).Int("generation_batches", tcfg.TotalBatches()).
		Int("rounds", tcfg.TotalSteps()).Int("ppo_iterations", cfg.Iterations).Msg("step 3")
	start := time.Now()
	res, err := train.RunRounds(ctx, dev, tcfg, st)
	if err != nil {
		return nil, err
	}
	// The caller saves the models: ZeRO-3 gives every rank all of them.
	if err := tr.Consolidate(); err != nil {
		return nil, err
	}
	tm := st.timing
	tm.TotalSeconds = time.Since(start).Seconds()
	if tm.GenerationSeconds > 0 {
		tm.GenerationTokensPerSec = float64(tm.GeneratedTokens) / tm.GenerationSeconds
	}
	if tm.TrainingSeconds > 0 {
		tm.TrainingTokensPerSec = float64(tm.TrainingTokens) / tm.TrainingSeconds
	}
	if cfg.Dir != "" && g.rank() == 0 {
		b, _ := json.MarshalIndent(tm, "", "  ")
		if err := atomicfile.WriteFile(filepath.Join(cfg.Dir, TimingFile), append(b, '\n')); err != nil {
			return nil, err
		}
	}
	return &Result{Rounds: res.Steps, PPOSteps: int(tr.steps), Timing: tm, Last: res.Last, Trainer: tr}, nil
}

// check validates the run's settings against the models and the data.
func (cfg *RunConfig) check(m Models, d Data) error {
	switch {
	case cfg.GenBatch < 1 || cfg.TrainBatch < 1:
		return fmt.Errorf("ppo: generation and training batch sizes must be >= 1 (got %d and %d)", cfg.GenBatch, cfg.TrainBatch)
	case len(d.Prompts) == 0:
		return errors.New("ppo: no prompts")
	case d.PromptLen < 1:
		return fmt.Errorf("ppo: prompt length %d", d.PromptLen)
	case d.Unsup != nil && d.UnsupLen < 2:
		return fmt.Errorf("ppo: unsupervised block length %d", d.UnsupLen)
	case cfg.SaveEvery < 0 || cfg.MaxSteps < 0 || cfg.GradAccum < 0:
		return fmt.Errorf("ppo: negative save interval, max steps or gradient accumulation")
	}
	return nil
}

// CheckLengths checks that the sequences of step 3 fit every model: the
// actor and the reference see prompt + answer (maxPrompt + maxAnswer
// positions), and so does the critic; the reward model sees prompt +
// answer + the end text, or the chat template's lead and end of turn
// (rewardExtra more tokens). Errors name the model
// and the flags to change.
func CheckLengths(m Models, maxPrompt, maxAnswer, rewardExtra int) error {
	actor, err := m.Actor.Model()
	if err != nil {
		return err
	}
	n := maxPrompt + maxAnswer
	for _, x := range []struct {
		name  string
		m     configured
		n     int
		extra string
	}{{"actor", actor, n, ""}, {"critic", m.Critic, n, ""},
		{"reward model", m.Reward, n + rewardExtra, fmt.Sprintf(" + %d tokens of --reward-end-text (or the chat template's end of turn)", rewardExtra)}} {
		if x.m != nil && x.n > x.m.ModelConfig().MaxPositions {
			return fmt.Errorf("--max-prompt-seq-len + --max-answer-seq-len%s = %d exceeds the %s's max_position_embeddings %d",
				x.extra, x.n, x.name, x.m.ModelConfig().MaxPositions)
		}
	}
	return nil
}

// stage is step 3 as a train.RoundStage: Batch is the experience phase on
// one generation batch, Update the train phase on the round's experience.
type stage struct {
	cfg      RunConfig
	d        Data
	tr       *Trainer
	generate func(hybridengine.Prompts) (*Batch, error)
	scoreEMA ScoreEMA
	col      data.Collator
	unsupCol data.Collator
	timing   Timing
	stops    func(tok int32) bool // whether tok ends an answer (hybridengine.Engine.Stops)
	round    roundState
	g        group
	streams  int // over all ranks
}

// roundState is what a round has gathered on this rank since its first
// batch: its experience and each batch's stream, the batches computed
// (skipped ones included), the batches skipped and the grading of its
// answers; began once the models are gathered for the experience phase.
type roundState struct {
	pending       []*Batch
	local         []int // each pending batch's index among this rank's batches of the round
	batches       int
	skipped       int
	right, graded int
	began         bool
}

// newStage is step 3's stage for cfg (GradAccum set) on the ranks of g;
// generate produces a batch of experience with raw scores.
func newStage(cfg RunConfig, d Data, tr *Trainer, g group, generate func(hybridengine.Prompts) (*Batch, error)) *stage {
	return &stage{cfg: cfg, d: d, tr: tr, generate: generate, scoreEMA: ScoreEMA{Alpha: cfg.ScoreEMAAlpha},
		g: g, streams: cfg.GradAccum * g.size(),
		col: data.Collator{T: d.PromptLen, PAD: d.PAD}, unsupCol: data.Collator{T: d.UnsupLen, PAD: d.PAD}}
}

// begin gathers the models for the experience phase, once a round.
func (s *stage) begin() error {
	if s.round.began {
		return nil
	}
	s.round.began = true
	return s.tr.gatherModels()
}

// streamOf is the stream of this rank's i-th batch of a round: with A
// streams a rank, its i mod A-th, numbered over all ranks (rank r holds
// streams r, r+ranks, ...). One process with ranks·A streams numbers
// batch m = i·ranks + r the same way: m mod (ranks·A).
func (s *stage) streamOf(i int) int {
	a := s.cfg.GradAccum
	return (i%a)*s.g.size() + s.g.rank()
}

// Batch generates the experience of generation batch k (prompts idx) and
// keeps it for the round's Update. A batch whose answers all have at most
// one token is skipped (counted in the round's skipped_batches).
func (s *stage) Batch(_ context.Context, idx []int, k int) (train.BatchStats, error) {
	if err := s.begin(); err != nil {
		return train.BatchStats{}, err
	}
	i := s.round.batches
	s.round.batches++
	exs := make([]data.Example, len(idx))
	rows := make([]uint64, len(idx))
	for i, j := range idx {
		exs[i], rows[i] = s.d.Prompts[j], uint64(k*s.cfg.GenBatch+i)
	}
	pb, err := s.col.Prompts(exs)
	if err != nil {
		return train.BatchStats{}, err
	}
	bt, err := s.generate(hybridengine.Prompts{B: pb.B, T: pb.T, IDs: pb.IDs, Mask: pb.Mask, Rows: rows})
	if errors.Is(err, ErrNoAnswers) {
		s.cfg.Log.Warn().Int("generation_batch", k).Msg("every answer had at most one token; batch skipped")
		s.round.skipped++
		return train.BatchStats{}, nil
	}
	if err != nil {
		return train.BatchStats{}, err
	}
	if s.d.Check != nil {
		for _, r := range bt.Kept {
			ans := bt.Rollout.Answer(r)
			if n := len(ans); n > 0 && s.stops(ans[n-1]) {
				ans = ans[:n-1]
			}
			if right, ok := s.d.Check(exs[r].IDs, ans); ok {
				s.round.graded++
				if right {
					s.round.right++
				}
			}
		}
	}
	if s.cfg.PrintAnswers && s.d.Show != nil {
		for i, r := range bt.Kept[:min(len(bt.Kept), 4)] {
			p, a, _ := s.d.Show(exs[r].IDs, bt.Rollout.Answer(r))
			s.cfg.Log.Info().Int("generation_batch", k).Str("prompt", p).Str("answer", a).Float32("score", bt.RawScores[i]).Msg("sample")
		}
	}
	s.round.pending = append(s.round.pending, bt)
	s.round.local = append(s.round.local, i)
	return train.BatchStats{}, nil
}

// Update trains PPOEpochs passes over the round's experience and returns
// the round's record: means over its PPO iterations and over the answers
// generated on every rank. Each pass takes the micro-batches of
// TrainBatch rows of every stream in turn, one per stream at each PPO
// iteration (TrainIteration; with mixture training an unsupervised step
// follows), for as many iterations as the longest stream has
// micro-batches.
func (s *stage) Update(ctx context.Context, r train.Round) (map[string]float64, error) {
	if err := s.begin(); err != nil { // a rank without a batch this round
		return nil, err
	}
	s.tr.partitionModels()
	if s.cfg.ScoreScaling {
		if err := s.scaleScores(r.Batches); err != nil {
			return nil, err
		}
	}
	// Each of this rank's streams: its micro-batches in order.
	A, R := s.cfg.GradAccum, s.g.size()
	micro := make([][]*Batch, A)
	for k, b := range s.round.pending {
		a := s.round.local[k] % A
		for lo := 0; lo < len(b.Kept); lo += s.cfg.TrainBatch {
			micro[a] = append(micro[a], b.Slice(lo, min(lo+s.cfg.TrainBatch, len(b.Kept))))
		}
	}
	counts := make([]float64, s.streams)
	for a := range A {
		counts[a*R+s.g.rank()] = float64(len(micro[a]))
	}
	if err := s.g.gather(counts); err != nil {
		return nil, err
	}
	iters := 0
	for _, c := range counts {
		iters = max(iters, int(c))
	}
	sum := map[string]float64{}
	var last StepStats
	n, tokens, start := 0, 0, time.Now()
	for range s.cfg.PPOEpochs {
		for j := range iters {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			it := Iteration{Micros: make([]Micro, A), Streams: s.streams, Mixture: s.d.Unsup != nil}
			for a := range A {
				m := Micro{Stream: a*R + s.g.rank()}
				if j < len(micro[a]) {
					m.Exp = micro[a][j]
					if it.Mixture {
						ub, err := s.unsupBatch(int(s.tr.steps)*s.streams + m.Stream)
						if err != nil {
							return nil, err
						}
						m.Unsup = ub
					}
				}
				it.Micros[a] = m
			}
			st, err := s.tr.TrainIteration(it)
			if err != nil {
				return nil, fmt.Errorf("PPO iteration %d: %w", s.tr.steps, err)
			}
			for k, v := range st.means() {
				sum[k] += v
			}
			tokens += st.TrainTokens
			last = st
			n++
		}
	}
	trainSecs := time.Since(start).Seconds()
	var g GenStats
	// Sums over the ranks: score, answer length and kept rows; KL and
	// batches with experience; tokens generated, rows dropped, batches
	// skipped; graded and right answers; reward sequences truncated and
	// unscorable; training tokens.
	tot := make([]float64, 13)
	for _, b := range s.round.pending {
		g.add(b.Gen)
		for i := range b.Kept {
			tot[0] += float64(b.RawScores[i])
			tot[1] += float64(b.AnswerLens[i])
		}
		tot[2] += float64(len(b.Kept))
		tot[3] += KL(b.Exp.LogProbs, b.Exp.RefLogProbs, b.Exp.Mask, b.Exp.Shape)
		tot[4]++
	}
	tot[5], tot[6], tot[7] = float64(g.Tokens), float64(g.Dropped), float64(s.round.skipped)
	tot[8], tot[9] = float64(s.round.graded), float64(s.round.right)
	tot[10], tot[11], tot[12] = float64(g.RewardTruncated), float64(g.RewardUnscorable), float64(tokens)
	if err := s.g.sum(tot); err != nil {
		return nil, err
	}
	rec := map[string]float64{"generation_seconds": g.GenerateSeconds, "experience_seconds": g.ForwardSeconds,
		"generated_tokens": tot[5], "skipped_batches": tot[7], "dropped_rows": tot[6]}
	if g.GenerateSeconds > 0 {
		// Every rank's tokens over this rank's decoding time.
		rec["generation_tokens_per_sec"] = tot[5] / g.GenerateSeconds
	}
	if rows := tot[2]; rows > 0 {
		mean := tot[0] / rows
		rec["reward_score"] = mean
		rec["reward_score_ema"] = s.scoreEMA.Update(mean)
		rec["answer_len"] = tot[1] / rows
		rec["kl"] = tot[3] / tot[4]
	}
	if tot[8] > 0 {
		rec["answer_accuracy"] = tot[9] / tot[8]
	}
	if tot[10] > 0 {
		rec["reward_truncated"] = tot[10]
	}
	if tot[11] > 0 {
		rec["reward_unscorable"] = tot[11]
	}
	if n > 0 {
		for k, v := range sum {
			rec[k] = v / float64(n)
		}
		if s.d.Unsup == nil {
			delete(rec, "unsup_loss")
			delete(rec, "unsup_grad_norm")
		}
		rec["actor_lr"], rec["critic_lr"] = last.ActorLR, last.CriticLR
		rec["training_seconds"] = trainSecs
		rec["training_tokens_per_sec"] = tot[12] / trainSecs
		rec["ppo_steps"] = float64(n)
	}
	s.timing.GenerationSeconds += g.GenerateSeconds
	s.timing.ExperienceSeconds += g.ForwardSeconds
	s.timing.GeneratedTokens += g.Tokens
	s.timing.TrainingSeconds += trainSecs
	s.timing.TrainingTokens += tokens
	s.round = roundState{pending: s.round.pending[:0], local: s.round.local[:0]}
	return rec, nil
}

// scaleScores applies score scaling to the round's scores in the order of
// its generation batches over all ranks (batch m = i·ranks + r is rank
// r's i-th): the running moments fold each batch in, then scale it, as one
// process generating them one after the other does (RunningMoments.Scale).
// Every rank folds every batch, so the moments stay the same everywhere.
func (s *stage) scaleScores(batches int) error {
	G, R := s.cfg.GenBatch, s.g.size()
	all := make([]float64, batches*(G+1)) // per batch: rows kept, then their scores
	mine := map[int]*Batch{}
	for k, b := range s.round.pending {
		m := s.round.local[k]*R + s.g.rank()
		if m >= batches {
			return fmt.Errorf("ppo: generation batch %d of a round of %d", m, batches)
		}
		mine[m] = b
		all[m*(G+1)] = float64(len(b.Kept))
		for i, x := range b.RawScores {
			all[m*(G+1)+1+i] = float64(x)
		}
	}
	if err := s.g.gather(all); err != nil {
		return err
	}
	for m := range batches {
		rows := int(all[m*(G+1)])
		scores := make([]float32, rows)
		for i := range scores {
			scores[i] = float32(all[m*(G+1)+1+i])
		}
		s.tr.moments.Scale(scores, s.cfg.ScoreNorm)
		if b := mine[m]; b != nil {
			copy(b.Exp.Scores, scores)
		}
	}
	return nil
}

// Sharded implements the loop's sharded state: under ZeRO 1-3 each rank
// checkpoints its own part.
func (s *stage) Sharded() bool { return s.tr.Sharded() }

// Evaluate: step 3 has no evaluation set.
func (s *stage) Evaluate() (*train.Eval, error) { return nil, nil }

// stageState is the host state of a step-3 checkpoint.
type stageState struct {
	Trainer  TrainerState `json:"trainer"`
	ScoreEMA ScoreEMA     `json:"score_ema"`
}

func (s *stage) State() (map[string]kernels.Buffer, any) {
	return s.tr.StateBuffers(), stageState{Trainer: s.tr.State(), ScoreEMA: s.scoreEMA}
}

func (s *stage) Restore(b json.RawMessage) error {
	var st stageState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	s.tr.Restore(st.Trainer)
	s.scoreEMA = st.ScoreEMA
	return nil
}

// unsupBatch returns the unsupervised micro-batch of PPO iteration iter
// (0-based): blocks [iter·n, (iter+1)·n) of the endless sequence of seeded
// permutations of the blocks, so the position follows from the iteration
// alone (and a resumed run picks up where it stopped).
func (s *stage) unsupBatch(iter int) (*UnsupBatch, error) {
	n, N := s.cfg.TrainBatch, len(s.d.Unsup)
	exs := make([]data.Example, n)
	var perm []int
	pass := -1
	for i := range n {
		g := iter*n + i
		if p := g / N; p != pass {
			pass = p
			perm = rand.New(rand.NewPCG(s.cfg.Seed, uint64(p)+0x5eed)).Perm(N)
		}
		exs[i] = s.d.Unsup[perm[g%N]]
	}
	b, err := s.unsupCol.Blocks(exs)
	if err != nil {
		return nil, err
	}
	return &UnsupBatch{B: b.B, T: b.T, IDs: b.IDs, Mask: b.Mask, Targets: model.ShiftLabels(b.Labels, b.B, b.T)}, nil
}
