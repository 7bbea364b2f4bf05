package ppo

import (
	"fmt"
	"math"
	"time"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/train"
	"github.com/gochat-ai/gochat/zero"
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
// experience. It is TrainIteration with one stream on one rank.
func (t *Trainer) TrainStep(bt *Batch, unsup *UnsupBatch) (StepStats, error) {
	return t.TrainIteration(Iteration{Micros: []Micro{{Exp: bt, Unsup: unsup}}, Streams: 1, Mixture: unsup != nil})
}

// Micro is one stream's part of a PPO iteration (see the package's data
// parallelism).
type Micro struct {
	Stream int         // the stream's index among every rank's streams
	Exp    *Batch      // its micro-batch; nil when the stream has none left at this iteration
	Unsup  *UnsupBatch // its mixture-training batch, with Exp and Iteration.Mixture
}

// Iteration is one PPO iteration of a rank: a Micro for each of its
// streams (the same count on every rank), out of Streams over all ranks.
// Mixture says that mixture training is on (on every rank alike).
type Iteration struct {
	Micros  []Micro
	Streams int
	Mixture bool
}

// TrainIteration is TrainStep over the micro-batches of every stream on
// every rank of Options.Comm: each of this rank's micro-batches runs its
// actor and critic passes, accumulating gradients; the optimizers sum the
// gradients over the ranks and average them over n, the streams that had
// a micro-batch (a stream without one makes the collectives of its passes
// under ZeRO 2 and 3 and adds nothing); whitening uses the advantages of
// all n; the losses checked and reported are means over the n. Every rank
// calls it the same number of times. StepStats are the same on every
// rank but TrainTokens and TrainSeconds, which are this rank's.
func (t *Trainer) TrainIteration(it Iteration) (StepStats, error) {
	start := time.Now()
	iter := int(t.steps)
	t.steps++
	var st StepStats
	for _, m := range it.Micros {
		if m.Exp == nil {
			continue
		}
		s := m.Exp.Exp.Shape
		if m.Exp.S != s.T+1 || len(m.Exp.Seq) != s.B*m.Exp.S || len(m.Exp.Attn) != s.B*m.Exp.S {
			return st, fmt.Errorf("ppo: batch of %d×%d sequences for experience shape %+v", len(m.Exp.Seq), m.Exp.S, s)
		}
		if m.Stream < 0 || m.Stream >= it.Streams {
			return st, fmt.Errorf("ppo: stream %d of %d", m.Stream, it.Streams)
		}
	}
	ests, n, err := t.estimates(it)
	if err != nil {
		return st, err
	}
	if n == 0 {
		return st, fmt.Errorf("ppo: iteration %d has no micro-batch on any rank", iter)
	}
	e := t.m.Actor
	e.Train()
	actor, err := e.Model()
	if err != nil {
		return st, err
	}
	// sums: actor loss, critic loss, their clip fractions.
	sums := make([]float64, 4)
	for i, m := range it.Micros {
		if m.Exp == nil {
			if err := t.actorOpt.Idle(); err != nil {
				return st, err
			}
			continue
		}
		bt, s := m.Exp, m.Exp.Exp.Shape
		B, S := s.B, bt.S
		a, err := t.trainActs(siteActorTrain, B, S)
		if err != nil {
			return st, err
		}
		if err := actor.Forward(a, model.Batch{IDs: bt.Seq, Mask: bt.Attn, Targets: model.ShiftLabels(bt.Seq, B, S), Seed: t.seed(1, m.Stream, it.Streams)}); err != nil {
			return st, fmt.Errorf("ppo: actor forward: %w", err)
		}
		l, err := actor.Losses(a)
		if err != nil {
			return st, err
		}
		dlogp := make([]float32, s.B*s.T)
		loss, clip := ActorLoss(dlogp, LogProbs(l, B, S), bt.Exp.LogProbs, ests[i].Advantages, bt.Exp.Mask, s, t.cfg.ClipRange)
		sums[0], sums[2] = sums[0]+loss, sums[2]+clip
		if err := actor.Backward(a, ActorGrad(dlogp, s.B, s.T)); err != nil {
			return st, fmt.Errorf("ppo: actor backward: %w", err)
		}
		st.TrainTokens += B * S
	}
	c := t.m.Critic
	for i, m := range it.Micros {
		if m.Exp == nil {
			if err := t.criticOpt.Idle(); err != nil {
				return st, err
			}
			continue
		}
		bt, s := m.Exp, m.Exp.Exp.Shape
		B, S := s.B, bt.S
		ca, err := t.acts.get(siteCriticTrain, c, B, S, t.opts.siteActs(siteCriticTrain, false))
		if err != nil {
			return st, fmt.Errorf("ppo: critic activations: %w", err)
		}
		if err := c.Forward(ca, model.Batch{IDs: bt.Seq, Mask: bt.Attn, Seed: t.seed(2, m.Stream, it.Streams)}); err != nil {
			return st, fmt.Errorf("ppo: critic forward: %w", err)
		}
		v, err := c.Values(ca)
		if err != nil {
			return st, err
		}
		dv := make([]float32, s.B*s.T)
		loss, clip := CriticLoss(dv, DropLast(v, B, S), ests[i].OldValues, ests[i].Returns, bt.Exp.Mask, s, t.cfg.ClipRangeValue)
		sums[1], sums[3] = sums[1]+loss, sums[3]+clip
		if err := c.Backward(ca, CriticGrad(dv, s.B, s.T)); err != nil {
			return st, fmt.Errorf("ppo: critic backward: %w", err)
		}
	}
	if err := t.group().sum(sums); err != nil {
		return st, err
	}
	avg := 1 / float64(n)
	st.ActorLoss, st.CriticLoss, st.ActorClipFrac, st.CriticClipFrac = sums[0]*avg, sums[1]*avg, sums[2]*avg, sums[3]*avg

	// Both updates, once everything is known to be finite.
	if err := finite("actor loss", st.ActorLoss); err != nil {
		return st, err
	}
	if err := finite("critic loss", st.CriticLoss); err != nil {
		return st, err
	}
	if err := t.actorOpt.ReduceGrads(); err != nil {
		return st, err
	}
	if err := t.criticOpt.ReduceGrads(); err != nil {
		return st, err
	}
	if st.ActorGradNorm, err = t.actorOpt.Norm(n); err != nil {
		return st, named(err, "actor gradient norm")
	}
	if st.CriticGradNorm, err = t.criticOpt.Norm(n); err != nil {
		return st, named(err, "critic gradient norm")
	}
	u, err := t.actorOpt.Apply(iter, n, st.ActorGradNorm)
	if err != nil {
		return st, err
	}
	st.ActorLR = u.LR
	if err := t.updateEMA(actor); err != nil {
		return st, err
	}
	if u, err = t.criticOpt.Apply(iter, n, st.CriticGradNorm); err != nil {
		return st, err
	}
	st.CriticLR = u.LR

	// Mixture training.
	if it.Mixture {
		tokens, err := t.unsupStep(actor, it, iter, n, &st)
		st.TrainTokens += tokens
		if err != nil {
			return st, err
		}
	}
	st.TrainSeconds = time.Since(start).Seconds()
	return st, nil
}

// unsupStep is DeepSpeed-Chat's train_unsupervised on each stream's batch
// of the iteration: the actor's mean LM loss, backward of UnsupCoef ×
// loss, the finite check of the mean over the n streams, clipping, the
// step at schedule step iter, EMA. It records the unscaled mean loss and
// the gradient norm in st and returns the tokens it trained on.
func (t *Trainer) unsupStep(actor Actor, it Iteration, iter, n int, st *StepStats) (int, error) {
	loss, tokens := []float64{0}, 0
	for _, m := range it.Micros {
		u := m.Unsup
		if m.Exp == nil || u == nil {
			if m.Exp != nil {
				return tokens, fmt.Errorf("ppo: stream %d has experience but no unsupervised batch", m.Stream)
			}
			if err := t.actorOpt.Idle(); err != nil {
				return tokens, err
			}
			continue
		}
		l, err := t.unsupPass(actor, u, m.Stream, it.Streams)
		if err != nil {
			return tokens, err
		}
		loss[0] += l
		tokens += u.B * u.T
	}
	if err := t.group().sum(loss); err != nil {
		return tokens, err
	}
	st.UnsupLoss = loss[0] / float64(n)
	if err := finite("unsupervised loss", st.UnsupLoss); err != nil {
		return tokens, err
	}
	u, err := t.actorOpt.Step(iter, n)
	st.UnsupGradNorm = u.GradNorm
	if err != nil {
		return tokens, named(err, "actor gradient norm (unsupervised)")
	}
	return tokens, t.updateEMA(actor)
}

// unsupPass runs the actor's forward and the backward of UnsupCoef × its
// mean LM loss on one unsupervised batch and returns the unscaled loss.
func (t *Trainer) unsupPass(actor Actor, u *UnsupBatch, stream, streams int) (float64, error) {
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
	// The PPO pass is done with its activations: the mixture pass reuses
	// them (grown to the larger shape) instead of holding a second set.
	a, err := t.trainActs(siteActorTrain, u.B, u.T)
	if err != nil {
		return 0, err
	}
	if err := actor.Forward(a, model.Batch{IDs: u.IDs, Mask: u.Mask, Targets: targets, Seed: t.seed(3, stream, streams)}); err != nil {
		return 0, fmt.Errorf("ppo: unsupervised forward: %w", err)
	}
	l32, _, err := actor.MeanLoss(a)
	if err != nil {
		return 0, err
	}
	g := actor.MeanLossGrad(a)
	for i := range g.DLosses {
		g.DLosses[i] *= float32(t.cfg.UnsupCoef)
	}
	if err := actor.Backward(a, g); err != nil {
		return 0, fmt.Errorf("ppo: unsupervised backward: %w", err)
	}
	return float64(l32), nil
}

// estimates computes each micro-batch's Estimate; with whitening, over
// the counted answer positions of every stream's micro-batch of the
// iteration together (moments gathered from all ranks, added in stream
// order). It returns n, the streams with a micro-batch.
func (t *Trainer) estimates(it Iteration) ([]Estimates[float32], int, error) {
	cfg := t.cfg
	whiten := cfg.WhitenAdvantages
	cfg.WhitenAdvantages = false
	ests := make([]Estimates[float32], len(it.Micros))
	const k = 3 // per stream: has a micro-batch, Σ advantages, count
	part := make([]float64, k*it.Streams)
	for i, m := range it.Micros {
		if m.Exp == nil {
			continue
		}
		ests[i] = Estimate(cfg, m.Exp.Exp)
		part[k*m.Stream] = 1
		if whiten {
			forCounted(m.Exp.Exp.Mask, m.Exp.Exp.Shape, func(j int) {
				part[k*m.Stream+1] += float64(ests[i].Advantages[j])
				part[k*m.Stream+2]++
			})
		}
	}
	g := t.group()
	if err := g.gather(part); err != nil {
		return nil, 0, err
	}
	n, sum, cnt := 0, 0.0, 0.0
	for s := range it.Streams {
		if part[k*s] != 0 {
			n++
			sum += part[k*s+1]
			cnt += part[k*s+2]
		}
	}
	if !whiten {
		return ests, n, nil
	}
	mean := 0.0
	if cnt > 0 {
		mean = sum / cnt
	}
	ss := make([]float64, it.Streams)
	for i, m := range it.Micros {
		if m.Exp != nil {
			forCounted(m.Exp.Exp.Mask, m.Exp.Exp.Shape, func(j int) {
				d := float64(ests[i].Advantages[j]) - mean
				ss[m.Stream] += d * d
			})
		}
	}
	if err := g.gather(ss); err != nil {
		return nil, 0, err
	}
	var tot float64
	for _, v := range ss {
		tot += v
	}
	rstd := 1 / math.Sqrt(tot/cnt+whitenEps)
	for i, m := range it.Micros {
		if m.Exp != nil {
			whitenWith(ests[i].Advantages, m.Exp.Exp.Mask, m.Exp.Exp.Shape, mean, rstd, cnt > 0)
		}
	}
	return ests, n, nil
}

// updateEMA folds the actor's trained weights into the EMA (under ZeRO-3,
// on the ranges of them this rank keeps).
func (t *Trainer) updateEMA(actor Actor) error {
	d := actor.Device()
	if t.emaFlat != nil {
		rs, ok := t.actorOpt.Partitioned(emaOf)
		if !ok {
			rs = []zero.Range{{Lo: 0, Hi: t.emaFlat.Len()}}
		}
		for _, r := range rs {
			if err := EMAUpdate(d, t.emaFlat.Slice(r.Lo, r.Len()), actor.Parameters().Flat.Slice(r.Lo, r.Len()), t.cfg.EMABeta); err != nil {
				return err
			}
		}
	}
	if t.emaLoRA != nil {
		if err := EMAUpdate(d, t.emaLoRA, t.m.ActorLoRA.Params, t.cfg.EMABeta); err != nil {
			return err
		}
	}
	return nil
}

// seed keys the dropout of one pass (site) of stream's micro-batch in the
// current iteration (of streams in all).
func (t *Trainer) seed(site uint64, stream, streams int) uint64 {
	return t.opts.Seed ^ ((t.steps*uint64(streams)+uint64(stream))*4+site)*0x9E3779B97F4A7C15
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

func ownerOf(m Forwarder) actsOwner { return actsOwner{m.ModelConfig(), m.Device(), m.HasValueHead()} }

func (c *actsCache) get(site int, m Forwarder, b, s int, opts model.ActsOptions) (*model.Acts, error) {
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
