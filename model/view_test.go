package model

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
)

func TestWithParams(t *testing.T) {
	m := loadGolden(t, "postln")
	rng := rand.New(rand.NewPCG(7, 8))
	ids, mask := leftPadded(rng, m, 6, []int{0, 2})
	want := forwardLogits(t, m, ids, mask, 2, 6)

	flat := must(m.Dev.Alloc(kernels.F32, m.NumParams()))
	m.Dev.Copy(flat, m.Params.Flat)
	v := m.WithParams(flat)
	if got := forwardLogits(t, v, ids, mask, 2, 6); !slices.Equal(got, want) {
		t.Error("a view over a copy of the parameters gives different logits")
	}
	// Changing the view's buffer changes the view, not the model.
	m.Dev.Zero(v.Params.Layers[0].FC2B)
	if got := forwardLogits(t, v, ids, mask, 2, 6); slices.Equal(got, want) {
		t.Error("the view does not read its own buffer")
	}
	if got := forwardLogits(t, m, ids, mask, 2, 6); !slices.Equal(got, want) {
		t.Error("changing the view's buffer changed the model")
	}
	if v.Grads != nil || v.FreezeBase || v.HasValueHead() != m.HasValueHead() {
		t.Error("the view should have no gradients, FreezeBase unset and the model's value head option")
	}
	defer func() {
		if recover() == nil {
			t.Error("WithParams accepted a buffer of the wrong size")
		}
	}()
	m.WithParams(must(m.Dev.Alloc(kernels.F32, 3)))
}
