package ppo

import (
	"fmt"
	"math"
	"time"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/train"
)

// StepStats are what one TrainStep measures.
type StepStats struct {
	ActorLoss, CriticLoss, UnsupLoss float64
	ActorClipFrac, CriticClipFrac    float64
	// ActorGradNorm, CriticGradNorm and UnsupGradNorm (the mixture
	// step's) are the norms before clipping.
	ActorGradNorm, CriticGradNorm, UnsupGradNorm float64
	// ActorLR and CriticLR are the learning rates of the step (the first
	// parameter group's).
	ActorLR, CriticLR float64
	// TrainSeconds is this step's training time (actor, critic and
	// unsupervised passes); TrainTokens counts the B·S sequence tokens of
	// the experience micro-batch (plus the unsupervised batch's).
	TrainSeconds float64
	TrainTokens  int
}

// means are the metrics of a round's PPO iterations, averaged: the
// record names and each step's values.
func (s StepStats) means() map[string]float64 {
	return map[string]float64{"actor_loss": s.ActorLoss, "critic_loss": s.CriticLoss, "unsup_loss": s.UnsupLoss,
		"actor_clipfrac": s.ActorClipFrac, "critic_clipfrac": s.CriticClipFrac,
		"actor_grad_norm": s.ActorGradNorm, "critic_grad_norm": s.CriticGradNorm, "unsup_grad_norm": s.UnsupGradNorm}
}

// UnsupBatch is a batch of the unsupervised dataset for mixture training:
// IDs and Mask [B,T], Targets as model.Batch's (nil: model.ShiftLabels of
// IDs, with IgnoreIndex at padding).
type UnsupBatch struct {
	B, T               int
	IDs, Mask, Targets []int32
}

// TrainStep is one PPO iteration of DeepSpeed-Chat's train_rlhf on a
// micro-batch (and, with unsup not nil, train_unsupervised): the
// advantages and returns of Estimate; the actor's forward, clipped
// surrogate loss and backward; the critic's forward, clipped value loss and
// backward; then — only when both losses and both gradient norms are
// finite — the actor's clipped AdamW step with the EMA update and the
// critic's step. With an unsupervised batch, an actor step on UnsupCoef ×
// its LM loss follows (checked the same way, then another EMA update).
// Both models' schedules are at this iteration's value. A non-finite loss
// or norm returns a *train.NonFiniteError with no weight changed by the
// failing update. Callers run it Config.PPOEpochs times per batch of
// experience.
func (t *Trainer) TrainStep(bt *Batch, unsup *UnsupBatch) (StepStats, error) {
	start := time.Now()
	iter := int(t.steps)
	t.steps++
	exp, s := bt.Exp, bt.Exp.Shape
	B, S := s.B, bt.S
	if S != s.T+1 || len(bt.Seq) != B*S || len(bt.Attn) != B*S {
		return StepStats{}, fmt.Errorf("ppo: batch of %d×%d sequences for experience shape %+v", len(bt.Seq), S, s)
	}
	est := Estimate(t.cfg, exp)
	var st StepStats
	targets := model.ShiftLabels(bt.Seq, B, S)
	st.TrainTokens = B * S

	// Actor: forward, loss, backward.
	e := t.m.Actor
	e.Train()
	actor, err := e.Model()
	if err != nil {
		return st, err
	}
	a, err := t.trainActs(siteActorTrain, B, S)
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
	if err := actor.Backward(a, ActorGrad(dlogp, s.B, s.T)); err != nil {
		return st, fmt.Errorf("ppo: actor backward: %w", err)
	}

	// Critic: forward, loss, backward.
	c := t.m.Critic
	ca, err := t.acts.get(siteCriticTrain, c, B, S, t.opts.siteActs(siteCriticTrain, false))
	if err != nil {
		return st, fmt.Errorf("ppo: critic activations: %w", err)
	}
	if err := c.Forward(ca, model.Batch{IDs: bt.Seq, Mask: bt.Attn, Seed: t.seed(2)}); err != nil {
		return st, fmt.Errorf("ppo: critic forward: %w", err)
	}
	v, err := c.Values(ca)
	if err != nil {
		return st, err
	}
	dv := make([]float32, s.B*s.T)
	st.CriticLoss, st.CriticClipFrac = CriticLoss(dv, DropLast(v, B, S), est.OldValues, est.Returns, exp.Mask, s, t.cfg.ClipRangeValue)
	if err := c.Backward(ca, CriticGrad(dv, s.B, s.T)); err != nil {
		return st, fmt.Errorf("ppo: critic backward: %w", err)
	}

	// Both updates, once everything is known to be finite.
	if err := finite("actor loss", st.ActorLoss); err != nil {
		return st, err
	}
	if err := finite("critic loss", st.CriticLoss); err != nil {
		return st, err
	}
	if st.ActorGradNorm, err = t.actorOpt.Norm(1); err != nil {
		return st, named(err, "actor gradient norm")
	}
	if st.CriticGradNorm, err = t.criticOpt.Norm(1); err != nil {
		return st, named(err, "critic gradient norm")
	}
	u, err := t.actorOpt.Apply(iter, 1, st.ActorGradNorm)
	if err != nil {
		return st, err
	}
	st.ActorLR = u.LR
	if err := t.updateEMA(actor); err != nil {
		return st, err
	}
	if u, err = t.criticOpt.Apply(iter, 1, st.CriticGradNorm); err != nil {
		return st, err
	}
	st.CriticLR = u.LR

	// Mixture training.
	if unsup != nil {
		loss, norm, err := t.unsupStep(actor, unsup, iter)
		st.UnsupLoss, st.UnsupGradNorm = loss, norm
		if err != nil {
			return st, err
		}
		st.TrainTokens += unsup.B * unsup.T
	}
	st.TrainSeconds = time.Since(start).Seconds()
	return st, nil
}

