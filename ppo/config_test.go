package ppo

import (
	"math"
	"strings"
	"testing"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	want := Config{KLCtl: 0.1, ClipRewardValue: 5, ClipRange: 0.2, ClipRangeValue: 0.2, Gamma: 1, Lambda: 0.95,
		ActorLR: 9.65e-6, CriticLR: 5e-6, PPOEpochs: 1, GenerationBatches: 1, UnsupCoef: 27.8,
		EMABeta: 0.992, ScoreEMAAlpha: 0.9}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		flag string
		mod  func(*Config)
	}{
		{"kl_ctl", func(c *Config) { c.KLCtl = -0.1 }},
		{"kl_ctl", func(c *Config) { c.KLCtl = math.NaN() }},
		{"clip_reward_value", func(c *Config) { c.ClipRewardValue = 0 }},
		{"cliprange", func(c *Config) { c.ClipRange = 1 }},
		{"cliprange_value", func(c *Config) { c.ClipRangeValue = -1 }},
		{"gamma", func(c *Config) { c.Gamma = 1.01 }},
		{"lam", func(c *Config) { c.Lambda = -0.5 }},
		{"actor_learning_rate", func(c *Config) { c.ActorLR = 0 }},
		{"critic_learning_rate", func(c *Config) { c.CriticLR = math.Inf(-1) }},
		{"ppo_epochs", func(c *Config) { c.PPOEpochs = 0 }},
		{"generation_batches", func(c *Config) { c.GenerationBatches = -1 }},
		{"unsup_coef", func(c *Config) { c.UnsupCoef = -1 }},
		{"ema beta", func(c *Config) { c.EMABeta = 2 }},
		{"reward score ema alpha", func(c *Config) { c.ScoreEMAAlpha = 1 }},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag+" =") {
			t.Errorf("%s: error %v", tc.flag, err)
		}
	}
	c := DefaultConfig()
	c.Gamma, c.PPOEpochs = 2, 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "gamma") || !strings.Contains(err.Error(), "ppo_epochs") {
		t.Errorf("two bad fields: error %v", err)
	}
}
