// Package reward is step 2 of the pipeline: a reward model (the decoder plus
// a value head, one scalar per token) trained with the pairwise loss of
// REFERENCE.md §4 on (chosen, rejected) pairs.
package reward

import (
	"fmt"
	"math"
)

// PairBatch is B (chosen, rejected) pairs of right-padded sequences of
// length T, with their per-token values from the value head. Slices are
// row-major [B,T].
type PairBatch struct {
	B, T                       int
	ChosenIDs, RejectedIDs     []int32
	ChosenMask, RejectedMask   []int32
	ChosenValues, RejectValues []float32
}

// PairResult is the pairwise loss, its gradient with respect to the values
// ([B,T], zero outside each pair's span) and the scores.
type PairResult struct {
	Loss                  float64
	DChosen, DRejected    []float32
	ChosenScore, RejScore []float32 // value at the last real token, [B]
	Correct               int       // pairs with ChosenScore > RejScore
}

// seqEnd is the index after the last real token of a row.
func seqEnd(mask []int32) int {
	for i := len(mask) - 1; i >= 0; i-- {
		if mask[i] != 0 {
			return i + 1
		}
	}
	return 0
}

// PairwiseLoss computes DeepSpeed-Chat's reward loss with explicit masks. For
// each pair: end_c, end_r = index after the last real token; div = the first
// index where the token ids differ; end = max(end_c, end_r);
// loss = mean_{t∈[div,end)} −log σ(v_c[t] − v_r[t]); the batch loss is the
// mean over pairs. An identical pair uses its last real token (div = end−1;
// DeepSpeed-Chat uses the last position of the padded row, a padding token).
// Scores are the values at each sequence's last real token.
func PairwiseLoss(pb PairBatch) (PairResult, error) {
	B, T := pb.B, pb.T
	for _, s := range [][]int32{pb.ChosenIDs, pb.RejectedIDs, pb.ChosenMask, pb.RejectedMask} {
		if len(s) != B*T {
			return PairResult{}, fmt.Errorf("reward: pair batch slices must have B·T = %d entries", B*T)
		}
	}
	if len(pb.ChosenValues) != B*T || len(pb.RejectValues) != B*T {
		return PairResult{}, fmt.Errorf("reward: values must have B·T = %d entries", B*T)
	}
	res := PairResult{
		DChosen: make([]float32, B*T), DRejected: make([]float32, B*T),
		ChosenScore: make([]float32, B), RejScore: make([]float32, B),
	}
	for b := range B {
		row := func(s []int32) []int32 { return s[b*T : (b+1)*T] }
		cid, rid := row(pb.ChosenIDs), row(pb.RejectedIDs)
		endC, endR := seqEnd(row(pb.ChosenMask)), seqEnd(row(pb.RejectedMask))
		if endC == 0 || endR == 0 {
			return PairResult{}, fmt.Errorf("reward: pair %d has an empty sequence", b)
		}
		end := max(endC, endR)
		div := -1
		for t := range end {
			if cid[t] != rid[t] {
				div = t
				break
			}
		}
		if div < 0 {
			div = end - 1
		}
		vc, vr := pb.ChosenValues[b*T:(b+1)*T], pb.RejectValues[b*T:(b+1)*T]
		n := float64(end - div)
		var l float64
		for t := div; t < end; t++ {
			d := float64(vc[t]) - float64(vr[t])
			l += softplus(-d) // −log σ(d)
			g := -sigmoid(-d) / n / float64(B)
			res.DChosen[b*T+t] = float32(g)
			res.DRejected[b*T+t] = float32(-g)
		}
		res.Loss += l / n / float64(B)
		res.ChosenScore[b], res.RejScore[b] = vc[endC-1], vr[endR-1]
		if res.ChosenScore[b] > res.RejScore[b] {
			res.Correct++
		}
	}
	return res, nil
}

// softplus is log(1+eˣ) without overflow.
func softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}
