package ppo

import "math"

// ActorLoss is DeepSpeed-Chat's actor_loss_fn, the clipped surrogate
// objective, over the counted positions (t ≥ Start, mask ≠ 0; n of them):
//
//	ratio = exp(logp − oldLogp)
//	L     = Σ max(−A·ratio, −A·clip(ratio, 1−ε, 1+ε)) / n
//
// logp are the actor's log-probabilities now, oldLogp those at generation,
// adv the advantages (Estimates.Advantages); all [B,T]. ε is clipRange.
//
// dlogp ([B,T], overwritten, zero at uncounted positions; may be nil) is
// ∂L/∂logp: −A·ratio/n where the unclipped term is taken, 0 where the clipped
// term is strictly larger (the ratio is then outside [1−ε, 1+ε], so the clip
// passes no gradient). The model's backward takes the gradient with respect
// to the loss −logp, so pass −dlogp as model.Grad.DLosses (ActorGrad).
//
// clipFrac is the fraction of counted positions where the clipped term is
// strictly larger (trlx's pg_clipfrac). With no counted position the loss,
// clipFrac and dlogp are 0 (DeepSpeed-Chat would divide by zero).
func ActorLoss[F Float](dlogp, logp, oldLogp, adv []F, mask []int32, s Shape, clipRange float64) (loss, clipFrac float64) {
	s.must(len(logp), len(oldLogp), len(adv), len(mask))
	if dlogp != nil {
		s.must(len(dlogp))
		clear(dlogp)
	}
	n := counted(mask, s)
	if n == 0 {
		return 0, 0
	}
	inv := 1 / float64(n)
	clipped := 0
	forCounted(mask, s, func(i int) {
		a := float64(adv[i])
		ratio := math.Exp(float64(logp[i]) - float64(oldLogp[i]))
		l1 := -a * ratio
		l2 := -a * clip(ratio, 1-clipRange, 1+clipRange)
		if l2 > l1 {
			loss += l2
			clipped++
			return
		}
		loss += l1
		if dlogp != nil {
			dlogp[i] = F(-a * ratio * inv)
		}
	})
	return loss * inv, float64(clipped) * inv
}

// CriticLoss is DeepSpeed-Chat's critic_loss_fn, the clipped value loss,
// over the counted positions (t ≥ Start, mask ≠ 0; n of them):
//
//	V̂ = clip(V, V_old − ε_v, V_old + ε_v)
//	L  = 0.5·Σ max((V − R)², (V̂ − R)²) / n
//
// values are the critic's values now (V), oldValues those at generation
// zeroed after the end (Estimates.OldValues), returns R (Estimates.Returns);
// all [B,T]. ε_v is clipRange.
//
// dvalues ([B,T], overwritten, zero at uncounted positions; may be nil) is
// ∂L/∂V: (V − R)/n where the unclipped term is taken, 0 where the clipped
// term is strictly larger (V is then outside V_old ± ε_v, so the clip passes
// no gradient). Pass it as model.Grad.DValues (CriticGrad).
//
// clipFrac is the fraction of counted positions where the clipped term is
// strictly larger (trlx's vf_clipfrac). With no counted position the loss,
// clipFrac and dvalues are 0.
func CriticLoss[F Float](dvalues, values, oldValues, returns []F, mask []int32, s Shape, clipRange float64) (loss, clipFrac float64) {
	s.must(len(values), len(oldValues), len(returns), len(mask))
	if dvalues != nil {
		s.must(len(dvalues))
		clear(dvalues)
	}
	n := counted(mask, s)
	if n == 0 {
		return 0, 0
	}
	inv := 1 / float64(n)
	clipped := 0
	forCounted(mask, s, func(i int) {
		v, vo, r := float64(values[i]), float64(oldValues[i]), float64(returns[i])
		vc := clip(v, vo-clipRange, vo+clipRange)
		l1, l2 := (v-r)*(v-r), (vc-r)*(vc-r)
		if l2 > l1 {
			loss += l2
			clipped++
			return
		}
		loss += l1
		if dvalues != nil {
			dvalues[i] = F((v - r) * inv)
		}
	})
	return 0.5 * loss * inv, float64(clipped) * inv
}

// KL is the logged estimate of KL(actor‖ref): the mean of logp − refLogp
// over the counted answer positions (t ≥ Start, mask ≠ 0); 0 with none.
// logp and refLogp are [B,T].
func KL[F Float](logp, refLogp []F, mask []int32, s Shape) float64 {
	s.must(len(logp), len(refLogp), len(mask))
	var sum float64
	n := 0
	forCounted(mask, s, func(i int) {
		sum += float64(logp[i]) - float64(refLogp[i])
		n++
	})
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
