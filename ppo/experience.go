package ppo

import (
	"errors"
	"fmt"
	"time"

	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/reward"
)

// ErrNoAnswers is returned by GenerateExperience when every row of the
// batch was dropped for having at most one answer token (DeepSpeed-Chat
// skips such a batch). Test it with errors.Is; the caller skips the batch.
var ErrNoAnswers = errors.New("ppo: every generated answer has at most one token; batch skipped")

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
	// RewardTruncated counts reward sequences longer than the reward
	// model's max_position_embeddings, scored on their last positions;
	// RewardUnscorable the rows Options.RewardSequence could not build (an
	// answer with ids the tokenizer has no text for), scored as generated.
	RewardTruncated, RewardUnscorable int
}

// add sums o into g.
func (g *GenStats) add(o GenStats) {
	g.Rows += o.Rows
	g.Dropped += o.Dropped
	g.Tokens += o.Tokens
	g.GenerateSeconds += o.GenerateSeconds
	g.SwitchSeconds += o.SwitchSeconds
	g.ForwardSeconds += o.ForwardSeconds
	g.RewardTruncated += o.RewardTruncated
	g.RewardUnscorable += o.RewardUnscorable
}

// TokensPerSecond is the generation throughput.
func (g GenStats) TokensPerSecond() float64 {
	if g.GenerateSeconds <= 0 {
		return 0
	}
	return float64(g.Tokens) / g.GenerateSeconds
}

// GenerateExperience is DeepSpeed-Chat's generate_experience: the actor
// generates answers (Generate mode), rows with at most one answer token are
// dropped (ErrNoAnswers when none is left), then gradient-free forwards on
// the full sequences give the actor's log-probs, the reference's log-probs,
// the critic's values[:, :-1] and the reward model's score (see
// Options.RewardSequence and Options.Score). The actor's log-probs are
// recomputed with the engine's InferenceModel (Generate mode: fused LoRA,
// no dropout), so they equal the rollout's generation log-probs up to
// rounding; the engine is left in Train mode.
func (t *Trainer) GenerateExperience(p hybridengine.Prompts) (*Batch, error) {
	return t.generate(p, true)
}

// generate is GenerateExperience; with scale false the scores stay raw
// (Run scales a round's scores in generation-batch order over all ranks).
func (t *Trainer) generate(p hybridengine.Prompts, scale bool) (*Batch, error) {
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
	lp, err := t.logProbs(siteActorLogp, inf, bt.Seq, bt.Attn, targets, B, S)
	e.Train()
	if err != nil {
		return nil, fmt.Errorf("ppo: actor forward: %w", err)
	}
	ref, err := t.logProbs(siteRefLogp, t.m.Ref, bt.Seq, bt.Attn, targets, B, S)
	if err != nil {
		return nil, fmt.Errorf("ppo: reference forward: %w", err)
	}
	cv, err := t.values(siteCriticValues, t.m.Critic, bt.Seq, bt.Attn, B, S)
	if err != nil {
		return nil, fmt.Errorf("ppo: critic forward: %w", err)
	}
	scores, err := t.rewardScores(bt.Seq, bt.Attn, B, S, P, &gs)
	if err != nil {
		return nil, fmt.Errorf("ppo: reward forward: %w", err)
	}
	bt.RawScores = append([]float32(nil), scores...)
	if t.cfg.ScoreScaling && scale {
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
func (t *Trainer) logProbs(site int, m LogProber, seq, attn, targets []int32, b, s int) ([]float32, error) {
	a, err := t.acts.get(site, m, b, s, t.opts.siteActs(site, false))
	if err != nil {
		return nil, err
	}
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
func (t *Trainer) values(site int, m Critic, seq, attn []int32, b, s int) ([]float32, error) {
	a, err := t.acts.get(site, m, b, s, t.opts.siteActs(site, false))
	if err != nil {
		return nil, err
	}
	if err := m.Forward(a, model.Batch{IDs: seq, Mask: attn}); err != nil {
		return nil, err
	}
	return m.Values(a)
}

// rewardScores scores the sequences [B,S] (prompt of P positions, then the
// answer): with Options.Score by the rule; otherwise with the reward model
// at the last token of Options.RewardSequence(prompt, answer), or of the
// sequence as generated.
func (t *Trainer) rewardScores(seq, attn []int32, B, S, P int, gs *GenStats) ([]float32, error) {
	seqs := make([][]int32, B)
	scores := make([]float32, B)
	limit := t.m.Reward.ModelConfig().MaxPositions
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
		switch {
		case t.opts.Score != nil:
			scores[b] = t.opts.Score(prompt, answer)
			continue
		case t.opts.RewardSequence != nil:
			s, err := t.opts.RewardSequence(prompt, answer)
			if err != nil {
				// An answer with no text (ids past the tokenizer's
				// vocabulary, which a model's padded vocabulary allows) is
				// scored as generated.
				s = append(prompt, answer...)
				gs.RewardUnscorable++
			}
			seqs[b] = s
		default:
			seqs[b] = append(prompt, answer...)
		}
		if n := len(seqs[b]); n > limit {
			seqs[b] = seqs[b][n-limit:]
			gs.RewardTruncated++
		}
	}
	if t.opts.Score != nil {
		return scores, nil
	}
	return reward.Score(t.m.Reward, seqs, 0)
}
