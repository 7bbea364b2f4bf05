package ppo

import (
	"errors"
	"fmt"
	"time"

	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/train"
)

// ErrNoAnswers is returned by GenerateExperience when every row of the
// batch was dropped for having at most one answer token (DeepSpeed-Chat
// skips such a batch). Test it with errors.Is; the caller skips the batch.
var ErrNoAnswers = errors.New("ppo: every generated answer has at most one token; batch skipped")

// Models are the four models of step 3.
type Models struct {
	// Actor is the trained policy behind the hybrid engine. ActorLoRA is the
	// engine's adapter set (nil without LoRA), trained with the actor.
	Actor     *hybridengine.Engine
	ActorLoRA *lora.LoRA
	// Ref is the frozen reference (the SFT model): no gradients, never
	// changed.
	Ref *model.Model
	// Critic is the trained value model (a value head; initialised from the
	// reward model). CriticLoRA, when not nil, must already be attached to
	// Critic with SetAdapter.
	Critic     *model.Model
	CriticLoRA *lora.LoRA
	// Reward is the frozen reward model (a value head): no gradients, never
	// changed.
	Reward *model.Model
}

// Options configure a Trainer beyond the PPO constants of Config.
type Options struct {
	// ActorWeightDecay and CriticWeightDecay are AdamW's decoupled weight
	// decay (DeepSpeed-Chat's actor_weight_decay, critic_weight_decay).
	ActorWeightDecay, CriticWeightDecay float64
	// ActorLoRALR and CriticLoRALR are the adapters' learning rates
	// (actor_lora_learning_rate, critic_lora_learning_rate).
	ActorLoRALR, CriticLoRALR float64
	// OnlyOptimizeLoRA trains only the adapters (and the critic's value
	// head) when LoRA is used.
	OnlyOptimizeLoRA bool
	// ActorSchedule and CriticSchedule scale the learning rates by optimizer
	// step (nil: constant 1).
	ActorSchedule, CriticSchedule optim.Schedule
	// MaxGradNorm clips each model's gradients to this global norm before
	// its step (DeepSpeed's gradient_clipping, 1.0 in DeepSpeed-Chat); <= 0
	// disables clipping.
	MaxGradNorm float64
	// ActorDropout and CriticDropout apply the models' configured dropout in
	// the training forwards. DeepSpeed-Chat keeps dropout on unless
	// --disable-actor-dropout / --disable-critic-dropout; the zero value
	// here is off, so a CLI sets them to true by default.
	ActorDropout, CriticDropout bool
	// CriticCheckpointing recomputes the critic's layers in its backward
	// pass (--critic-gradient-checkpointing). The actor's is the engine's
	// Options.GradientCheckpointing.
	CriticCheckpointing bool
	// EnableEMA keeps an exponential moving average of the actor's weights
	// (--enable-ema), updated after every actor step with Config.EMABeta.
	EnableEMA bool
	// Seed keys the dropout masks of the training forwards.
	Seed uint64
	// RewardSuffix are the tokens the reward model saw after every response
	// in step 2 (the tokenized end text, "<|endoftext|>" in DeepSpeed-Chat's
	// data). When set, a sequence is scored the way it was trained: prompt +
	// answer without its EOS + RewardSuffix, read at the suffix's last token.
	// Without it the score is read at the last real token (EOS included).
	RewardSuffix []int32
	// Score, when set, replaces the reward model: a rule-based reward of a
	// prompt and its answer (real tokens only; the answer ends with EOS when
	// the actor emitted one), as reward functions in Hugging Face TRL.
	Score func(prompt, answer []int32) float32
}

// Batch is one batch of experience: Exp in log-prob coordinates and the
// sequences the training forwards run on.
type Batch struct {
	Exp Experience[float32]
	// S = Exp.T + 1 is the sequence length; Seq and Attn are [B,S]: the
	// left-padded prompt, the answer, right padding.
	S         int
	Seq, Attn []int32
	// AnswerLens[b] is row b's number of generated tokens (EOS included).
	AnswerLens []int
	// RawScores are the reward model's scores, [B]; Exp.Scores are the
	// same unless Config.ScoreScaling rescaled them.
	RawScores []float32
	// Kept are the indices of the kept rows in the prompt batch.
	Kept []int
	// Gen measures the generation and the gradient-free forwards.
	Gen GenStats
	// Rollout is the engine's output for the whole prompt batch, dropped
	// rows included (for --print-answers and tests).
	Rollout *hybridengine.Rollout
}

