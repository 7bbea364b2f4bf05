package ppo

import (
	"slices"
	"testing"
)

func TestLayout(t *testing.T) {
	const b, s = 2, 3
	losses := []float32{1, 2, 3, 4, 5, 6}
	if got, want := LogProbs(losses, b, s), []float32{-1, -2, -4, -5}; !slices.Equal(got, want) {
		t.Errorf("LogProbs %v, want %v", got, want)
	}
	if got, want := DropLast(losses, b, s), []float32{1, 2, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("DropLast %v, want %v", got, want)
	}
	if got, want := ActionMask([]int32{0, 1, 1, 1, 1, 0}, b, s), []int32{1, 1, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("ActionMask %v, want %v", got, want)
	}
	g := ActorGrad([]float32{1, 2, 3, 4}, b, s-1)
	if want := []float32{-1, -2, 0, -3, -4, 0}; !slices.Equal(g.DLosses, want) || g.DValues != nil {
		t.Errorf("ActorGrad %+v, want DLosses %v", g, want)
	}
	g = CriticGrad([]float32{1, 2, 3, 4}, b, s-1)
	if want := []float32{1, 2, 0, 3, 4, 0}; !slices.Equal(g.DValues, want) || g.DLosses != nil {
		t.Errorf("CriticGrad %+v, want DValues %v", g, want)
	}
}
