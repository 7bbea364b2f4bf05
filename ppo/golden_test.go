package ppo

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gochat-ai/gochat/tensor"
)

// golden is one case of scripts/gen_ppo_golden.py.
type golden struct {
	t  *testing.T
	ck *tensor.Checkpoint
}

func openGolden(t *testing.T, name string) *golden {
	t.Helper()
	ck, err := tensor.Open(filepath.Join("testdata", name+".safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return &golden{t, ck}
}

func (g *golden) f32(name string) []float32 {
	g.t.Helper()
	info, ok := g.ck.Info(name)
	if !ok {
		g.t.Fatalf("golden file has no %q", name)
	}
	out := make([]float32, info.Numel())
	if err := g.ck.ReadF32(name, out); err != nil {
		g.t.Fatal(err)
	}
	return out
}

func (g *golden) i64(name string) []int64 {
	g.t.Helper()
	v, err := g.ck.ReadI64(name)
	if err != nil {
		g.t.Fatal(err)
	}
	return v
}

func (g *golden) scalar(name string) float64 { return float64(g.f32(name)[0]) }

func convert[F, G Float](x []G) []F {
	out := make([]F, len(x))
	for i, v := range x {
		out[i] = F(v)
	}
	return out
}

// relErr is max |got − want| / max(max |want|, floor), with the first index
// of the largest difference.
func relErr[F Float](got []F, want []float32, floor float64) (float64, int) {
	var d, r float64
	at := -1
	for i := range want {
		if e := math.Abs(float64(got[i]) - float64(want[i])); e > d || at < 0 {
			d, at = e, i
		}
		r = math.Max(r, math.Abs(float64(want[i])))
	}
	return d / math.Max(r, floor), at
}

// TestMatchesPyTorch runs Estimate, ActorLoss, CriticLoss and KL on the
// golden experience and compares every output with the PyTorch port of
// DeepSpeed-Chat's ppo_trainer.py, in float64 (1e-6 relative) and float32
// (1e-5).
func TestMatchesPyTorch(t *testing.T) {
	for _, name := range []string{"default", "tuned"} {
		t.Run(name, func(t *testing.T) {
			g := openGolden(t, name)
			var attn []int32
			for _, v := range g.i64("attention_mask") {
				attn = append(attn, int32(v))
			}
			info, _ := g.ck.Info("attention_mask")
			B, S := info.Shape[0], info.Shape[1]
			s := Shape{B: B, T: S - 1, Start: int(g.i64("prompt_len")[0]) - 1}
			cfg := DefaultConfig()
			cfg.KLCtl, cfg.ClipRewardValue = g.scalar("kl_ctl"), g.scalar("clip_reward_value")
			cfg.ClipRange, cfg.ClipRangeValue = g.scalar("cliprange"), g.scalar("cliprange_value")
			cfg.Gamma, cfg.Lambda = g.scalar("gamma"), g.scalar("lam")
			cfg.WhitenAdvantages = g.i64("whiten")[0] != 0
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			wantEnds := g.i64("ends")
			t.Run("float64", func(t *testing.T) { checkGolden[float64](t, g, cfg, s, attn, wantEnds, 1e-6) })
			t.Run("float32", func(t *testing.T) { checkGolden[float32](t, g, cfg, s, attn, wantEnds, 1e-5) })
		})
	}
}

func checkGolden[F Float](t *testing.T, g *golden, cfg Config, s Shape, attn []int32, wantEnds []int64, tol float64) {
	mask := ActionMask(attn, s.B, s.T+1)
	e := Experience[F]{Shape: s,
		LogProbs:    convert[F](g.f32("logprobs")),
		RefLogProbs: convert[F](g.f32("ref_logprobs")),
		Values:      convert[F](g.f32("values")),
		Scores:      convert[F](g.f32("scores")),
		Mask:        mask,
	}
	values := slices.Clone(e.Values)
	est := Estimate(cfg, e)
	if !slices.Equal(e.Values, values) {
		t.Error("Estimate modified the experience's values")
	}
	for b, want := range wantEnds {
		if est.Ends[b] != int(want) {
			t.Errorf("ends %v, PyTorch %v", est.Ends, wantEnds)
			break
		}
	}
	check := func(name string, got []F) {
		t.Helper()
		if e, at := relErr(got, g.f32(name), 1e-3); e > tol {
			t.Errorf("%s: relative error %.3g at %d (b=%d t=%d): got %v, PyTorch %v",
				name, e, at, at/s.T, at%s.T, got[at], g.f32(name)[at])
		}
	}
	checkScalar := func(name string, got float64) {
		t.Helper()
		check(name, []F{F(got)})
	}
	check("rewards", est.Rewards)
	check("old_values", est.OldValues)
	check("advantages", est.Advantages)
	check("returns", est.Returns)

	dlogp := make([]F, s.B*s.T)
	loss, frac := ActorLoss(dlogp, convert[F](g.f32("new_logprobs")), e.LogProbs, est.Advantages, mask, s, cfg.ClipRange)
	checkScalar("actor_loss", loss)
	checkScalar("actor_clipfrac", frac)
	check("actor_grad", dlogp)

	dv := make([]F, s.B*s.T)
	loss, frac = CriticLoss(dv, convert[F](g.f32("new_values")), est.OldValues, est.Returns, mask, s, cfg.ClipRangeValue)
	checkScalar("critic_loss", loss)
	checkScalar("critic_clipfrac", frac)
	check("critic_grad", dv)

	checkScalar("kl", KL(e.LogProbs, e.RefLogProbs, mask, s))
}