// Slice returns rows [lo, hi) of the batch as a batch of its own (a
// micro-batch for TrainStep; the slices are shared, not copied). Gen and
// Rollout are carried over whole; Kept maps the rows back to the rollout.
func (b *Batch) Slice(lo, hi int) *Batch {
	e, S := b.Exp, b.S
	if lo < 0 || hi > e.B || lo >= hi {
		panic(fmt.Sprintf("ppo: rows [%d,%d) of a batch of %d", lo, hi, e.B))
	}
	T := e.T
	out := &Batch{
		Exp: Experience[float32]{
			Shape:       Shape{B: hi - lo, T: T, Start: e.Start},
			LogProbs:    e.LogProbs[lo*T : hi*T],
			RefLogProbs: e.RefLogProbs[lo*T : hi*T],
			Values:      e.Values[lo*T : hi*T],
			Scores:      e.Scores[lo:hi],
			Mask:        e.Mask[lo*T : hi*T],
		},
		S: S, Seq: b.Seq[lo*S : hi*S], Attn: b.Attn[lo*S : hi*S],
		AnswerLens: b.AnswerLens[lo:hi], Kept: b.Kept[lo:hi],
		Gen: b.Gen, Rollout: b.Rollout,
	}
	if b.RawScores != nil {
		out.RawScores = b.RawScores[lo:hi]
	}
	return out
}

// GenStats measure GenerateExperience.
type GenStats struct {
	Rows, Dropped int // rows generated; rows dropped (≤ 1 answer token)
	// Tokens is the number of tokens generated (all rows);
	// GenerateSeconds the decoding time (mode switch included);
	// ForwardSeconds the four gradient-free forwards.
	Tokens                         int
	GenerateSeconds, SwitchSeconds float64
	ForwardSeconds                 float64
}

// TokensPerSecond is the generation throughput.
func (g GenStats) TokensPerSecond() float64 {
	if g.GenerateSeconds <= 0 {
		return 0
	}
	return float64(g.Tokens) / g.GenerateSeconds
}

// StepStats are what one TrainStep logs (REFERENCE.md §5).
type StepStats struct {
	ActorLoss, CriticLoss, UnsupLoss float64
	ActorClipFrac, CriticClipFrac    float64
	ActorGradNorm, CriticGradNorm    float64
	// RewardScore is the mean reward-model score of the batch and
	// RewardScoreEMA its moving average over steps (Config.ScoreEMAAlpha).
	RewardScore, RewardScoreEMA float64
	// KL is the mean of logp − logp_ref over the counted answer tokens at
	// generation time.
	KL float64
	// AnswerLen is the mean answer length of the kept rows.
	AnswerLen float64
	// Generation: copied from the batch's GenStats.
	GenerateSeconds, GenerateTokensPerSecond float64
	// TrainSeconds is this step's training time (actor, critic and
	// unsupervised passes); TrainTokensPerSecond counts the B·S sequence
	// tokens of the experience batch (plus the unsupervised batch's) per
	// second.
	TrainSeconds, TrainTokensPerSecond float64
}

// UnsupBatch is a batch of the unsupervised dataset for mixture training:
// IDs and Mask [B,T], Targets as model.Batch's (nil: model.ShiftLabels of
// IDs, with IgnoreIndex at padding).
type UnsupBatch struct {
	B, T               int
	IDs, Mask, Targets []int32
}

// Trainer runs DeepSpeed-Chat's step 3 (train_rlhf) on four models.
type Trainer struct {
	cfg  Config
	opts Options
	m    Models

	actorTr, criticTr   train.Trainable
	actorOpt, criticOpt *optim.AdamW
	emaFlat, emaLoRA    kernels.Buffer
	scoreEMA            ScoreEMA
	moments             RunningMoments // of the raw scores, with Config.ScoreScaling
	steps               uint64         // TrainStep calls, keys the dropout seeds
}

