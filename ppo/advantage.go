// Package ppo is the math of step 3 (REFERENCE.md §5): DeepSpeed-Chat's
// compute_rewards, get_advantages_and_returns, actor_loss_fn and
// critic_loss_fn as small pure functions on host slices, with the gradients
// of the two losses, plus the logging helpers (KL estimate, reward-score EMA)
// and the actor EMA over device buffers.
//
// # Coordinates
//
// A row of experience is a token sequence seq[0..S) of length S = P + A: the
// prompt, left-padded to P tokens, then the generated answer, right-padded to
// A tokens; attn[i] = 1 where seq[i] is not padding. Every per-position slice
// of this package is in log-prob coordinates, [B,T] row-major with T = S−1,
// exactly as DeepSpeed-Chat's gather_log_probs(logits[:, :-1], seq[:, 1:]):
//
//	logp[t]   = log π(seq[t+1] | seq[0..t])   the action taken at position t
//	values[t] = V(seq[0..t])                  critic(seq)[:, :-1]
//	mask[t]   = attn[t+1]                     the action mask, attn[:, 1:]
//
// Start = P−1 is the first answer position: logp[Start] is the
// log-probability of the first answer token. The answer positions are
// t ∈ [Start, T); everything before Start is ignored on input and zero on
// output.
//
// # Ends
//
// With n = Σ_{t≥Start} mask[t], the number of real answer tokens (EOS
// included: the mask is explicit), a row ends at End = Start + n (capped at
// T). Rewards and values are zero at t ≥ End, and the score is added at
// End−1, the log-prob position of the last answer token — the action that
// ends the answer (EOS when the model emitted one). DeepSpeed-Chat writes
// end = start + n + 1, but there pad == eos for OPT, so its mask hides the
// EOS token and that index is the same EOS action; with explicit masks the
// +1 would land one position past the answer. REFERENCE.md §5 ("at the last
// answer token") is what both compute.
//
// # Numerics
//
// Functions are generic over float32 (training) and float64 (gradient
// checks); they compute in float64 and round once when they store. Slices
// whose length is not B·T (or B for scores) are programming errors and
// panic, as kernels do.
package ppo

import (
	"fmt"
	"math"
)

// Float is the element type of the host slices.
type Float interface{ ~float32 | ~float64 }

// Shape is the layout of a batch of experience in log-prob coordinates.
type Shape struct {
	B     int // rows (sequences)
	T     int // log-prob positions per row: the sequence length − 1
	Start int // first answer position: the padded prompt length − 1
}

// Answer is the number of answer positions per row, T − Start.
func (s Shape) Answer() int { return s.T - s.Start }

// Validate reports a shape with no answer position.
func (s Shape) Validate() error {
	if s.B < 0 || s.Start < 0 || s.Start >= s.T {
		return fmt.Errorf("ppo: shape B=%d T=%d Start=%d: want B >= 0 and 0 <= Start < T", s.B, s.T, s.Start)
	}
	return nil
}

// must panics unless the shape is valid and each slice length is B·T.
func (s Shape) must(lens ...int) {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	for _, n := range lens {
		if n != s.B*s.T {
			panic(fmt.Sprintf("ppo: slice of %d elements, want B·T = %d·%d", n, s.B, s.T))
		}
	}
}

// Ends returns each row's end ([B]): End = min(Start + n, T) with n the
// number of nonzero mask entries at t ≥ Start (see the package doc for why
// not DeepSpeed-Chat's +1). It counts padding holes inside an answer out,
// as DeepSpeed-Chat does. mask is [B,T].
func Ends(mask []int32, s Shape) []int {
	s.must(len(mask))
	ends := make([]int, s.B)
	for b := range s.B {
		n := 0
		for _, m := range mask[b*s.T+s.Start : (b+1)*s.T] {
			if m != 0 {
				n++
			}
		}
		ends[b] = min(s.Start+n, s.T)
	}
	return ends
}

