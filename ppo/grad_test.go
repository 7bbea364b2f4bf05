package ppo

import (
	"math"
	"math/rand/v2"
	"testing"
)

// fdInputs is a random batch where both loss branches occur: log-ratios and
// value moves of the order of the clip ranges, some masked positions.
func fdInputs(seed uint64) (s Shape, mask []int32, newX, oldX, target []float64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	s = Shape{B: 3, T: 8, Start: 2}
	n := s.B * s.T
	mask = make([]int32, n)
	newX, oldX, target = make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range n {
		if rng.IntN(5) != 0 {
			mask[i] = 1
		}
		oldX[i] = -rng.ExpFloat64()
		newX[i] = oldX[i] + 0.3*rng.NormFloat64()
		target[i] = 2 * rng.NormFloat64()
	}
	return
}

// checkFD compares grad with central differences of loss in float64.
func checkFD(t *testing.T, what string, x, grad []float64, loss func() float64) {
	t.Helper()
	const h = 1e-6
	for i := range x {
		v := x[i]
		x[i] = v + h
		lp := loss()
		x[i] = v - h
		lm := loss()
		x[i] = v
		fd := (lp - lm) / (2 * h)
		if math.Abs(fd-grad[i]) > 1e-7+1e-6*math.Abs(fd) {
			t.Errorf("%s: ∂L/∂x[%d] = %v, finite difference %v", what, i, grad[i], fd)
		}
	}
}

func TestActorLossGradient(t *testing.T) {
	for seed := range uint64(3) {
		s, mask, logp, old, adv := fdInputs(seed)
		grad := make([]float64, len(logp))
		_, frac := ActorLoss(grad, logp, old, adv, mask, s, 0.2)
		if frac == 0 || frac == 1 {
			t.Fatalf("seed %d: clip fraction %v: both branches should occur", seed, frac)
		}
		checkFD(t, "actor", logp, grad, func() float64 {
			l, _ := ActorLoss(nil, logp, old, adv, mask, s, 0.2)
			return l
		})
	}
}

func TestCriticLossGradient(t *testing.T) {
	for seed := range uint64(3) {
		s, mask, v, vold, ret := fdInputs(seed + 10)
		grad := make([]float64, len(v))
		_, frac := CriticLoss(grad, v, vold, ret, mask, s, 0.2)
		if frac == 0 || frac == 1 {
			t.Fatalf("seed %d: clip fraction %v: both branches should occur", seed, frac)
		}
		checkFD(t, "critic", v, grad, func() float64 {
			l, _ := CriticLoss(nil, v, vold, ret, mask, s, 0.2)
			return l
		})
	}
}