// NewTrainer checks the models' compatibility and builds the two
// optimizers (train.ModelTrainable's groups, DeepSpeed-Chat's AdamW). The
// engine is put in Train mode.
func NewTrainer(cfg Config, opts Options, m Models) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m.Actor == nil || m.Ref == nil || m.Critic == nil || m.Reward == nil {
		return nil, fmt.Errorf("ppo: trainer needs actor, reference, critic and reward models")
	}
	m.Actor.Train()
	actor, err := m.Actor.Model()
	if err != nil {
		return nil, err
	}
	if !m.Critic.HasValueHead() || !m.Reward.HasValueHead() {
		return nil, fmt.Errorf("ppo: the critic and the reward model need a value head")
	}
	v := actor.Config.VocabSize
	for _, x := range []struct {
		name string
		m    *model.Model
	}{{"reference", m.Ref}, {"critic", m.Critic}, {"reward", m.Reward}} {
		if x.m.Config.VocabSize != v {
			return nil, fmt.Errorf("ppo: %s model has vocabulary %d, the actor %d", x.name, x.m.Config.VocabSize, v)
		}
	}
	if m.Ref.NumParams() != actor.NumParams() {
		return nil, fmt.Errorf("ppo: reference model has %d parameters, the actor %d (want the same architecture)", m.Ref.NumParams(), actor.NumParams())
	}
	t := &Trainer{cfg: cfg, opts: opts, m: m, scoreEMA: ScoreEMA{Alpha: cfg.ScoreEMAAlpha}}
	t.actorTr = train.ModelTrainable(actor, train.ParamOptions{LR: cfg.ActorLR, WeightDecay: opts.ActorWeightDecay,
		LoRA: m.ActorLoRA, LoRALR: opts.ActorLoRALR, OnlyLoRA: opts.OnlyOptimizeLoRA})
	t.criticTr = train.ModelTrainable(m.Critic, train.ParamOptions{LR: cfg.CriticLR, WeightDecay: opts.CriticWeightDecay,
		LoRA: m.CriticLoRA, LoRALR: opts.CriticLoRALR, OnlyLoRA: opts.OnlyOptimizeLoRA})
	if t.actorOpt, err = optim.NewAdamW(actor.Dev, t.actorTr.Groups, optim.DefaultAdamW); err != nil {
		return nil, err
	}
	if t.criticOpt, err = optim.NewAdamW(m.Critic.Dev, t.criticTr.Groups, optim.DefaultAdamW); err != nil {
		return nil, err
	}
	if opts.EnableEMA {
		d := actor.Dev
		t.emaFlat = d.Alloc(kernels.F32, actor.NumParams())
		d.Copy(t.emaFlat, actor.Params.Flat)
		if m.ActorLoRA != nil {
			t.emaLoRA = d.Alloc(kernels.F32, m.ActorLoRA.NumParams())
			d.Copy(t.emaLoRA, m.ActorLoRA.Params)
		}
	}
	return t, nil
}

// Config returns the PPO constants.
func (t *Trainer) Config() Config { return t.cfg }

// Optimizers returns the actor's and the critic's AdamW (checkpoints).
func (t *Trainer) Optimizers() (actor, critic *optim.AdamW) { return t.actorOpt, t.criticOpt }

// EMA returns the actor EMA's parameters (the model's flat layout) and its
// LoRA parameters (nil without LoRA); both nil unless Options.EnableEMA.
// actor.WithParams(flat) views the EMA model; with LoRA, fuse the EMA
// adapters into a copy before saving.
func (t *Trainer) EMA() (flat, loraParams kernels.Buffer) { return t.emaFlat, t.emaLoRA }

