package reward

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPairwiseLossHandComputed(t *testing.T) {
	// Pair 0 diverges at t=2; chosen ends at 4, rejected at 3: span [2,4).
	// Pair 1 is identical: only its last real token (t=1) counts.
	pb := PairBatch{B: 2, T: 5,
		ChosenIDs:    []int32{5, 6, 7, 8, 1, 5, 6, 1, 1, 1},
		RejectedIDs:  []int32{5, 6, 9, 1, 1, 5, 6, 1, 1, 1},
		ChosenMask:   []int32{1, 1, 1, 1, 0, 1, 1, 0, 0, 0},
		RejectedMask: []int32{1, 1, 1, 0, 0, 1, 1, 0, 0, 0},
		ChosenValues: []float32{9, 9, 1, 2, 9, 9, 0.5, 9, 9, 9},
		RejectValues: []float32{9, 9, 0, 3, 9, 9, 0.5, 9, 9, 9},
	}
	res, err := PairwiseLoss(pb)
	if err != nil {
		t.Fatal(err)
	}
	ls := func(d float64) float64 { return -math.Log(1 / (1 + math.Exp(-d))) }
	want := ((ls(1)+ls(-1))/2 + ls(0)) / 2
	if math.Abs(res.Loss-want) > 1e-12 {
		t.Errorf("loss %v, want %v", res.Loss, want)
	}
	if res.ChosenScore[0] != 2 || res.RejScore[0] != 0 || res.ChosenScore[1] != 0.5 || res.RejScore[1] != 0.5 {
		t.Errorf("scores %v %v", res.ChosenScore, res.RejScore)
	}
	if res.Correct != 1 {
		t.Errorf("correct %d, want 1", res.Correct)
	}
	for _, i := range []int{0, 1, 4, 5, 7} {
		if res.DChosen[i] != 0 || res.DRejected[i] != 0 {
			t.Errorf("gradient outside the span at %d", i)
		}
	}
}

// TestPairwiseGradient checks the value gradients by finite differences in
// float64 arithmetic (the loss is computed in float64).
func TestPairwiseGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	B, T := 3, 6
	pb := PairBatch{B: B, T: T, ChosenIDs: make([]int32, B*T), RejectedIDs: make([]int32, B*T),
		ChosenMask: make([]int32, B*T), RejectedMask: make([]int32, B*T),
		ChosenValues: make([]float32, B*T), RejectValues: make([]float32, B*T)}
	for b := range B {
		lc, lr := 3+rng.IntN(T-2), 2+rng.IntN(T-1)
		for t := range T {
			pb.ChosenIDs[b*T+t], pb.RejectedIDs[b*T+t] = int32(10+t), int32(10+t)
			if t >= 2 {
				pb.RejectedIDs[b*T+t] = int32(50 + t)
			}
			if t < lc {
				pb.ChosenMask[b*T+t] = 1
			}
			if t < lr {
				pb.RejectedMask[b*T+t] = 1
			}
		}
	}
	for i := range pb.ChosenValues {
		pb.ChosenValues[i] = float32(rng.NormFloat64())
		pb.RejectValues[i] = float32(rng.NormFloat64())
	}
	res, _ := PairwiseLoss(pb)
	const h = 1e-3
	for _, vals := range []struct {
		v []float32
		g []float32
	}{{pb.ChosenValues, res.DChosen}, {pb.RejectValues, res.DRejected}} {
		for i := range vals.v {
			x := vals.v[i]
			vals.v[i] = x + h
			lp, _ := PairwiseLoss(pb)
			vals.v[i] = x - h
			lm, _ := PairwiseLoss(pb)
			vals.v[i] = x
			fd := (lp.Loss - lm.Loss) / (2 * float64(float32(x+h)-float32(x-h)) / 2)
			if math.Abs(fd-float64(vals.g[i])) > 1e-5 {
				t.Errorf("value %d: gradient %v, finite difference %v", i, vals.g[i], fd)
			}
		}
	}
}
