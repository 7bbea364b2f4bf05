package ppo

import (
	"errors"
	"fmt"
)

// Config holds the PPO hyperparameters of step 3. The zero value is not
// useful; start from DefaultConfig. Field comments name DeepSpeed-Chat's
// setting.
type Config struct {
	// KLCtl weighs the per-token KL penalty in the rewards (kl_ctl).
	KLCtl float64
	// ClipRewardValue clips the reward-model score to ±ClipRewardValue
	// (clip_reward_value).
	ClipRewardValue float64
	// ClipRange is the policy ratio clip ε: ratios are clipped to [1−ε, 1+ε]
	// (cliprange).
	ClipRange float64
	// ClipRangeValue is the value clip ε_v: new values are clipped to
	// V_old ± ε_v (cliprange_value).
	ClipRangeValue float64
	// Gamma is the discount γ (gamma).
	Gamma float64
	// Lambda is the GAE λ (lam).
	Lambda float64
	// WhitenAdvantages normalises the advantages to zero mean and unit
	// variance over the counted answer tokens of a batch (Whiten).
	// DeepSpeed-Chat does not.
	WhitenAdvantages bool
	// ScoreScaling divides each reward-model score by the running standard
	// deviation of all scores so far, before clipping (Hugging Face TRL's
	// use_score_scaling; reward scaling in "Implementation Matters in Deep
	// RL"). ScoreNorm also subtracts the running mean (use_score_norm; it
	// needs ScoreScaling). DeepSpeed-Chat does neither.
	ScoreScaling, ScoreNorm bool

	// ActorLR and CriticLR are the peak learning rates
	// (actor_learning_rate, critic_learning_rate).
	ActorLR, CriticLR float64
	// PPOEpochs is how many passes are made over each batch of experience
	// (ppo_epochs).
	PPOEpochs int
	// GenerationBatches is how many generated batches are collected before
	// training on them (generation_batches).
	GenerationBatches int
	// UnsupCoef weighs the unsupervised LM loss of mixture training
	// (unsup_coef).
	UnsupCoef float64
	// EMABeta is the actor EMA decay β: θ_ema = β·θ_ema + (1−β)·θ after every
	// actor step (moving_average's beta).
	EMABeta float64
	// ScoreEMAAlpha is the decay of the logged reward-score EMA (DeepSpeed-
	// Chat's ExponentialMovingAverage alpha).
	ScoreEMAAlpha float64
}

// DefaultConfig returns DeepSpeed-Chat's defaults (REFERENCE.md §5).
func DefaultConfig() Config {
	return Config{
		KLCtl:             0.1,
		ClipRewardValue:   5,
		ClipRange:         0.2,
		ClipRangeValue:    0.2,
		Gamma:             1.0,
		Lambda:            0.95,
		ActorLR:           9.65e-6,
		CriticLR:          5e-6,
		PPOEpochs:         1,
		GenerationBatches: 1,
		UnsupCoef:         27.8,
		EMABeta:           0.992,
		ScoreEMAAlpha:     0.9,
	}
}

// Validate reports every field out of its range. The comparisons are
// written so that NaN fails them.
func (c Config) Validate() error {
	var errs []error
	bad := func(name string, v any, want string) {
		errs = append(errs, fmt.Errorf("ppo: %s = %v, want %s", name, v, want))
	}
	if !(c.KLCtl >= 0) {
		bad("kl_ctl", c.KLCtl, ">= 0")
	}
	if !(c.ClipRewardValue > 0) {
		bad("clip_reward_value", c.ClipRewardValue, "> 0")
	}
	if !(c.ClipRange > 0 && c.ClipRange < 1) {
		bad("cliprange", c.ClipRange, "in (0, 1)")
	}
	if !(c.ClipRangeValue > 0) {
		bad("cliprange_value", c.ClipRangeValue, "> 0")
	}
	if !(c.Gamma >= 0 && c.Gamma <= 1) {
		bad("gamma", c.Gamma, "in [0, 1]")
	}
	if !(c.Lambda >= 0 && c.Lambda <= 1) {
		bad("lam", c.Lambda, "in [0, 1]")
	}
	if !(c.ActorLR > 0) {
		bad("actor_learning_rate", c.ActorLR, "> 0")
	}
	if !(c.CriticLR > 0) {
		bad("critic_learning_rate", c.CriticLR, "> 0")
	}
	if c.ScoreNorm && !c.ScoreScaling {
		bad("score norm", c.ScoreNorm, "score scaling on as well")
	}
	if c.PPOEpochs < 1 {
		bad("ppo_epochs", c.PPOEpochs, ">= 1")
	}
	if c.GenerationBatches < 1 {
		bad("generation_batches", c.GenerationBatches, ">= 1")
	}
	if !(c.UnsupCoef >= 0) {
		bad("unsup_coef", c.UnsupCoef, ">= 0")
	}
	if !(c.EMABeta >= 0 && c.EMABeta <= 1) {
		bad("ema beta", c.EMABeta, "in [0, 1]")
	}
	if !(c.ScoreEMAAlpha >= 0 && c.ScoreEMAAlpha < 1) {
		bad("reward score ema alpha", c.ScoreEMAAlpha, "in [0, 1)")
	}
	return errors.Join(errs...)
}