// GenerateExperience is DeepSpeed-Chat's generate_experience: the actor
// generates answers (Generate mode), rows with at most one answer token are
// dropped (ErrNoAnswers when none is left), then gradient-free forwards on
// the full sequences give the actor's log-probs, the reference's log-probs,
// the critic's values[:, :-1] and the reward model's score, the value at
// each sequence's last real token. The actor's log-probs are recomputed
// with the engine's InferenceModel (Generate mode: fused LoRA, no dropout),
// so they equal the rollout's generation log-probs up to rounding; the
// engine is left in Train mode.
func (t *Trainer) GenerateExperience(p hybridengine.Prompts) (*Batch, error) {
	e := t.m.Actor
	ro, err := e.Generate(p)
	if err != nil {
		e.Train()
		return nil, err
	}
	gs := GenStats{Rows: ro.B, Tokens: ro.Stats.Tokens, GenerateSeconds: ro.Stats.Seconds + ro.Stats.SwitchSeconds,
		SwitchSeconds: ro.Stats.SwitchSeconds}
	var kept []int
	for b, n := range ro.AnswerLens {
		if n > 1 {
			kept = append(kept, b)
		}
	}
	gs.Dropped = ro.B - len(kept)
	if len(kept) == 0 {
		e.Train()
		return nil, ErrNoAnswers
	}
	B, S, P := len(kept), ro.T, ro.PromptLen
	bt := &Batch{S: S, Seq: make([]int32, 0, B*S), Attn: make([]int32, 0, B*S), Kept: kept, Rollout: ro}
	for _, b := range kept {
		bt.Seq = append(bt.Seq, ro.Seq[b*S:(b+1)*S]...)
		bt.Attn = append(bt.Attn, ro.Mask[b*S:(b+1)*S]...)
		bt.AnswerLens = append(bt.AnswerLens, ro.AnswerLens[b])
	}
	t0 := time.Now()
	targets := model.ShiftLabels(bt.Seq, B, S)
	inf, err := e.InferenceModel()
	if err != nil {
		e.Train()
		return nil, err
	}
	lp, err := t.logProbs(inf, bt.Seq, bt.Attn, targets, B, S)
	e.Train()
	if err != nil {
		return nil, fmt.Errorf("ppo: actor forward: %w", err)
	}
	ref, err := t.logProbs(t.m.Ref, bt.Seq, bt.Attn, targets, B, S)
	if err != nil {
		return nil, fmt.Errorf("ppo: reference forward: %w", err)
	}
	cv, err := t.values(t.m.Critic, bt.Seq, bt.Attn, B, S)
	if err != nil {
		return nil, fmt.Errorf("ppo: critic forward: %w", err)
	}
	scores, err := t.rewardScores(bt.Seq, bt.Attn, B, S, P)
	if err != nil {
		return nil, fmt.Errorf("ppo: reward forward: %w", err)
	}
	bt.RawScores = append([]float32(nil), scores...)
	if t.cfg.ScoreScaling {
		t.moments.Scale(scores, t.cfg.ScoreNorm)
	}
	gs.ForwardSeconds = time.Since(t0).Seconds()
	bt.Gen = gs
	bt.Exp = Experience[float32]{
		Shape:       Shape{B: B, T: S - 1, Start: P - 1},
		LogProbs:    lp,
		RefLogProbs: ref,
		Values:      DropLast(cv, B, S),
		Scores:      scores,
		Mask:        ActionMask(bt.Attn, B, S),
	}
	return bt, nil
}

// logProbs runs an evaluation forward of m and returns logp [B,S−1].
func (t *Trainer) logProbs(m *model.Model, seq, attn, targets []int32, b, s int) ([]float32, error) {
	a := m.NewActs(b, s, model.ActsOptions{})
	if err := m.Forward(a, model.Batch{IDs: seq, Mask: attn, Targets: targets}); err != nil {
		return nil, err
	}
	l, err := m.Losses(a)
	if err != nil {
		return nil, err
	}
	return LogProbs(l, b, s), nil
}

// values runs an evaluation forward of a value model and returns its values
// [B,S].
func (t *Trainer) values(m *model.Model, seq, attn []int32, b, s int) ([]float32, error) {
	a := m.NewActs(b, s, model.ActsOptions{NoLogits: true})
	if err := m.Forward(a, model.Batch{IDs: seq, Mask: attn}); err != nil {
		return nil, err
	}
	return m.Values(a)
}