func (s Shape) mustEnds(ends []int) {
	if len(ends) != s.B {
		panic(fmt.Sprintf("ppo: %d ends, want B = %d", len(ends), s.B))
	}
	for b, e := range ends {
		if e <= s.Start || e > s.T {
			panic(fmt.Sprintf("ppo: row %d ends at %d, want Start < end <= T (%d, %d)", b, e, s.Start, s.T))
		}
	}
}

// Rewards computes DeepSpeed-Chat's compute_rewards followed by the zeroing
// after the end:
//
//	rewards[t] = −klCtl·(logp[t] − refLogp[t])           Start ≤ t < End
//	rewards[End−1] += clip(score, −clipReward, +clipReward)
//	rewards[t] = 0                                        t < Start or t ≥ End
//
// rewards, logp and refLogp are [B,T]; scores (the reward model's score of
// each sequence) and ends (from Ends) are [B]. rewards is overwritten.
// (DeepSpeed-Chat leaves the KL term at prompt positions, where nothing reads
// it; here they are zero.)
func Rewards[F Float](rewards, logp, refLogp, scores []F, ends []int, s Shape, klCtl, clipReward float64) {
	s.must(len(rewards), len(logp), len(refLogp))
	s.mustEnds(ends)
	if len(scores) != s.B {
		panic(fmt.Sprintf("ppo: %d scores, want B = %d", len(scores), s.B))
	}
	for b := range s.B {
		off, end := b*s.T, ends[b]
		clear(rewards[off : off+s.T])
		for t := s.Start; t < end; t++ {
			r := klCtl * (float64(refLogp[off+t]) - float64(logp[off+t])) // −kl·(logp − ref), no −0
			if t == end-1 {
				r += clip(float64(scores[b]), -clipReward, clipReward)
			}
			rewards[off+t] = F(r)
		}
	}
}

// ZeroAfterEnds sets x[b,t] = 0 for t ≥ ends[b] (x is [B,T]), what
// DeepSpeed-Chat does to the old values before GAE (and so also in the
// critic loss).
func ZeroAfterEnds[F Float](x []F, ends []int, s Shape) {
	s.must(len(x))
	s.mustEnds(ends)
	for b, e := range ends {
		clear(x[b*s.T+e : (b+1)*s.T])
	}
}

// GAE computes DeepSpeed-Chat's get_advantages_and_returns: generalised
// advantage estimation from the last position backwards, with the value
// after the last position taken as 0,
//
//	δ[t] = rewards[t] + γ·values[t+1] − values[t]
//	A[t] = δ[t] + γ·λ·A[t+1]
//	R[t] = A[t] + values[t]
//
// for t from T−1 down to Start. adv and ret ([B,T]) are overwritten, zero
// before Start. values must already be zero at and after each row's end
// (ZeroAfterEnds) and rewards come from Rewards, so δ and A are zero after
// the end and the value after the end counts as 0.
func GAE[F Float](adv, ret, rewards, values []F, s Shape, gamma, lambda float64) {
	s.must(len(adv), len(ret), len(rewards), len(values))
	for b := range s.B {
		off := b * s.T
		clear(adv[off : off+s.Start])
		clear(ret[off : off+s.Start])
		var next, last float64 // values[t+1], A[t+1]
		for t := s.T - 1; t >= s.Start; t-- {
			v := float64(values[off+t])
			delta := float64(rewards[off+t]) + gamma*next - v
			last = delta + gamma*lambda*last
			adv[off+t] = F(last)
			ret[off+t] = F(last + v)
			next = v
		}
	}
}

// whitenEps is added to the variance before the square root.
const whitenEps = 1e-8