// unsupStep is DeepSpeed-Chat's train_unsupervised on one batch: the actor's
// mean LM loss, backward of UnsupCoef × loss, the finite check, clipping,
// the step at schedule step iter, EMA. It returns the unscaled loss and the
// gradient norm.
func (t *Trainer) unsupStep(actor *model.Model, u *UnsupBatch, iter int) (loss, norm float64, err error) {
	if len(u.IDs) != u.B*u.T || (u.Mask != nil && len(u.Mask) != u.B*u.T) {
		return 0, 0, fmt.Errorf("ppo: unsupervised batch of %d ids, want [%d,%d]", len(u.IDs), u.B, u.T)
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
	// The PPO pass is done with its activations: the mixture pass reuses
	// them (grown to the larger shape) instead of holding a second set.
	a, err := t.trainActs(siteActorTrain, u.B, u.T)
	if err != nil {
		return 0, 0, err
	}
	if err := actor.Forward(a, model.Batch{IDs: u.IDs, Mask: u.Mask, Targets: targets, Seed: t.seed(3)}); err != nil {
		return 0, 0, fmt.Errorf("ppo: unsupervised forward: %w", err)
	}
	l32, _, err := actor.MeanLoss(a)
	if err != nil {
		return 0, 0, err
	}
	loss = float64(l32)
	if err := finite("unsupervised loss", loss); err != nil {
		return loss, 0, err
	}
	g := actor.MeanLossGrad(a)
	for i := range g.DLosses {
		g.DLosses[i] *= float32(t.cfg.UnsupCoef)
	}
	if err := actor.Backward(a, g); err != nil {
		return 0, 0, fmt.Errorf("ppo: unsupervised backward: %w", err)
	}
	u2, err := t.actorOpt.Step(iter, 1)
	if err != nil {
		return loss, u2.GradNorm, named(err, "actor gradient norm (unsupervised)")
	}
	return loss, u2.GradNorm, t.updateEMA(actor)
}

// updateEMA folds the actor's trained weights into the EMA.
func (t *Trainer) updateEMA(actor *model.Model) error {
	d := actor.Dev
	if t.emaFlat != nil {
		if err := EMAUpdate(d, t.emaFlat, actor.Params.Flat, t.cfg.EMABeta); err != nil {
			return err
		}
	}
	if t.emaLoRA != nil {
		if err := EMAUpdate(d, t.emaLoRA, t.m.ActorLoRA.Params, t.cfg.EMABeta); err != nil {
			return err
		}
	}
	return nil
}

// seed keys the dropout of one pass (site) of the current step.
func (t *Trainer) seed(site uint64) uint64 {
	return t.opts.Seed ^ (t.steps*4+site)*0x9E3779B97F4A7C15
}

// finite returns a *train.NonFiniteError for a NaN or Inf value.
func finite(what string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return &train.NonFiniteError{What: what}
	}
	return nil
}

// named renames the quantity of a *train.NonFiniteError.
func named(err error, what string) error {
	if nf, ok := err.(*train.NonFiniteError); ok {
		nf.What = what
	}
	return err
}

// Passes whose activation buffers are kept between calls.
const (
	siteActorLogp = iota
	siteRefLogp
	siteCriticValues
	siteActorTrain
	siteCriticTrain
	numSites
)