// TrainStep is one micro-batch of DeepSpeed-Chat's train_rlhf (and, with
// unsup not nil, train_unsupervised), in REFERENCE.md §5's order: the
// advantages and returns of Estimate; the actor's forward, clipped
// surrogate loss, backward, clipping and AdamW step, then the EMA update;
// the critic's forward, clipped value loss, backward, clipping and step;
// then, with an unsupervised batch, an actor step on UnsupCoef × its LM
// loss (followed by another EMA update). Callers run it Config.PPOEpochs
// times per batch of experience.
func (t *Trainer) TrainStep(bt *Batch, unsup *UnsupBatch) (StepStats, error) {
	start := time.Now()
	t.steps++
	exp, s := bt.Exp, bt.Exp.Shape
	B, S := s.B, bt.S
	if S != s.T+1 || len(bt.Seq) != B*S || len(bt.Attn) != B*S {
		return StepStats{}, fmt.Errorf("ppo: batch of %d×%d sequences for experience shape %+v", len(bt.Seq), S, s)
	}
	est := Estimate(t.cfg, exp)
	st := StepStats{
		KL:                      KL(exp.LogProbs, exp.RefLogProbs, exp.Mask, s),
		GenerateSeconds:         bt.Gen.GenerateSeconds,
		GenerateTokensPerSecond: bt.Gen.TokensPerSecond(),
	}
	raw := bt.RawScores
	if raw == nil {
		raw = exp.Scores
	}
	for _, v := range raw {
		st.RewardScore += float64(v)
	}
	st.RewardScore /= float64(B)
	st.RewardScoreEMA = t.scoreEMA.Update(st.RewardScore)
	for _, n := range bt.AnswerLens {
		st.AnswerLen += float64(n)
	}
	if len(bt.AnswerLens) > 0 {
		st.AnswerLen /= float64(len(bt.AnswerLens))
	}
	targets := model.ShiftLabels(bt.Seq, B, S)
	tokens := B * S

	// Actor.
	e := t.m.Actor
	e.Train()
	actor, err := e.Model()
	if err != nil {
		return st, err
	}
	a, err := e.TrainActs(B, S, model.ActsOptions{Dropout: t.opts.ActorDropout})
	if err != nil {
		return st, err
	}
	if err := actor.Forward(a, model.Batch{IDs: bt.Seq, Mask: bt.Attn, Targets: targets, Seed: t.seed(1)}); err != nil {
		return st, fmt.Errorf("ppo: actor forward: %w", err)
	}
	l, err := actor.Losses(a)
	if err != nil {
		return st, err
	}
	dlogp := make([]float32, s.B*s.T)
	st.ActorLoss, st.ActorClipFrac = ActorLoss(dlogp, LogProbs(l, B, S), exp.LogProbs, est.Advantages, exp.Mask, s, t.cfg.ClipRange)
	zero(actor.Dev, t.actorTr.Grads)
	if err := actor.Backward(a, ActorGrad(dlogp, s.B, s.T)); err != nil {
		return st, fmt.Errorf("ppo: actor backward: %w", err)
	}
	a = nil
	if st.ActorGradNorm, err = t.actorStep(actor); err != nil {
		return st, err
	}

	// Critic.
	c := t.m.Critic
	ca := c.NewActs(B, S, model.ActsOptions{Train: true, Dropout: t.opts.CriticDropout, Checkpoint: t.opts.CriticCheckpointing, NoLogits: true})
	if err := c.Forward(ca, model.Batch{IDs: bt.Seq, Mask: bt.Attn, Seed: t.seed(2)}); err != nil {
		return st, fmt.Errorf("ppo: critic forward: %w", err)
	}
	v, err := c.Values(ca)
	if err != nil {
		return st, err
	}
	dv := make([]float32, s.B*s.T)
	st.CriticLoss, st.CriticClipFrac = CriticLoss(dv, DropLast(v, B, S), est.OldValues, est.Returns, exp.Mask, s, t.cfg.ClipRangeValue)
	zero(c.Dev, t.criticTr.Grads)
	if err := c.Backward(ca, CriticGrad(dv, s.B, s.T)); err != nil {
		return st, fmt.Errorf("ppo: critic backward: %w", err)
	}
	ca = nil
	norm := optim.GradNorm(c.Dev, t.criticTr.Grads...)
	st.CriticGradNorm = norm
	t.criticOpt.Step(sched(t.opts.CriticSchedule, t.criticOpt.Steps()), float32(optim.ClipScale(norm, t.opts.MaxGradNorm)))
	if err := c.Dev.Sync(); err != nil {
		return st, fmt.Errorf("ppo: critic step: %w", err)
	}

	// Mixture training.
	if unsup != nil {
		loss, err := t.unsupStep(actor, unsup)
		if err != nil {
			return st, err
		}
		st.UnsupLoss = loss
		tokens += unsup.B * unsup.T
	}
	st.TrainSeconds = time.Since(start).Seconds()
	if st.TrainSeconds > 0 {
		st.TrainTokensPerSecond = float64(tokens) / st.TrainSeconds
	}
	return st, nil
}

