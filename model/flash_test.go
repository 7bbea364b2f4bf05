package model

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// composedOnly is a device without the kernels.FlashAttention capability:
// the embedded interface hides the CPU backend's flash methods, so a model
// on it keeps att and runs the composed attention kernels.
type composedOnly struct{ kernels.Device }

// TestFlashAttentionMatchesComposed: on a device with flash attention both
// families keep lse[B,NH,T] instead of att[B,NH,T,T] (ActsBytes says so,
// to the byte), give the same outputs as the composed kernels bit for bit
// (the CPU's flash forward is their arithmetic) and the same gradients to
// fp32 rounding, in training, with gradient checkpointing and in
// evaluation, with left padding.
func TestFlashAttentionMatchesComposed(t *testing.T) {
	dev := must(cpu.New(cpu.Options{Threads: 2}))
	plain := composedOnly{dev}
	models := map[string][2]*Model{}
	for name, m := range actsModels(t, dev) {
		m2 := must(New(plain, m.Config, Options{ValueHead: m.HasValueHead()}))
		dev.Copy(m2.Params.Flat, m.Params.Flat)
		models["opt/"+name] = [2]*Model{m, m2}
	}
	for _, name := range llamaCases {
		dir, opts := filepath.Join("testdata", "llama", name), LoadOptions{ValueHead: "yes", ValueHeadSeed: 3}
		models["llama/"+name] = [2]*Model{must(Load(dev, dir, opts)), must(Load(plain, dir, opts))}
	}
	for name, ms := range models {
		flash, composed := ms[0], ms[1]
		if !flash.WeightsInfo().FlashAttention || composed.WeightsInfo().FlashAttention {
			t.Fatalf("%s: FlashAttention %v on the CPU, %v without the capability", name, flash.WeightsInfo().FlashAttention, composed.WeightsInfo().FlashAttention)
		}
		for _, m := range ms {
			must(0, m.AllocGrads())
		}
		c := flash.Config
		rng := rand.New(rand.NewPCG(21, 22))
		for _, opts := range []ActsOptions{{Train: true}, {Train: true, Checkpoint: true}, {}} {
			const b, tt = 3, 11
			what := fmt.Sprintf("%s %+v", name, opts)
			a1, a2 := must(flash.NewActs(b, tt, opts)), must(composed.NewActs(b, tt, opts))
			layers := c.NumLayers
			if opts.Checkpoint {
				layers = 1
			}
			if saved := layers * (b*c.NumHeads*tt*tt - b*c.NumHeads*tt) * 4; a2.Bytes()-a1.Bytes() != saved {
				t.Errorf("%s: flash attention saves %d bytes, want %d", what, a2.Bytes()-a1.Bytes(), saved)
			}
			if got := ActsBytes(c, true, b, tt, opts, flash.WeightsInfo()); got != a1.Bytes() {
				t.Errorf("%s: ActsBytes %d, allocated %d", what, got, a1.Bytes())
			}
			in, dv := actsBatch(rng, flash, b, tt)
			r1, r2 := runPass(t, flash, a1, in, dv), runPass(t, composed, a2, in, dv)
			for _, o := range []struct {
				name string
				a, b []float32
			}{{"logits", r1.logits, r2.logits}, {"losses", r1.losses, r2.losses}, {"values", r1.values, r2.values}} {
				if !slices.Equal(o.a, o.b) {
					t.Errorf("%s: %s differ between flash and composed attention", what, o.name)
				}
			}
			if e, at := relErr(r1.grads, r2.grads, 0); e > 1e-5 {
				t.Errorf("%s: gradients differ by %.3g (relative to the largest), the most at %d", what, e, at)
			}
			a1.Free()
			a2.Free()
		}
		for _, m := range ms {
			m.Free()
		}
	}
}
