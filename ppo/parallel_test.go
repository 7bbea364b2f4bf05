package ppo

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/zero"
)

// runRanks runs cfg (GradAccum per rank) on ranks in-process ranks
// (disttest; one process when ranks is 1) with the given ZeRO stages and
// returns rank 0's trained state (runRig.state: actor, critic, EMA, after
// Run consolidated them) and last metrics record.
func runRanks(t *testing.T, ranks int, cfg RunConfig, dt kernels.DType, actorZ, criticZ zero.Stage, withLoRA bool) ([][]float32, map[string]float64) {
	t.Helper()
	devs := make([]kernels.Device, ranks)
	rigs := make([]*runRig, ranks)
	for r := range ranks {
		d, err := cpu.New(cpu.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		devs[r] = d
		rigs[r] = newRunRigWith(t, d, testModelsOn(t, d, dt), withLoRA)
	}
	cfg.ActorZeRO, cfg.CriticZeRO = actorZ, criticZ
	results := make([]*Result, ranks)
	run := func(c dist.Comm, dev kernels.Device) error {
		rc := cfg
		rc.Comm = c
		rig := rigs[c.Rank()]
		res, err := Run(context.Background(), dev, rc, rig.m, rig.d)
		results[c.Rank()] = res
		return err
	}
	var err error
	if ranks == 1 {
		err = run(dist.Single{Dev: devs[0]}, devs[0])
	} else {
		err = disttest.Run(devs, run)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rigs[0].state(t, results[0]), results[0].Last
}

// TestRunDataParallel: step 3 on 2 and 3 in-process ranks, at ZeRO
// stages 0-3 for the actor and the critic, ends with the weights, EMA and
// metrics of one process with as many gradient-accumulation streams
// (GradAccum = ranks): the same generation batches (sampling is keyed by
// the batch), score scaling folded in batch order, advantages whitened
// over every stream's micro-batch, mixture training, and a last round
// whose generation batches do not fill every stream (3 ranks: an epoch of
// 4 batches leaves a round of 1). fp32: every weight
// within 1e-5 of the one-process value relative to max(|w|, RMS of the
// weights) — sums over ranks add the same terms in another order. bf16
// (bf16 weights, fp32 master weights and gradients): a master weight next
// to a bf16 rounding boundary may land one bf16 step (2⁻⁸ relative) on
// the other side, so up to 2⁻⁷ and for few weights.
func TestRunDataParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("several complete step-3 runs")
	}
	base := runConfig("")
	base.WhitenAdvantages = true
	for _, c := range []struct {
		ranks         int
		dt            kernels.DType
		actor, critic zero.Stage
		accum         int // per rank
		tol, fewTol   float64
		onlyLoRA      bool // actor LoRA adapters on a frozen base (--only-optimize-lora)
	}{
		{2, kernels.F32, 0, 0, 1, 1e-5, 1e-5, false},
		{2, kernels.F32, 1, 2, 1, 1e-5, 1e-5, false},
		{2, kernels.F32, 3, 3, 1, 1e-5, 1e-5, false},
		{3, kernels.F32, 2, 3, 1, 1e-5, 1e-5, false},
		{3, kernels.F32, 0, 1, 1, 1e-5, 1e-5, false},
		{2, kernels.F32, 3, 1, 2, 1e-5, 1e-5, false},
		{2, kernels.BF16, 3, 2, 1, 1e-5, 1.0 / 128, false},
		// ZeRO-3 partitions the actor's frozen base as well; the hybrid
		// engine gathers it and fuses the adapters for generation.
		{3, kernels.F32, 3, 0, 1, 1e-5, 1e-5, true},
	} {
		name := fmt.Sprintf("%d ranks × %d streams/%v/actor ZeRO-%d/critic ZeRO-%d", c.ranks, c.accum, c.dt, c.actor, c.critic)
		if c.onlyLoRA {
			name += "/only LoRA"
		}
		t.Run(name, func(t *testing.T) {
			one := base
			one.GradAccum = c.ranks * c.accum
			one.OnlyOptimizeLoRA = c.onlyLoRA
			want, wantRec := runRanks(t, 1, one, c.dt, 0, 0, c.onlyLoRA)
			many := one
			many.GradAccum = c.accum
			got, gotRec := runRanks(t, c.ranks, many, c.dt, c.actor, c.critic, c.onlyLoRA)
			if !(wantRec["kl"] > 0) || !(wantRec["ppo_steps"] > 0) {
				t.Fatalf("the reference run trained nothing: %v", wantRec)
			}
			names := []string{"actor", "critic", "EMA"}
			if c.onlyLoRA {
				names = []string{"actor", "critic", "EMA", "adapters"}
			}
			if len(got) != len(names) || len(want) != len(names) {
				t.Fatalf("%d and %d state buffers, want %v", len(got), len(want), names)
			}
			for i, name := range names {
				compareWeights(t, name, got[i], want[i], c.tol, c.fewTol)
			}
			for _, k := range []string{"reward_score", "kl", "actor_loss", "critic_loss", "unsup_loss", "actor_grad_norm", "critic_grad_norm", "ppo_steps"} {
				g, w := gotRec[k], wantRec[k]
				if math.Abs(g-w) > 1e-5*max(1, math.Abs(w)) {
					t.Errorf("metric %s: %v on %d ranks, %v in one process", k, g, c.ranks, w)
				}
			}
		})
	}
}

// compareWeights checks got against want: each weight within tol of want
// relative to max(|w|, RMS of want), and within fewTol for at most 0.1%
// of them.
func compareWeights(t *testing.T, what string, got, want []float32, tol, fewTol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d weights, want %d", what, len(got), len(want))
	}
	var ss float64
	for _, w := range want {
		ss += float64(w) * float64(w)
	}
	rms := math.Sqrt(ss / float64(len(want)))
	over, worst, at := 0, 0.0, 0
	for i := range want {
		d := math.Abs(float64(got[i])-float64(want[i])) / max(math.Abs(float64(want[i])), rms)
		if d > tol {
			over++
		}
		if d > worst {
			worst, at = d, i
		}
	}
	if worst > fewTol || float64(over) > 0.001*float64(len(want)) {
		t.Errorf("%s: %d of %d weights over %g, largest %.3g at %d (%v, want %v)", what, over, len(want), tol, worst, at, got[at], want[at])
	}
}
