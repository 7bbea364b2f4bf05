package ppo

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func nearAll(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestEnds(t *testing.T) {
	s := Shape{B: 1, T: 6, Start: 2}
	for _, tc := range []struct {
		name string
		mask []int32
		want int
	}{
		{"runs to the end", []int32{1, 1, 1, 1, 1, 1}, 6}, // 2+4
		{"stops one early", []int32{1, 1, 1, 1, 1, 0}, 5},
		{"stops early", []int32{0, 1, 1, 1, 0, 0}, 4},
		{"one token", []int32{1, 1, 1, 0, 0, 0}, 3},
		{"hole counted out", []int32{1, 1, 1, 0, 1, 0}, 4},
		{"prompt mask ignored", []int32{0, 0, 1, 1, 0, 0}, 4},
		{"empty answer", []int32{1, 1, 0, 0, 0, 0}, 2},
	} {
		if got := Ends(tc.mask, s); got[0] != tc.want {
			t.Errorf("%s: end %d, want %d", tc.name, got[0], tc.want)
		}
	}
}

// TestRewardsHandComputed checks the placement of the clipped score: at
// End−1, the last answer action, for a row that stops early and for one
// that runs to the end.
func TestRewardsHandComputed(t *testing.T) {
	s := Shape{B: 2, T: 5, Start: 1}
	logp := []float64{-9, -1, -2, -3, -4, -9, -1, -1, -1, -1}
	ref := []float64{-7, -2, -2, -1, -5, -7, -1.5, -1, -0.5, -1}
	mask := []int32{1, 1, 1, 0, 0, 1, 1, 1, 1, 1}
	scores := []float64{7, -0.25}
	ends := Ends(mask, s)
	if !slices.Equal(ends, []int{3, 5}) {
		t.Fatalf("ends %v, want [3 5]", ends)
	}
	r := make([]float64, 10)
	for i := range r {
		r[i] = 99 // overwritten
	}
	Rewards(r, logp, ref, scores, ends, s, 0.5, 5)
	want := []float64{
		0, -0.5 * 1, 0 + 5, 0, 0, // score 7 clipped to 5 at t = End−1 = 2
		0, -0.5 * 0.5, 0, -0.5 * -0.5, -0.25, // runs to the end: score at T−1
	}
	if !nearAll(r, want) {
		t.Errorf("rewards %v, want %v", r, want)
	}
}

func TestZeroAfterEnds(t *testing.T) {
	s := Shape{B: 2, T: 4, Start: 1}
	x := []float64{1, 2, 3, 4, 5, 6, 7, 8}
	ZeroAfterEnds(x, []int{2, 4}, s)
	if want := []float64{1, 2, 0, 0, 5, 6, 7, 8}; !slices.Equal(x, want) {
		t.Errorf("got %v, want %v", x, want)
	}
}

func TestGAEHandComputed(t *testing.T) {
	for _, tc := range []struct {
		name          string
		gamma, lambda float64
		adv, ret      []float64
	}{
		// t=2: δ=2, A=2; t=1: δ=0+0−1, A=−1+0.5·2=0; t=0: δ=1+1−0.5, A=1.5.
		{"gamma 1", 1, 0.5, []float64{9, 1.5, 0, 2}, []float64{9, 2, 1, 2}},
		// t=2: A=2; t=1: δ=−1, A=−1+0.5·2=0; t=0: δ=1+0.5·1−0.5=1, A=1.
		{"gamma 0.5", 0.5, 1, []float64{9, 1, 0, 2}, []float64{9, 1.5, 1, 2}},
	} {
		s := Shape{B: 1, T: 4, Start: 1}
		rewards := []float64{9, 1, 0, 2}
		values := []float64{9, 0.5, 1, 0}
		adv, ret := make([]float64, 4), make([]float64, 4)
		GAE(adv, ret, rewards, values, s, tc.gamma, tc.lambda)
		tc.adv[0], tc.ret[0] = 0, 0 // before Start
		if !nearAll(adv, tc.adv) || !nearAll(ret, tc.ret) {
			t.Errorf("%s: advantages %v returns %v, want %v %v", tc.name, adv, ret, tc.adv, tc.ret)
		}
	}
}

// TestEstimateZeroesAfterEnd: after the end, advantages and returns are 0,
// and the value at End−1 is bootstrapped against V = 0 beyond it.
func TestEstimateZeroesAfterEnd(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KLCtl = 0
	s := Shape{B: 1, T: 5, Start: 0}
	e := Experience[float64]{Shape: s,
		LogProbs: make([]float64, 5), RefLogProbs: make([]float64, 5),
		Values: []float64{1, 2, 3, 4, 5}, Scores: []float64{1},
		Mask: []int32{1, 1, 0, 0, 0}, // End = 2: score at t = 1
	}
	est := Estimate(cfg, e)
	// t=1: δ = 1 + 0 − 2 = −1; t=0: δ = 0 + 2 − 1 = 1, A = 1 + 0.95·A1.
	a1 := -1.0
	a0 := 1 + 0.95*a1
	if want := []float64{a0, a1, 0, 0, 0}; !nearAll(est.Advantages, want) {
		t.Errorf("advantages %v, want %v", est.Advantages, want)
	}
	if want := []float64{a0 + 1, a1 + 2, 0, 0, 0}; !nearAll(est.Returns, want) {
		t.Errorf("returns %v, want %v", est.Returns, want)
	}
	if want := []float64{1, 2, 0, 0, 0}; !slices.Equal(est.OldValues, want) {
		t.Errorf("old values %v, want %v", est.OldValues, want)
	}
}

func TestWhiten(t *testing.T) {
	s := Shape{B: 2, T: 4, Start: 1}
	x := []float64{7, 1, 2, 9, 7, 3, 4, 9}
	mask := []int32{1, 1, 1, 0, 1, 1, 1, 0}
	Whiten(x, mask, s)
	// Counted values 1, 2, 3, 4: mean 2.5, variance 1.25.
	r := 1 / math.Sqrt(1.25+1e-8)
	want := []float64{0, -1.5 * r, -0.5 * r, 0, 0, 0.5 * r, 1.5 * r, 0}
	if !nearAll(x, want) {
		t.Errorf("got %v, want %v", x, want)
	}
	Whiten(x, make([]int32, 8), s)
	if !slices.Equal(x, make([]float64, 8)) {
		t.Errorf("no counted position: got %v, want zeros", x)
	}
}

func TestActorLossCases(t *testing.T) {
	const eps = 0.2
	for _, tc := range []struct {
		name       string
		adv, ratio float64
		loss, grad float64
		clipped    bool
	}{
		{"A>0 ratio above: clipped", 1, 1.5, -1.2, 0, true},
		{"A>0 ratio below: unclipped", 1, 0.5, -0.5, -0.5, false},
		{"A<0 ratio above: unclipped", -1, 1.5, 1.5, 1.5, false},
		{"A<0 ratio below: clipped", -1, 0.5, 0.8, 0, true},
		{"inside the range", 2, 1.1, -2.2, -2.2, false},
		{"zero advantage", 0, 3, 0, 0, false},
	} {
		s := Shape{B: 1, T: 2, Start: 1}
		logp := []float64{5, math.Log(tc.ratio)}
		grad := []float64{7, 7}
		loss, frac := ActorLoss(grad, logp, []float64{0, 0}, []float64{9, tc.adv}, []int32{1, 1}, s, eps)
		wantFrac := 0.0
		if tc.clipped {
			wantFrac = 1
		}
		if !near(loss, tc.loss) || !near(grad[1], tc.grad) || grad[0] != 0 || frac != wantFrac {
			t.Errorf("%s: loss %v grad %v clip %v, want %v [0 %v] %v", tc.name, loss, grad, frac, tc.loss, tc.grad, wantFrac)
		}
	}

	// The mean is over counted positions only: two rows, three of five
	// answer positions counted.
	s := Shape{B: 2, T: 3, Start: 1}
	lr := math.Log(1.5)
	logp := []float64{9, lr, lr, 9, lr, lr}
	adv := []float64{9, 1, 5, 9, -1, 2}
	mask := []int32{1, 1, 0, 1, 1, 1}
	grad := make([]float64, 6)
	loss, frac := ActorLoss(grad, logp, make([]float64, 6), adv, mask, s, eps)
	if want := (-1.2 + 1.5 - 2.4) / 3; !near(loss, want) || !near(frac, 2.0/3) {
		t.Errorf("mean: loss %v clip %v, want %v 2/3", loss, frac, want)
	}
	if want := []float64{0, 0, 0, 0, 1.5 / 3, 0}; !nearAll(grad, want) {
		t.Errorf("mean: grad %v, want %v", grad, want)
	}
}

func TestCriticLossCases(t *testing.T) {
	const eps = 0.2
	for _, tc := range []struct {
		name         string
		v, vold, ret float64
		loss, grad   float64
		clipped      bool
	}{
		{"above the range, unclipped larger", 1, 0, 0, 0.5, 1, false},
		{"above the range, clipped larger", 1, 0, 2, 0.5 * 1.8 * 1.8, 0, true},
		{"inside the range", 0.1, 0, 1, 0.5 * 0.81, -0.9, false},
		{"below the range, clipped larger", -1, 0, -2, 0.5 * 1.8 * 1.8, 0, true},
		{"below the range, unclipped larger", -1, 0, 1, 0.5 * 4, -2, false},
	} {
		s := Shape{B: 1, T: 2, Start: 1}
		grad := []float64{7, 7}
		loss, frac := CriticLoss(grad, []float64{9, tc.v}, []float64{9, tc.vold}, []float64{9, tc.ret}, []int32{1, 1}, s, eps)
		wantFrac := 0.0
		if tc.clipped {
			wantFrac = 1
		}
		if !near(loss, tc.loss) || !near(grad[1], tc.grad) || grad[0] != 0 || frac != wantFrac {
			t.Errorf("%s: loss %v grad %v clip %v, want %v [0 %v] %v", tc.name, loss, grad, frac, tc.loss, tc.grad, wantFrac)
		}
	}
}

func TestNoCountedPosition(t *testing.T) {
	s := Shape{B: 1, T: 3, Start: 1}
	x := []float64{1, 2, 3}
	mask := []int32{1, 0, 0}
	g := []float64{5, 5, 5}
	if l, f := ActorLoss(g, x, x, x, mask, s, 0.2); l != 0 || f != 0 || !slices.Equal(g, make([]float64, 3)) {
		t.Errorf("actor: %v %v %v", l, f, g)
	}
	g = []float64{5, 5, 5}
	if l, f := CriticLoss(g, x, x, x, mask, s, 0.2); l != 0 || f != 0 || !slices.Equal(g, make([]float64, 3)) {
		t.Errorf("critic: %v %v %v", l, f, g)
	}
	if k := KL(x, x, mask, s); k != 0 {
		t.Errorf("KL %v", k)
	}
	// nil gradients are allowed.
	if l, _ := ActorLoss(nil, x, x, x, []int32{1, 1, 1}, s, 0.2); l == 0 {
		t.Error("actor loss with nil gradient is 0")
	}
}

func TestKL(t *testing.T) {
	s := Shape{B: 2, T: 3, Start: 1}
	logp := []float64{-9, -1, -2, -9, -3, -1}
	ref := []float64{0, -1.5, 0, 0, -2, -4}
	mask := []int32{1, 1, 0, 1, 1, 1}
	if got, want := KL(logp, ref, mask, s), (0.5-1+3)/3.0; !near(got, want) {
		t.Errorf("KL %v, want %v", got, want)
	}
}

func TestScoreEMA(t *testing.T) {
	e := ScoreEMA{Alpha: DefaultConfig().ScoreEMAAlpha}
	if e.Value != 0 {
		t.Fatal("nonzero before the first update")
	}
	for i, want := range []float64{1, 0.9*1 + 0.1*2, 0.9*(0.9+0.2) + 0.1*3} {
		if got := e.Update(float64(i + 1)); !near(got, want) || e.Value != got || e.N != i+1 {
			t.Errorf("update %d: %v (N %d), want %v", i, got, e.N, want)
		}
	}
}

func TestShapeValidate(t *testing.T) {
	for _, s := range []Shape{{1, 3, 3}, {1, 3, -1}, {-1, 3, 0}, {1, 0, 0}} {
		if s.Validate() == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if err := (Shape{0, 3, 2}).Validate(); err != nil {
		t.Error(err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "B·T") {
			t.Errorf("wrong length: panic %v", r)
		}
	}()
	KL(make([]float32, 5), make([]float32, 6), make([]int32, 6), Shape{2, 3, 1})
}
