package ppo_test

import (
	"fmt"

	"github.com/gochat-ai/gochat/ppo"
)

// One PPO update's math on a batch of two sequences of S = 5 tokens: a
// prompt of P = 2 tokens (Start = 1) and 3 answer positions. The second
// answer stops after one token.
func Example() {
	const B, S = 2, 5
	attn := []int32{
		1, 1, 1, 1, 1,
		1, 1, 1, 0, 0,
	}
	s := ppo.Shape{B: B, T: S - 1, Start: 1}
	mask := ppo.ActionMask(attn, B, S)
	e := ppo.Experience[float32]{Shape: s,
		LogProbs:    []float32{0, -1, -2, -1, 0, -1, -3, -9},
		RefLogProbs: []float32{0, -1.5, -2, -1, 0, -1, -2, -9},
		Values:      []float32{0, 0.5, 0.5, 1, 0, 0.5, 0.25, 0},
		Scores:      []float32{2, -1},
		Mask:        mask,
	}
	cfg := ppo.DefaultConfig()
	est := ppo.Estimate(cfg, e)
	fmt.Println("ends", est.Ends)
	fmt.Printf("rewards %.3g\n", est.Rewards)

	// The actor's log-probabilities now (here: unchanged, ratio 1).
	dlogp := make([]float32, B*s.T)
	loss, clipFrac := ppo.ActorLoss(dlogp, e.LogProbs, e.LogProbs, est.Advantages, mask, s, cfg.ClipRange)
	fmt.Printf("actor loss %.4f clipped %.2f\n", loss, clipFrac)
	g := ppo.ActorGrad(dlogp, B, s.T) // model.Grad{DLosses: [B,S]} for the actor's Backward
	fmt.Println("DLosses per row", len(g.DLosses)/B)
	// Output:
	// ends [4 2]
	// rewards [0 -0.05 0 2 0 -1 0 0]
	// actor loss -0.5694 clipped 0.00
	// DLosses per row 5
}