// unsupStep is DeepSpeed-Chat's train_unsupervised on one batch: the actor's
// mean LM loss, backward of UnsupCoef × loss, clipping, step, EMA. It
// returns the unscaled loss.
func (t *Trainer) unsupStep(actor *model.Model, u *UnsupBatch) (float64, error) {
	if len(u.IDs) != u.B*u.T || (u.Mask != nil && len(u.Mask) != u.B*u.T) {
		return 0, fmt.Errorf("ppo: unsupervised batch of %d ids, want [%d,%d]", len(u.IDs), u.B, u.T)
	}
	targets := u.Targets
	if targets == nil {
		targets = model.ShiftLabels(u.IDs, u.B, u.T)
		if u.Mask != nil {
			for b := range u.B {
				for i := range u.T - 1 {
					if u.Mask[b*u.T+i+1] == 0 {
						targets[b*u.T+i] = model.IgnoreIndex
					}
				}
			}
		}
	}
	a, err := t.m.Actor.TrainActs(u.B, u.T, model.ActsOptions{Dropout: t.opts.ActorDropout})
	if err != nil {
		return 0, err
	}
	if err := actor.Forward(a, model.Batch{IDs: u.IDs, Mask: u.Mask, Targets: targets, Seed: t.seed(3)}); err != nil {
		return 0, fmt.Errorf("ppo: unsupervised forward: %w", err)
	}
	loss, _, err := actor.MeanLoss(a)
	if err != nil {
		return 0, err
	}
	g := actor.MeanLossGrad(a)
	for i := range g.DLosses {
		g.DLosses[i] *= float32(t.cfg.UnsupCoef)
	}
	zero(actor.Dev, t.actorTr.Grads)
	if err := actor.Backward(a, g); err != nil {
		return 0, fmt.Errorf("ppo: unsupervised backward: %w", err)
	}
	if _, err := t.actorStep(actor); err != nil {
		return 0, err
	}
	return float64(loss), nil
}

// actorStep clips the actor's gradients, steps AdamW and updates the EMA.
// It returns the gradient norm before clipping.
func (t *Trainer) actorStep(actor *model.Model) (float64, error) {
	d := actor.Dev
	norm := optim.GradNorm(d, t.actorTr.Grads...)
	t.actorOpt.Step(sched(t.opts.ActorSchedule, t.actorOpt.Steps()), float32(optim.ClipScale(norm, t.opts.MaxGradNorm)))
	if t.emaFlat != nil {
		if err := EMAUpdate(d, t.emaFlat, actor.Params.Flat, t.cfg.EMABeta); err != nil {
			return norm, err
		}
		if t.emaLoRA != nil {
			if err := EMAUpdate(d, t.emaLoRA, t.m.ActorLoRA.Params, t.cfg.EMABeta); err != nil {
				return norm, err
			}
		}
	}
	if err := d.Sync(); err != nil {
		return norm, fmt.Errorf("ppo: actor step: %w", err)
	}
	return norm, nil
}

// seed keys the dropout of one pass (site) of the current step.
func (t *Trainer) seed(site uint64) uint64 {
	return t.opts.Seed ^ (t.steps*4+site)*0x9E3779B97F4A7C15
}

func sched(s optim.Schedule, step int) float64 {
	if s == nil {
		return 1
	}
	return s(step)
}

func zero(d kernels.Device, bufs []kernels.Buffer) {
	for _, b := range bufs {
		d.Zero(b)
	}
}