// Whiten normalises x ([B,T]) over the counted answer positions (t ≥ Start,
// mask ≠ 0) of the whole batch: x ← (x − mean)/sqrt(var + 1e-8) with the
// masked mean and the biased masked variance. Every other position is set to
// 0. With no counted position, x is zeroed. This is the local version;
// data-parallel training whitens with the moments of every stream's
// micro-batch (Trainer.TrainIteration).
func Whiten[F Float](x []F, mask []int32, s Shape) {
	s.must(len(x), len(mask))
	var sum float64
	n := 0
	forCounted(mask, s, func(i int) { sum += float64(x[i]); n++ })
	if n == 0 {
		clear(x)
		return
	}
	mean := sum / float64(n)
	var ss float64
	forCounted(mask, s, func(i int) { d := float64(x[i]) - mean; ss += d * d })
	whitenWith(x, mask, s, mean, 1/math.Sqrt(ss/float64(n)+whitenEps), true)
}

// whitenWith sets the counted positions of x to (x − mean)·rstd and every
// other position to 0 (all of them when !any: nothing was counted).
func whitenWith[F Float](x []F, mask []int32, s Shape, mean, rstd float64, any bool) {
	if !any {
		clear(x)
		return
	}
	for b := range s.B {
		for t := range s.T {
			i := b*s.T + t
			if t >= s.Start && mask[i] != 0 {
				x[i] = F((float64(x[i]) - mean) * rstd)
			} else {
				x[i] = 0
			}
		}
	}
}

// forCounted calls fn with the index of every counted position: t ≥ Start
// and mask ≠ 0, row by row.
func forCounted(mask []int32, s Shape, fn func(i int)) {
	for b := range s.B {
		for t := s.Start; t < s.T; t++ {
			if i := b*s.T + t; mask[i] != 0 {
				fn(i)
			}
		}
	}
}

// counted is the number of counted positions (t ≥ Start, mask ≠ 0).
func counted(mask []int32, s Shape) int {
	n := 0
	forCounted(mask, s, func(int) { n++ })
	return n
}

func clip(x, lo, hi float64) float64 { return min(max(x, lo), hi) }

// Experience is one batch of generated experience in log-prob coordinates
// (what DeepSpeed-Chat's generate_experience returns). Slices are [B,T]
// except Scores, [B].
type Experience[F Float] struct {
	Shape
	LogProbs    []F     // the actor's log-probabilities at generation time
	RefLogProbs []F     // the frozen reference model's
	Values      []F     // the critic's values
	Scores      []F     // the reward model's score of each sequence, [B]
	Mask        []int32 // the action mask, attn[:, 1:]
}

// Estimates are what DeepSpeed-Chat's train_rlhf computes from an Experience
// without gradients. Slices are [B,T], zero before Start.
type Estimates[F Float] struct {
	Ends       []int // [B], from Ends
	Rewards    []F   // Rewards
	OldValues  []F   // Experience.Values zeroed at t ≥ End (and t < Start): the critic loss's V_old
	Advantages []F   // GAE's A, whitened when Config.WhitenAdvantages
	Returns    []F   // GAE's R = A + V_old (before any whitening)
}

// Estimate runs Ends, Rewards, ZeroAfterEnds (on a copy of the values), GAE
// and, when cfg.WhitenAdvantages, Whiten. The Experience is not modified.
func Estimate[F Float](cfg Config, e Experience[F]) Estimates[F] {
	s := e.Shape
	s.must(len(e.LogProbs), len(e.RefLogProbs), len(e.Values), len(e.Mask))
	n := s.B * s.T
	est := Estimates[F]{
		Ends:       Ends(e.Mask, s),
		Rewards:    make([]F, n),
		OldValues:  append([]F(nil), e.Values...),
		Advantages: make([]F, n),
		Returns:    make([]F, n),
	}
	Rewards(est.Rewards, e.LogProbs, e.RefLogProbs, e.Scores, est.Ends, s, cfg.KLCtl, cfg.ClipRewardValue)
	ZeroAfterEnds(est.OldValues, est.Ends, s)
	for b := range s.B {
		clear(est.OldValues[b*s.T : b*s.T+s.Start])
	}
	GAE(est.Advantages, est.Returns, est.Rewards, est.OldValues, s, cfg.Gamma, cfg.Lambda)
	if cfg.WhitenAdvantages {
		Whiten(est.Advantages, e.Mask, s)
	}
	return est
}
