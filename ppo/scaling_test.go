package ppo

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The running moments of batches equal the moments of all the scores at
// once, whatever the batch sizes.
func TestRunningMomentsMatchWholeSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all []float32
	var r RunningMoments
	for _, n := range []int{1, 7, 64, 3, 100} {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(5 + 3*rng.NormFloat64())
		}
		r.Update(xs)
		all = append(all, xs...)
		var mean, ss float64
		for _, x := range all {
			mean += float64(x)
		}
		mean /= float64(len(all))
		for _, x := range all {
			ss += (float64(x) - mean) * (float64(x) - mean)
		}
		std := 0.0
		if len(all) > 1 {
			std = math.Sqrt(ss / float64(len(all)-1))
		}
		if math.Abs(r.Mean-mean) > 1e-9 || math.Abs(r.Std()-std) > 1e-9 || r.Count != float64(len(all)) {
			t.Fatalf("after %d scores: mean %v std %v, want %v %v", len(all), r.Mean, r.Std(), mean, std)
		}
	}
}

func TestScoreScaling(t *testing.T) {
	xs := []float32{2, 4, 6, 8}
	std := math.Sqrt(20.0 / 3) // sample std of 2,4,6,8
	cases := []struct {
		norm bool
		want []float64
	}{
		{false, []float64{2 / std, 4 / std, 6 / std, 8 / std}},
		{true, []float64{-3 / std, -1 / std, 1 / std, 3 / std}},
	}
	for _, c := range cases {
		var r RunningMoments
		got := append([]float32{}, xs...)
		r.Scale(got, c.norm)
		for i := range got {
			if math.Abs(float64(got[i])-c.want[i]) > 1e-6 {
				t.Errorf("norm %v: %v, want %v", c.norm, got, c.want)
				break
			}
		}
	}
	// One constant score: finite (divided by ε, centred to 0 with norm).
	var r RunningMoments
	one := []float32{3}
	r.Scale(one, true)
	if one[0] != 0 {
		t.Errorf("a single normalised score is %v, want 0", one[0])
	}
}