// rewardScores runs the reward model over the sequences [B,S] (prompt of P
// tokens, then the answer) and returns each one's score: the value at the
// last real token, or, with Options.RewardSuffix, at the end of the
// suffix appended after the answer (its EOS removed).
func (t *Trainer) rewardScores(seq, attn []int32, B, S, P int) ([]float32, error) {
	if t.opts.Score != nil {
		scores := make([]float32, B)
		for b := range B {
			var prompt, answer []int32
			for i := range S {
				if attn[b*S+i] == 0 {
					continue
				}
				if i < P {
					prompt = append(prompt, seq[b*S+i])
				} else {
					answer = append(answer, seq[b*S+i])
				}
			}
			scores[b] = t.opts.Score(prompt, answer)
		}
		return scores, nil
	}
	rm := t.m.Reward
	suffix := t.opts.RewardSuffix
	eos := int32(rm.Config.EOSTokenID)
	S2 := S + len(suffix)
	ids, mask := make([]int32, B*S2), make([]int32, B*S2)
	lasts := make([]int, B)
	for b := range B {
		row, am := seq[b*S:(b+1)*S], attn[b*S:(b+1)*S]
		end := S // one past the last real token
		for end > P && am[end-1] == 0 {
			end--
		}
		if len(suffix) > 0 && end > P && row[end-1] == eos {
			end-- // scored as trained: the end text replaces EOS
		}
		o := b * S2
		for i := range S2 {
			ids[o+i] = int32(rm.Config.PadTokenID)
		}
		copy(ids[o:], row[:end])
		copy(mask[o:], am[:end])
		copy(ids[o+end:], suffix)
		for i := range suffix {
			mask[o+end+i] = 1
		}
		lasts[b] = end + len(suffix) - 1
	}
	v, err := t.values(rm, ids, mask, B, S2)
	if err != nil {
		return nil, err
	}
	scores := make([]float32, B)
	for b := range B {
		scores[b] = v[b*S2+lasts[b]]
	}
	return scores, nil
}

// TrainerState is the host-side state of a Trainer that a checkpoint
// records besides StateBuffers.
type TrainerState struct {
	Steps    uint64   `json:"steps"`
	ScoreEMA ScoreEMA `json:"score_ema"`
	// ScoreMoments are the running moments of score scaling.
	ScoreMoments   RunningMoments `json:"score_moments"`
	ActorOptSteps  int            `json:"actor_optimizer_steps"`
	CriticOptSteps int            `json:"critic_optimizer_steps"`
}

// StateBuffers returns, by name, the device buffers a step-3 checkpoint
// saves and restores: the actor's and the critic's trained parameters
// (with their LoRA adapters), the EMA, and both optimizers' moments. The
// frozen reference and reward models are not included.
func (t *Trainer) StateBuffers() map[string]kernels.Buffer {
	bufs := map[string]kernels.Buffer{}
	for name, b := range t.actorTr.State {
		bufs["actor."+name] = b
	}
	for name, b := range t.criticTr.State {
		bufs["critic."+name] = b
	}
	if t.emaFlat != nil {
		bufs["ema.model"] = t.emaFlat
	}
	if t.emaLoRA != nil {
		bufs["ema.lora"] = t.emaLoRA
	}
	train.OptimizerState(bufs, "actor.adam.", t.actorOpt)
	train.OptimizerState(bufs, "critic.adam.", t.criticOpt)
	return bufs
}

// State returns the host-side state for a checkpoint.
func (t *Trainer) State() TrainerState {
	return TrainerState{Steps: t.steps, ScoreEMA: t.scoreEMA, ScoreMoments: t.moments, ActorOptSteps: t.actorOpt.Steps(), CriticOptSteps: t.criticOpt.Steps()}
}

// Restore sets the host-side state from a checkpoint (after its
// StateBuffers were loaded), so the next TrainStep continues as the
// interrupted run would have.
func (t *Trainer) Restore(s TrainerState) {
	t.steps, t.scoreEMA, t.moments = s.Steps, s.ScoreEMA, s.ScoreMoments
	t.actorOpt.SetSteps(s.ActorOptSteps)
	t.criticOpt.SetSteps(s.CriticOptSteps)
}