// siteActs are the activation options of a pass; actorCheckpointing is the
// engine's gradient checkpointing (TrainActsOptions adds it to the actor's
// training pass).
// The gradient-free passes of the experience keep no layer's activations
// for a backward pass: Checkpoint makes one layer's buffers serve every
// layer (the same computation, a fraction of the memory).
func (o Options) siteActs(site int, actorCheckpointing bool) model.ActsOptions {
	switch site {
	case siteCriticValues:
		return model.ActsOptions{Checkpoint: true, NoLogits: true}
	case siteActorTrain:
		return model.ActsOptions{Train: true, Dropout: o.ActorDropout, Checkpoint: actorCheckpointing}
	case siteCriticTrain:
		return model.ActsOptions{Train: true, Dropout: o.CriticDropout, Checkpoint: o.CriticCheckpointing, NoLogits: true}
	}
	return model.ActsOptions{Checkpoint: true} // the actor's and the reference's log-probs
}

// SiteActs is one set of activation buffers that a Trainer keeps between
// steps: the model it belongs to ("actor", "reference" or "critic") and
// its largest shape.
type SiteActs struct {
	Model string
	model.ActsShape
}

// ActsPlan lists the activation buffers a Trainer keeps once its batches
// have reached their largest shapes: generation batches of genBatch
// prompts, training micro-batches of trainBatch rows, sequences of up to
// seqLen tokens (prompt + answer), mixture-training blocks of unsupLen
// tokens (0 without), with actorCheckpointing the engine's gradient
// checkpointing. The trainer allocates exactly these (each pass reuses its
// buffers, grown to the largest shape it has seen); a memory planner reads
// them. The reward model's buffers (reward.ScoreActs) come and go with
// each batch.
func (o Options) ActsPlan(actorCheckpointing bool, genBatch, trainBatch, seqLen, unsupLen int) []SiteActs {
	shape := func(site, b, t int) model.ActsShape {
		return model.ActsShape{B: b, T: t, Opts: o.siteActs(site, actorCheckpointing)}
	}
	// A micro-batch has at most a generation batch's rows; a mixture
	// batch has trainBatch blocks.
	rows, actorRows, actorLen := min(trainBatch, genBatch), min(trainBatch, genBatch), seqLen
	if unsupLen > 0 {
		actorRows, actorLen = trainBatch, max(seqLen, unsupLen)
	}
	return []SiteActs{
		{"actor", shape(siteActorLogp, genBatch, seqLen)},
		{"reference", shape(siteRefLogp, genBatch, seqLen)},
		{"critic", shape(siteCriticValues, genBatch, seqLen)},
		{"actor", shape(siteActorTrain, actorRows, actorLen)},
		{"critic", shape(siteCriticTrain, rows, seqLen)},
	}
}

// trainActs returns the actor's training activations for [b,s] (the
// engine's options: gradient checkpointing), reused between calls.
func (t *Trainer) trainActs(site, b, s int) (*model.Acts, error) {
	actor, err := t.m.Actor.Model()
	if err != nil {
		return nil, err
	}
	opts, err := t.m.Actor.TrainActsOptions(t.opts.siteActs(siteActorTrain, false))
	if err != nil {
		return nil, err
	}
	return t.acts.get(site, actor, b, s, opts)
}

// actsCache keeps one set of activation buffers per pass, reused by the
// next call with the same model and options (model.ReuseActs grows them
// when a batch is larger), so the four forwards and three training passes
// of a step do not allocate their buffers (fp32 logits [B·S,V] among them)
// again on every call.
//
// A pass's buffers belong to a model's architecture and device, not to
// the model value: the hybrid engine's inference model is a new view of
// the actor (WithParams over a new workspace) every round, and its
// buffers serve the next round's view (ReuseActs' contract). Keeping the
// view itself would also keep its workspace alive after the engine
// released it, a second copy of the actor's weights during the next
// round's generation.
type actsCache struct {
	acts  [numSites]*model.Acts
	owner [numSites]actsOwner
}

// actsOwner identifies what a pass's buffers were laid out for.
type actsOwner struct {
	cfg       *model.Config
	dev       kernels.Device
	valueHead bool
}

func ownerOf(m *model.Model) actsOwner { return actsOwner{m.Config, m.Dev, m.HasValueHead()} }

func (c *actsCache) get(site int, m *model.Model, b, s int, opts model.ActsOptions) (*model.Acts, error) {
	prev := c.acts[site]
	if c.owner[site] != ownerOf(m) {
		prev.Free()
		c.acts[site], prev = nil, nil
	}
	a, err := m.ReuseActs(prev, b, s, opts)
	if err != nil {
		prev.Free()
		c.acts[site] = nil
		return nil, err
	}
	if a != prev {
		prev.Free()
	}
	c.acts[site], c.owner[site] = a, ownerOf(m)
	return a, nil
}
