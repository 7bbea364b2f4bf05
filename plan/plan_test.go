package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/ppo"
	"github.com/gochat-ai/gochat/sft"
)

func preset(t *testing.T, name string) *model.Config {
	t.Helper()
	c, err := model.PresetConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func stage125m(t *testing.T) Stage {
	return Stage{Model: preset(t, "opt-125m"), DType: kernels.F32, Batch: 4, GradAccum: 1,
		Sft: sft.Options{MaxSeqLen: 256, EvalBatch: 4, Dropout: true}}
}

// must returns e, panicking (failing the test) on an error.
func must(e *Estimate, err error) *Estimate {
	if err != nil {
		panic(err)
	}
	return e
}

// TestStageEstimate checks the parts of a step-1/2 estimate against the
// settings that drive them.
func TestStageEstimate(t *testing.T) {
	base := stage125m(t)
	n := int64(model.ParamCount(base.Model, false))
	e := must(base.Estimate())
	m := e.Models[0]
	if m.Weights != 4*n || m.Grads != 4*n || m.Moments != 8*n || m.Master != 0 {
		t.Errorf("fp32 full training: %+v", m)
	}
	for _, p := range e.Phases {
		if p.Bytes > e.Device {
			t.Errorf("phase %s %d above the device peak %d", p.Name, p.Bytes, e.Device)
		}
	}
	if e.Peak != e.Device+e.Runtime+e.Headroom || e.Runtime != Runtime {
		t.Errorf("peak %d = %d + %d + %d?", e.Peak, e.Device, e.Runtime, e.Headroom)
	}
	for _, c := range []struct {
		name  string
		edit  func(*Stage)
		check func(before, after Model) bool
	}{
		{"bf16: half the weights, the masters' low halves as much again, the same training state", func(s *Stage) { s.DType = kernels.BF16 },
			func(b, a Model) bool {
				return a.Weights == b.Weights/2 && a.Master == b.Weights/2 && a.Grads == b.Grads && a.Weights+a.Master == b.Weights
			}},
		{"checkpointing: fewer activations, the others are the full ones", func(s *Stage) { s.Sft.Checkpoint = true },
			func(b, a Model) bool { return a.Acts < b.Acts/2 && a.ActsOther == b.Acts && b.ActsOther == a.Acts }},
		{"LoRA only: no base gradients or moments", func(s *Stage) { s.LoRA, s.OnlyLoRA = lora.Config{Dim: 8}, true },
			func(b, a Model) bool { return a.Grads == 0 && a.Moments == 0 && a.LoRA > 0 && a.Weights == b.Weights }},
		{"LoRA on full training: adapters on top", func(s *Stage) { s.LoRA = lora.Config{Dim: 8} },
			func(b, a Model) bool { return a.Grads == b.Grads && a.Moments == b.Moments && a.LoRA > 0 }},
		{"a larger batch: more activations and logits", func(s *Stage) { s.Batch = 8 },
			func(b, a Model) bool { return a.Acts > b.Acts && a.Logits > b.Logits && a.Weights == b.Weights }},
		{"flash attention: lse[B,NH,T] instead of att[B,NH,T,T] in each of the 12 layers of the training pass, the rest the same",
			func(s *Stage) { s.FlashAttention = true },
			func(b, a Model) bool {
				return b.Acts-a.Acts >= 12*(4*12*256*256-4*12*256)*4 && a.ActsOther < b.ActsOther && a.Logits == b.Logits && a.Weights == b.Weights
			}},
		{"step 2: a value head, no logits", func(s *Stage) { s.Reward = true },
			func(b, a Model) bool { return a.Logits == 0 && a.Params == b.Params+768 }},
	} {
		s := base
		c.edit(&s)
		after := must(s.Estimate()).Models[0]
		if !c.check(m, after) {
			t.Errorf("%s:\nbefore %+v\nafter  %+v", c.name, m, after)
		}
	}
	bad := base
	bad.Sft.MaxSeqLen = 4096
	if _, err := bad.Estimate(); err == nil || !strings.Contains(err.Error(), "--max-seq-len 4096") {
		t.Errorf("too long: %v", err)
	}
	bad = base
	bad.LoRA = lora.Config{Dim: 8, ModuleName: "nothing"}
	if _, err := bad.Estimate(); err == nil || !strings.Contains(err.Error(), "--lora-dim") {
		t.Errorf("bad LoRA pattern: %v", err)
	}
}

func ppo125m(t *testing.T) PPO {
	c := preset(t, "opt-125m")
	return PPO{Actor: c, Critic: c, Reward: c, DType: kernels.F32, GenBatch: 4, TrainBatch: 4, GenerationBatches: 1,
		PromptLen: 128, AnswerLen: 64, RewardExtra: 13}
}

// TestPPOEstimate checks step 3's models and phases.
func TestPPOEstimate(t *testing.T) {
	p := ppo125m(t)
	e := must(p.Estimate())
	byName := map[string]Model{}
	for _, m := range e.Models {
		byName[m.Name] = m
	}
	a, ref, cr, rm := byName["actor"], byName["reference"], byName["critic"], byName["reward"]
	if ref.Grads != 0 || rm.Grads != 0 || rm.Acts != 0 || a.Grads == 0 || cr.Grads == 0 || a.KVCache == 0 || a.Workspace != 0 {
		t.Errorf("models %+v", e.Models)
	}
	phase := map[string]int64{}
	for _, ph := range e.Phases {
		phase[ph.Name] = ph.Bytes
	}
	if phase["generate"]-phase["train"] != a.KVCache {
		t.Errorf("generation adds %d, want the KV cache %d", phase["generate"]-phase["train"], a.KVCache)
	}

	q := p
	q.KeepCache = true
	eK := must(q.Estimate())
	phaseK := map[string]int64{}
	for _, ph := range eK.Phases {
		phaseK[ph.Name] = ph.Bytes
	}
	for _, x := range []*Estimate{e, eK} {
		if x.Headroom <= 0 || x.Headroom > x.Device*GCPercent/100 {
			t.Errorf("step 3's headroom %d is outside (0, GOGC%%] of %d", x.Headroom, x.Device)
		}
	}
	// Saving with LoRA on both models and the EMA makes three copies one
	// after the other: the two smaller ones are headroom.
	sv := p
	sv.ActorLoRA, sv.CriticLoRA, sv.Opts.EnableEMA = lora.Config{Dim: 8}, lora.Config{Dim: 8}, true
	es := must(sv.Estimate())
	if w := es.Models[0].Weights; es.Headroom < 2*w-w/10 {
		t.Errorf("headroom %d, want about two fused copies (%d each)", es.Headroom, w)
	}
	if phaseK["train"] != phase["train"]+a.KVCache {
		t.Errorf("--keep-inference-cache keeps the cache through training: %d vs %d", phaseK["train"], phase["train"])
	}

	q = p
	q.Opts = ppo.Options{EnableEMA: true}
	if ema := must(q.Estimate()).Models[0].EMA; ema != a.Weights {
		t.Errorf("fp32 EMA of the full actor: %d, want %d", ema, a.Weights)
	}
	q.ActorLoRA, q.OnlyLoRA, q.DType = lora.Config{Dim: 8}, true, kernels.BF16
	qe := must(q.Estimate())
	lp, _, _ := lora.Size(q.Actor, q.ActorLoRA)
	if qe.Models[0].EMA != int64(4*lp) || qe.Models[0].Workspace != qe.Models[0].Weights || qe.Models[0].Grads != 0 {
		t.Errorf("LoRA-only bf16 actor: %+v", qe.Models[0])
	}
	if qe.Models[2].Grads == 0 {
		t.Error("the critic (no adapters) is trained in full under --only-optimize-lora")
	}

	bad := p
	bad.PromptLen = 4096
	if _, err := bad.Estimate(); err == nil || !strings.Contains(err.Error(), "--max-prompt-seq-len + --max-answer-seq-len") {
		t.Errorf("too long: %v", err)
	}
}

// TestParallel checks the ZeRO partitioning of a per-GPU estimate.
func TestParallel(t *testing.T) {
	s := stage125m(t)
	one := must(s.Estimate()).Models[0]
	for _, c := range []struct {
		p                              Parallel
		weights, grads, moments, total int64 // divisors (0: none left)
	}{
		{Parallel{Ranks: 8, Stage: 0}, 1, 1, 1, 0},
		{Parallel{Ranks: 8, Stage: 1}, 1, 1, 8, 0},
		{Parallel{Ranks: 8, Stage: 2}, 1, 8, 8, 0},
		{Parallel{Ranks: 8, Stage: 3}, 8, 8, 8, 0},
		{Parallel{Ranks: 8, Stage: 3, Offload: true}, 8, 8, 0, 0},
	} {
		s.Parallel = c.p
		e := must(s.Estimate())
		m := e.Models[0]
		div := func(x, d int64) int64 {
			if d == 0 {
				return 0
			}
			return x / d
		}
		if m.Weights != div(one.Weights, c.weights) || m.Grads != div(one.Grads, c.grads) || m.Moments != div(one.Moments, c.moments) {
			t.Errorf("%+v: %+v", c.p, m)
		}
		if e.Runtime != GPUReserve || e.Headroom != 0 {
			t.Errorf("%+v: a GPU estimate has the GPU reserve and no GC headroom: %+v", c.p, e)
		}
	}
	// Generation under ZeRO-3 gathers the weights (split by tensor
	// parallelism), with or without LoRA.
	p := ppo125m(t)
	p.Parallel = Parallel{Ranks: 8, ActorStage: 3, CriticStage: 3, InferenceTP: 2}
	a := must(p.Estimate()).Models[0]
	full := int64(model.ParamCount(p.Actor, false) * 4)
	if a.Workspace != full/2 || a.Weights != full/8 {
		t.Errorf("ZeRO-3 actor: %+v", a)
	}
	// As gochat runs ZeRO-3 (mpirun): the reference and reward models stay
	// whole, and the experience phase holds the critic gathered.
	p.Parallel = Parallel{Ranks: 4, ActorStage: 3, CriticStage: 3, Gochat: true}
	g := must(p.Estimate())
	ds := p
	ds.Parallel.Gochat = false
	d := must(ds.Estimate())
	for i, name := range []string{"actor", "reference", "critic", "reward"} {
		want := d.Models[i].Weights
		if name == "reference" || name == "reward" {
			want *= 4
		}
		if g.Models[i].Weights != want {
			t.Errorf("gochat ZeRO-3 on 4 ranks: %s holds %d weight bytes, want %d", name, g.Models[i].Weights, want)
		}
	}
	critic := int64(model.ParamCount(p.Critic, true) * 4)
	phase := func(e *Estimate, name string) int64 {
		for _, ph := range e.Phases {
			if ph.Name == name {
				return ph.Bytes
			}
		}
		t.Fatalf("no phase %s", name)
		return 0
	}
	frozenExtra := g.Models[1].Weights - d.Models[1].Weights + g.Models[3].Weights - d.Models[3].Weights
	if got := phase(g, "generate") - phase(d, "generate") - frozenExtra; got != critic-critic/4 {
		t.Errorf("gochat ZeRO-3: generation holds %d bytes more than the whole frozen models, want the gathered critic's %d", got, critic-critic/4)
	}
}

// TestFit checks the changes Fit proposes: each fits, single changes come
// in the order of how little they change training, a combination when no
// single change fits, nothing when nothing can.
func TestFit(t *testing.T) {
	s := stage125m(t)
	e := must(s.Estimate())
	if got := s.Fit(Budget{Host: e.Peak + 1}); len(got) == 0 {
		t.Error("a step that fits still gets its cheapest changes (each fits)")
	}
	budget := e.Peak - e.Peak/20
	changes := s.Fit(Budget{Host: budget})
	if len(changes) == 0 {
		t.Fatal("no change fits a 5% smaller budget")
	}
	order := []string{"--gradient-checkpointing", "--per-device-eval-batch-size", "--dtype", "--per-device-train-batch-size", "--lora-dim"}
	last := -1
	for _, c := range changes {
		if c.Peak > budget {
			t.Errorf("%v does not fit %d", c, budget)
		}
		i := -1
		for j, o := range order {
			if strings.HasPrefix(c.Flags[0], o) {
				i = j
			}
		}
		if i <= last {
			t.Errorf("changes out of order: %v", changes)
		}
		last = i
	}
	if strings.Join(changes[0].Flags, " ") != "--gradient-checkpointing" {
		t.Errorf("first change %v, want checkpointing", changes[0])
	}
	// The batch change keeps the effective batch.
	for _, c := range changes {
		if strings.HasPrefix(c.Flags[0], "--per-device-train-batch-size") && len(c.Flags) != 2 {
			t.Errorf("%v: halving the micro-batch without more accumulation", c)
		}
	}

	// Step 3 of opt-1.3b + opt-350m in fp32 on 24 GB: no single change
	// fits, a combination does.
	p := PPO{Actor: preset(t, "opt-1.3b"), Critic: preset(t, "opt-350m"), Reward: preset(t, "opt-350m"), DType: kernels.F32,
		GenBatch: 4, TrainBatch: 4, GenerationBatches: 1, PromptLen: 256, AnswerLen: 256}
	const gb = 1_000_000_000
	got := p.Fit(Budget{Host: 24 * gb})
	if len(got) != 1 || got[0].Peak > 24*gb || !strings.Contains(strings.Join(got[0].Flags, " "), "--only-optimize-lora") {
		t.Errorf("ppo 1.3b fp32 in 24 GB: %v", got)
	}
	if got := p.Fit(Budget{Host: 1 * gb}); got != nil {
		t.Errorf("1 GB: %v, want nothing", got)
	}
}

func TestHalvings(t *testing.T) {
	for n, want := range map[int]string{1: "[]", 2: "[1]", 16: "[8 4 2 1]", 6: "[3 2 1]"} {
		if got := fmt.Sprint(halvings(n)); got != want {
			t.Errorf("halvings(%d) = %s, want %s", n, got, want)
		}
	}
}
