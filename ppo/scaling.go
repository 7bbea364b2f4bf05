package ppo

import "math"

// RunningMoments is the running mean and standard deviation of every reward
// score seen so far, for score scaling (Config.ScoreScaling). Update folds
// a batch in with the parallel-variance formula, so after any sequence of
// batches Mean and Var equal the mean and population variance of all the
// scores together. Its fields are exported so a checkpoint can save them.
type RunningMoments struct {
	Mean  float64 `json:"mean"`
	Var   float64 `json:"var"` // population variance (divides by Count)
	Count float64 `json:"count"`
}

// Update folds xs into the moments.
func (r *RunningMoments) Update(xs []float32) {
	n := float64(len(xs))
	if n == 0 {
		return
	}
	var mean float64
	for _, x := range xs {
		mean += float64(x)
	}
	mean /= n
	var m2 float64
	for _, x := range xs {
		d := float64(x) - mean
		m2 += d * d
	}
	tot := r.Count + n
	delta := mean - r.Mean
	// Sum of squared deviations of the union: both parts' own plus the
	// shift of their means to the common one.
	ss := r.Var*r.Count + m2 + delta*delta*r.Count*n/tot
	r.Mean += delta * n / tot
	r.Var = ss / tot
	r.Count = tot
}

// Std is the sample standard deviation of the scores seen (Bessel's
// correction; 0 with fewer than two scores).
func (r *RunningMoments) Std() float64 {
	if r.Count < 2 {
		return 0
	}
	return math.Sqrt(r.Var * r.Count / (r.Count - 1))
}

// scoreEps keeps the scale finite when every score so far was equal.
const scoreEps = 1e-8

// Scale folds scores into the moments, then rewrites them in place as
// Hugging Face TRL's use_score_scaling does: divided by the running
// standard deviation, and with norm (use_score_norm) also centred on the
// running mean. Clipping to ±ClipRewardValue happens afterwards, in
// Rewards.
func (r *RunningMoments) Scale(scores []float32, norm bool) {
	r.Update(scores)
	s := r.Std() + scoreEps
	for i, x := range scores {
		v := float64(x)
		if norm {
			v -= r.Mean
		}
		scores[i] = float32(v / s)
	}
}
