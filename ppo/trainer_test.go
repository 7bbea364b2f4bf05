package ppo

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
)

type trainerRig struct {
	dev                 kernels.Device
	actor, ref, critic  *model.Model
	reward              *model.Model
	engine              *hybridengine.Engine[*model.Model]
	trainer             *Trainer
	cfg                 Config
	opts                Options
	engineOpts          hybridengine.Options
	initActor, initCrit []float32
}

func loadModel(t testing.TB, dev kernels.Device, dir string, vh string) *model.Model {
	t.Helper()
	return loadModelAs(t, dev, dir, vh, kernels.F32)
}

// loadModelAs is loadModel with weights of dtype dt.
func loadModelAs(t testing.TB, dev kernels.Device, dir string, vh string, dt kernels.DType) *model.Model {
	t.Helper()
	m, err := model.Load(dev, dir, model.LoadOptions{ValueHead: vh, DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testModels loads the tiny preln actor and reference (model/testdata) and
// a critic and reward model from reward/testdata/preln (same architecture,
// vocabulary 96, with a value head) onto a new CPU device.
func testModels(t testing.TB) (kernels.Device, [4]*model.Model) {
	t.Helper()
	dev, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	return dev, testModelsOn(t, dev, kernels.F32)
}

// testModelsOn loads testModels' models onto dev with weights of dtype
// dt.
func testModelsOn(t testing.TB, dev kernels.Device, dt kernels.DType) [4]*model.Model {
	t.Helper()
	actorDir := filepath.Join("..", "model", "testdata", "golden", "preln")
	rmDir := filepath.Join("..", "reward", "testdata", "preln")
	return [4]*model.Model{loadModelAs(t, dev, actorDir, "no", dt), loadModelAs(t, dev, actorDir, "no", dt),
		loadModelAs(t, dev, rmDir, "yes", dt), loadModelAs(t, dev, rmDir, "yes", dt)}
}

// newRig loads the tiny preln actor and reference (model/testdata) and a
// critic and reward model from reward/testdata/preln (same architecture,
// vocabulary 96, with a value head).
func newRig(t testing.TB, cfg Config, opts Options, eo hybridengine.Options) *trainerRig {
	t.Helper()
	dev, ms := testModels(t)
	r := &trainerRig{dev: dev, cfg: cfg, opts: opts, engineOpts: eo, actor: ms[0], ref: ms[1], critic: ms[2], reward: ms[3]}
	var err error
	if r.engine, err = hybridengine.New(r.actor, nil, eo); err != nil {
		t.Fatal(err)
	}
	if r.trainer, err = NewTrainer(cfg, opts, Models{Actor: r.engine, Ref: r.ref, Critic: r.critic, Reward: r.reward}); err != nil {
		t.Fatal(err)
	}
	r.initActor, r.initCrit = params(r.actor), params(r.critic)
	return r
}

// params reads a model's flat parameters.
func params(m interface {
	Device() kernels.Device
	Parameters() *model.Params
}) []float32 {
	flat := m.Parameters().Flat
	out := make([]float32, flat.Len())
	m.Device().ReadF32(out, flat)
	return out
}

// testPrompts returns B left-padded prompts of T positions with random
// lengths 1..T and random tokens (not PAD or EOS).
func testPrompts(seed uint64, b, t int) hybridengine.Prompts {
	rng := rand.New(rand.NewPCG(seed, 7))
	p := hybridengine.Prompts{B: b, T: t, IDs: make([]int32, b*t), Mask: make([]int32, b*t)}
	for r := range b {
		n := 1 + rng.IntN(t)
		for i := range t {
			if i < t-n {
				p.IDs[r*t+i] = 1
				continue
			}
			p.IDs[r*t+i], p.Mask[r*t+i] = int32(3+rng.IntN(93)), 1
		}
	}
	return p
}

func testConfig() Config {
	c := DefaultConfig()
	c.ActorLR, c.CriticLR = 1e-3, 1e-3
	return c
}

var sampledOpts = hybridengine.Options{MaxAnswerLen: 8,
	Sample: model.SampleOptions{Temperature: 1, TopP: 1, Seed: 5}}

func TestGenerateExperience(t *testing.T) {
	eo := sampledOpts
	eo.Sample.Temperature = 4 // EOS often enough to see dropped and short rows
	r := newRig(t, testConfig(), Options{MaxGradNorm: 1}, eo)
	// Look (deterministically) for a batch with a dropped row and a kept
	// row that ended before the longest answer.
	var bt *Batch
	for k := range 200 {
		p := testPrompts(uint64(k), 8, 5)
		p.Rows = make([]uint64, p.B)
		for b := range p.B {
			p.Rows[b] = uint64(k*p.B + b)
		}
		got, err := r.trainer.GenerateExperience(p)
		if errors.Is(err, ErrNoAnswers) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		short := false
		for _, n := range got.AnswerLens {
			short = short || n < got.Rollout.AnswerLen
		}
		if got.Gen.Dropped > 0 && short {
			bt = got
			t.Logf("batch %d: %d dropped, answer lengths %v", k, got.Gen.Dropped, got.AnswerLens)
			break
		}
	}
	if bt == nil {
		t.Fatal("no batch with a dropped and a short row")
	}
	if r.engine.Mode() != hybridengine.TrainMode {
		t.Errorf("engine left in %v mode", r.engine.Mode())
	}
	ro, e := bt.Rollout, bt.Exp
	B, S, P := len(bt.Kept), ro.T, ro.PromptLen
	if e.B != B || e.T != S-1 || e.Start != P-1 || bt.S != S {
		t.Fatalf("shape %+v S=%d for %d kept rows of %d×%d (prompt %d)", e.Shape, bt.S, B, ro.B, ro.T, P)
	}
	for _, n := range [][2]int{{len(e.LogProbs), B * e.T}, {len(e.RefLogProbs), B * e.T}, {len(e.Values), B * e.T},
		{len(e.Mask), B * e.T}, {len(e.Scores), B}, {len(bt.Seq), B * S}, {len(bt.Attn), B * S}} {
		if n[0] != n[1] {
			t.Fatalf("slice of %d elements, want %d", n[0], n[1])
		}
	}
	if bt.Gen.Rows != ro.B || bt.Gen.Dropped != ro.B-B {
		t.Errorf("gen stats %+v for %d kept of %d", bt.Gen, B, ro.B)
	}
	dropped := 0
	for b, n := range ro.AnswerLens {
		if n <= 1 {
			dropped++
			if slices.Contains(bt.Kept, b) {
				t.Errorf("row %d with %d answer tokens kept", b, n)
			}
		}
	}
	if dropped != ro.B-B {
		t.Errorf("dropped %d rows, want %d", ro.B-B, dropped)
	}
	for i, b := range bt.Kept {
		if !slices.Equal(bt.Seq[i*S:(i+1)*S], ro.Seq[b*S:(b+1)*S]) || !slices.Equal(bt.Attn[i*S:(i+1)*S], ro.Mask[b*S:(b+1)*S]) {
			t.Fatalf("kept row %d (rollout row %d) differs from the rollout", i, b)
		}
		if !slices.Equal(e.Mask[i*e.T:(i+1)*e.T], bt.Attn[i*S+1:(i+1)*S]) {
			t.Errorf("row %d: mask is not attn[:, 1:]", i)
		}
		n := 0
		for _, m := range e.Mask[i*e.T+e.Start : (i+1)*e.T] {
			n += int(m)
		}
		if n != ro.AnswerLens[b] || bt.AnswerLens[i] != n {
			t.Errorf("row %d: %d counted answer positions, %d generated", i, n, ro.AnswerLens[b])
		}
		// The recomputed actor log-probs equal the generation log-probs.
		for j := range ro.AnswerLens[b] {
			got, want := e.LogProbs[i*e.T+e.Start+j], ro.LogProbs[b*ro.AnswerLen+j]
			if math.Abs(float64(got-want)) > 1e-5 {
				t.Errorf("row %d answer token %d: logp %v, generation %v", i, j, got, want)
			}
		}
		// Same weights: the reference's log-probs are the actor's.
		if !slices.Equal(e.LogProbs[i*e.T:(i+1)*e.T], e.RefLogProbs[i*e.T:(i+1)*e.T]) {
			t.Errorf("row %d: reference log-probs differ from the actor's", i)
		}
	}
	// The score is the reward model's value at the last real token (scored
	// without the left padding: equal up to rounding).
	a := must(r.reward.NewActs(B, S, model.ActsOptions{NoLogits: true}))
	if err := r.reward.Forward(a, model.Batch{IDs: bt.Seq, Mask: bt.Attn}); err != nil {
		t.Fatal(err)
	}
	v, _ := r.reward.Values(a)
	for i, b := range bt.Kept {
		last := P + ro.AnswerLens[b] - 1
		if math.Abs(float64(e.Scores[i]-v[i*S+last])) > 1e-5 {
			t.Errorf("row %d: score %v, want value %v at %d", i, e.Scores[i], v[i*S+last], last)
		}
	}
	// KL = 0 at step 0, so the rewards are the clipped scores at the ends.
	if kl := KL(e.LogProbs, e.RefLogProbs, e.Mask, e.Shape); kl != 0 {
		t.Errorf("KL = %v at step 0", kl)
	}
	est := Estimate(r.cfg, e)
	for i := range B {
		for tt := range e.T {
			want := float32(0)
			if tt == est.Ends[i]-1 {
				want = float32(clip(float64(e.Scores[i]), -r.cfg.ClipRewardValue, r.cfg.ClipRewardValue))
			}
			if got := est.Rewards[i*e.T+tt]; got != want {
				t.Errorf("row %d: reward[%d] = %v, want %v", i, tt, got, want)
			}
		}
	}
}

func TestGenerateExperienceNoAnswers(t *testing.T) {
	eo := sampledOpts
	eo.MaxAnswerLen = 1
	r := newRig(t, testConfig(), Options{}, eo)
	_, err := r.trainer.GenerateExperience(testPrompts(2, 3, 4))
	if !errors.Is(err, ErrNoAnswers) {
		t.Fatalf("got %v, want ErrNoAnswers", err)
	}
	if r.engine.Mode() != hybridengine.TrainMode {
		t.Errorf("engine left in %v mode", r.engine.Mode())
	}
}

// runSteps generates one batch and takes n TrainSteps on it.
func runSteps(t *testing.T, r *trainerRig, n int, unsup *UnsupBatch) []StepStats {
	t.Helper()
	bt, err := r.trainer.GenerateExperience(testPrompts(3, 6, 5))
	if err != nil {
		t.Fatal(err)
	}
	var out []StepStats
	for range n {
		st, err := r.trainer.TrainStep(bt, unsup)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

func TestTrainStep(t *testing.T) {
	cfg := testConfig()
	cfg.EMABeta = 0.5
	r := newRig(t, cfg, Options{MaxGradNorm: 1, ActorDropout: true, CriticDropout: true, EnableEMA: true, Seed: 9}, sampledOpts)
	refBefore, rewBefore := params(r.ref), params(r.reward)
	st := runSteps(t, r, 1, nil)[0]
	t.Logf("%+v", st)
	if slices.Equal(params(r.actor), r.initActor) {
		t.Error("actor weights unchanged by TrainStep")
	}
	if slices.Equal(params(r.critic), r.initCrit) {
		t.Error("critic weights unchanged by TrainStep")
	}
	if !slices.Equal(params(r.ref), refBefore) || !slices.Equal(params(r.reward), rewBefore) {
		t.Error("frozen reference or reward weights changed")
	}
	if r.ref.Grads != nil || r.reward.Grads != nil {
		t.Error("frozen models have gradients")
	}
	if st.TrainSeconds <= 0 || st.TrainTokens <= 0 || st.CriticLoss <= 0 || st.ActorGradNorm <= 0 || st.CriticGradNorm <= 0 || st.ActorLR != r.cfg.ActorLR {
		t.Errorf("stats %+v", st)
	}
	// EMA with β = 0.5 after one actor step: (θ0 + θ1) / 2.
	ema := make([]float32, r.actor.NumParams())
	flat, lo := r.trainer.EMA()
	if lo != nil {
		t.Error("EMA LoRA buffer without LoRA")
	}
	r.dev.ReadF32(ema, flat)
	now := params(r.actor)
	for i := range ema {
		want := 0.5*r.initActor[i] + 0.5*now[i]
		if math.Abs(float64(ema[i]-want)) > 1e-6*(1+math.Abs(float64(want))) {
			t.Fatalf("ema[%d] = %v, want %v", i, ema[i], want)
		}
	}
}

// TestTrainStepDeterministic runs two identical rigs with dropout on and
// mixture training for two steps: every statistic and every weight agrees
// bit for bit; a third rig with another dropout seed ends elsewhere (so the
// seed reaches the dropout masks, and the comparison could fail).
func TestTrainStepDeterministic(t *testing.T) {
	unsup := &UnsupBatch{B: 2, T: 6, IDs: []int32{5, 6, 7, 8, 9, 10, 1, 1, 20, 21, 22, 23},
		Mask: []int32{1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}}
	var stats [3][]StepStats
	var weights [3][2][]float32
	for k, seed := range []uint64{3, 3, 4} {
		opts := Options{MaxGradNorm: 1, ActorDropout: true, CriticDropout: true, Seed: seed}
		r := newRig(t, testConfig(), opts, sampledOpts)
		stats[k] = runSteps(t, r, 2, unsup)
		weights[k] = [2][]float32{params(r.actor), params(r.critic)}
		if slices.Equal(weights[k][0], r.initActor) || slices.Equal(weights[k][1], r.initCrit) {
			t.Fatalf("rig %d: weights unchanged", k)
		}
	}
	for i := range stats[0] {
		a, b := stats[0][i], stats[1][i]
		a.TrainSeconds, b.TrainSeconds = 0, 0
		if a != b {
			t.Errorf("step %d: %+v vs %+v", i, a, b)
		}
		for _, v := range []float64{a.ActorLoss, a.CriticLoss, a.UnsupLoss, a.ActorGradNorm, a.CriticGradNorm} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("step %d: non-finite statistic in %+v", i, a)
			}
		}
		if !(a.UnsupLoss > 0) {
			t.Errorf("step %d: unsupervised loss %v", i, a.UnsupLoss)
		}
	}
	if !slices.Equal(weights[0][0], weights[1][0]) || !slices.Equal(weights[0][1], weights[1][1]) {
		t.Error("weights differ between identical runs")
	}
	if slices.Equal(weights[0][0], weights[2][0]) || slices.Equal(weights[0][1], weights[2][1]) {
		t.Error("another dropout seed gave the same weights")
	}
}

// TestFirstStepRatioIsOne: the old log-probs come from a dropout-free pass,
// so with dropout off (the default) the first PPO epoch's ratio is exactly
// 1: the actor loss is −Σ A·m / Σ m and nothing is clipped. With dropout on
// the ratio is noise around 1 (the reason the default is off).
func TestFirstStepRatioIsOne(t *testing.T) {
	for _, dropout := range []bool{false, true} {
		r := newRig(t, testConfig(), Options{ActorDropout: dropout, Seed: 5}, sampledOpts)
		bt, err := r.trainer.GenerateExperience(testPrompts(3, 6, 5))
		if err != nil {
			t.Fatal(err)
		}
		est := Estimate(r.cfg, bt.Exp)
		var num, den float64
		forCounted(bt.Exp.Mask, bt.Exp.Shape, func(i int) { num -= float64(est.Advantages[i]); den++ })
		st, err := r.trainer.TrainStep(bt, nil)
		if err != nil {
			t.Fatal(err)
		}
		exact := math.Abs(st.ActorLoss-num/den) <= 1e-6*(1+math.Abs(num/den))
		if !dropout && (!exact || st.ActorClipFrac != 0) {
			t.Errorf("dropout off: actor loss %v, clip fraction %v; want %v and 0", st.ActorLoss, st.ActorClipFrac, num/den)
		}
		if dropout && exact {
			t.Errorf("dropout on: actor loss %v equals the ratio-1 loss; is dropout applied?", st.ActorLoss)
		}
	}
}

// TestTrainerImprovesReward runs a few dozen PPO iterations on the tiny
// models against the fixed reward model and checks that the mean score of
// the last iterations' generations is above what the untrained actor scores
// on the same prompts with the same sampling streams (a paired comparison;
// with a learning rate of ~0 the two agree).
func TestTrainerImprovesReward(t *testing.T) {
	cfg := testConfig()
	cfg.ActorLR, cfg.CriticLR = 3e-3, 3e-3
	r := newRig(t, cfg, Options{MaxGradNorm: 1, Seed: 1}, sampledOpts)
	const iters, window = 60, 10
	prompts := func(k int) hybridengine.Prompts {
		p := testPrompts(uint64(100+k), 16, 5)
		p.Rows = make([]uint64, p.B)
		for b := range p.B {
			p.Rows[b] = uint64(k*p.B + b)
		}
		return p
	}
	var before, after float64
	for k := iters - window; k < iters; k++ {
		bt, err := r.trainer.GenerateExperience(prompts(k))
		if err != nil {
			t.Fatal(err)
		}
		before += meanOf(bt.Exp.Scores)
	}
	for k := range iters {
		bt, err := r.trainer.GenerateExperience(prompts(k))
		if err != nil {
			t.Fatal(err)
		}
		if k >= iters-window {
			after += meanOf(bt.RawScores)
		}
		if _, err := r.trainer.TrainStep(bt, nil); err != nil {
			t.Fatal(err)
		}
	}
	before, after = before/window, after/window
	t.Logf("mean reward score on the last %d batches: untrained %.4f, trained %.4f", window, before, after)
	if !(after > before+0.2) {
		t.Errorf("mean reward score did not increase: %.4f -> %.4f", before, after)
	}
}

func meanOf(x []float32) float64 {
	s := 0.0
	for _, v := range x {
		s += float64(v)
	}
	return s / float64(len(x))
}

// TestMixtureGradient checks that the unsupervised LM loss reaches the
// actor scaled by UnsupCoef: with a zero learning rate at the first
// iteration (warm-up) the weights stay put, and the unsupervised step's
// gradient norm is UnsupCoef times that of the LM loss of a fresh copy of
// the actor, computed here directly.
func TestMixtureGradient(t *testing.T) {
	cfg := testConfig()
	cfg.UnsupCoef = 3.5
	r := newRig(t, cfg, Options{Schedule: "linear", Warmup: 10, Iterations: 100}, sampledOpts)
	u := &UnsupBatch{B: 2, T: 6, IDs: []int32{5, 6, 7, 8, 9, 10, 1, 1, 20, 21, 22, 23},
		Mask: []int32{1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}}
	st := runSteps(t, r, 1, u)[0]
	if !slices.Equal(params(r.actor), r.initActor) {
		t.Fatal("actor weights changed with a zero learning rate")
	}
	if st.ActorLR != 0 {
		t.Errorf("actor learning rate %v at the first warm-up iteration", st.ActorLR)
	}

	m := loadModel(t, r.dev, filepath.Join("..", "model", "testdata", "golden", "preln"), "no")
	m.AllocGrads()
	targets := model.ShiftLabels(u.IDs, u.B, u.T)
	targets[0*6+5] = model.IgnoreIndex
	targets[1*6+0] = model.IgnoreIndex // position 0 predicts position 1 (padding)
	a := must(m.NewActs(u.B, u.T, model.ActsOptions{Train: true}))
	if err := m.Forward(a, model.Batch{IDs: u.IDs, Mask: u.Mask, Targets: targets}); err != nil {
		t.Fatal(err)
	}
	loss, _, _ := m.MeanLoss(a)
	if math.Abs(float64(loss)-st.UnsupLoss) > 1e-6 {
		t.Errorf("unsupervised loss %v, want %v", st.UnsupLoss, loss)
	}
	if err := m.Backward(a, m.MeanLossGrad(a)); err != nil {
		t.Fatal(err)
	}
	want := cfg.UnsupCoef * optim.GradNorm(m.Dev, m.Grads.Flat)
	if math.Abs(st.UnsupGradNorm-want) > 1e-5*want {
		t.Errorf("unsupervised gradient norm %v, want %v", st.UnsupGradNorm, want)
	}
}

func TestBatchSlice(t *testing.T) {
	r := newRig(t, testConfig(), Options{}, sampledOpts)
	bt, err := r.trainer.GenerateExperience(testPrompts(4, 5, 4))
	if err != nil {
		t.Fatal(err)
	}
	B := bt.Exp.B
	var lp []float32
	for lo := 0; lo < B; lo += 2 {
		s := bt.Slice(lo, min(lo+2, B))
		if _, err := r.trainer.TrainStep(s, nil); err != nil {
			t.Fatal(err)
		}
		lp = append(lp, s.Exp.LogProbs...)
	}
	if !slices.Equal(lp, bt.Exp.LogProbs) {
		t.Error("slices do not cover the batch")
	}
}

// TestTrainerLoRA trains only the actor's adapters: the base weights stay
// bit-identical, the adapters and the critic move, and the EMA keeps an
// adapter buffer.
func TestTrainerLoRA(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	actorDir := filepath.Join("..", "model", "testdata", "golden", "preln")
	rmDir := filepath.Join("..", "reward", "testdata", "preln")
	actor, ref := loadModel(t, dev, actorDir, "no"), loadModel(t, dev, actorDir, "no")
	critic, rew := loadModel(t, dev, rmDir, "yes"), loadModel(t, dev, rmDir, "yes")
	lo, err := lora.New(actor, lora.Config{Dim: 4}, 7)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := hybridengine.New(actor, lo, sampledOpts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	tr, err := NewTrainer(cfg, Options{OnlyOptimizeLoRA: true, ActorLoRALR: 1e-2, MaxGradNorm: 1, EnableEMA: true},
		Models{Actor: eng, ActorLoRA: lo, Ref: ref, Critic: critic, Reward: rew})
	if err != nil {
		t.Fatal(err)
	}
	base, lora0 := params(actor), make([]float32, lo.NumParams())
	dev.ReadF32(lora0, lo.Params)
	for k := range 2 {
		bt, err := tr.GenerateExperience(testPrompts(uint64(10+k), 6, 5))
		if err != nil {
			t.Fatal(err)
		}
		ro, e := bt.Rollout, bt.Exp
		for i, b := range bt.Kept {
			for j := range ro.AnswerLens[b] {
				got, want := e.LogProbs[i*e.T+e.Start+j], ro.LogProbs[b*ro.AnswerLen+j]
				if math.Abs(float64(got-want)) > 1e-5 {
					t.Errorf("iteration %d row %d token %d: logp %v, generation %v", k, i, j, got, want)
				}
			}
		}
		if _, err := tr.TrainStep(bt, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(params(actor), base) {
		t.Error("base actor weights changed with OnlyOptimizeLoRA")
	}
	lora1 := make([]float32, lo.NumParams())
	dev.ReadF32(lora1, lo.Params)
	if slices.Equal(lora0, lora1) {
		t.Error("adapters unchanged")
	}
	if fe, le := tr.EMA(); le == nil || le.Len() != lo.NumParams() || fe != nil {
		t.Error("want an EMA of the adapters only (the frozen base is its own EMA)")
	}
	if actor.GradElems() != 0 {
		t.Errorf("frozen actor allocated %d gradient elements", actor.GradElems())
	}
}

// TestScoreFunction checks that a rule-based Score replaces the reward
// model and sees each row's real prompt and answer tokens.
func TestScoreFunction(t *testing.T) {
	var seen []int
	opts := Options{Score: func(prompt, answer []int32) float32 {
		seen = append(seen, len(answer))
		return float32(len(prompt)*100 + len(answer))
	}}
	r := newRig(t, testConfig(), opts, sampledOpts)
	b, err := r.trainer.GenerateExperience(testPrompts(3, 4, 5))
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(b.Kept) {
		t.Fatalf("Score called %d times for %d kept rows", len(seen), len(b.Kept))
	}
	for i, s := range b.Exp.Scores {
		if ans := int(s) % 100; ans != b.AnswerLens[i] {
			t.Errorf("row %d: Score saw %d answer tokens, the rollout has %d", i, ans, b.AnswerLens[i])
		}
		if int(s)/100 < 1 {
			t.Errorf("row %d: Score saw no prompt tokens", i)
		}
	}
}

// With ScoreScaling the experience carries the raw scores divided by the
// running standard deviation (centred with ScoreNorm), and the moments
// carry over batches and into State.
func TestScoreScalingInTrainer(t *testing.T) {
	for _, norm := range []bool{false, true} {
		cfg := testConfig()
		cfg.ScoreScaling, cfg.ScoreNorm = true, norm
		scores := []float32{3, -1, 7, 2, 5, 0, -4, 9}
		k := 0
		opts := Options{Score: func(_, _ []int32) float32 { k++; return scores[(k-1)%len(scores)] }}
		r := newRig(t, cfg, opts, sampledOpts)
		var all []float32
		for batch := range 2 {
			b, err := r.trainer.GenerateExperience(testPrompts(uint64(3+batch), 4, 5))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, b.RawScores...)
			var m RunningMoments
			m.Update(all)
			for i, raw := range b.RawScores {
				want := float64(raw)
				if norm {
					want -= m.Mean
				}
				want /= m.Std() + scoreEps
				if math.Abs(float64(b.Exp.Scores[i])-want) > 1e-5 {
					t.Fatalf("norm %v batch %d row %d: scaled %v, want %v", norm, batch, i, b.Exp.Scores[i], want)
				}
			}
			if _, err := r.trainer.TrainStep(b, nil); err != nil {
				t.Fatal(err)
			}
		}
		if s := r.trainer.State(); s.ScoreMoments.Count != float64(len(all)) {
			t.Errorf("state has moments of %v scores, want %d", s.ScoreMoments.Count, len(all))
		}
	}
	cfg := testConfig()
	cfg.ScoreNorm = true
	if err := cfg.Validate(); err == nil {
		t.Error("score norm without score scaling validated")
	}
}

// TestActsPlanMatchesTrainer checks that ActsPlan lists exactly the
// activation buffers a Trainer holds after generation batches of 6 prompts
// and micro-batches of 4 rows (with and without a mixture batch, with
// gradient checkpointing and dropout in either model).
func TestActsPlanMatchesTrainer(t *testing.T) {
	for _, c := range []struct {
		name      string
		opts      Options
		actorCkpt bool
		unsupLen  int
	}{
		{"plain", Options{}, false, 0},
		{"checkpointing", Options{CriticCheckpointing: true}, true, 0},
		{"dropout and mixture", Options{ActorDropout: true, CriticDropout: true}, false, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			eo := sampledOpts
			eo.IgnoreEOS, eo.GradientCheckpointing = true, c.actorCkpt
			r := newRig(t, testConfig(), c.opts, eo)
			bt, err := r.trainer.GenerateExperience(testPrompts(3, 6, 5))
			if err != nil {
				t.Fatal(err)
			}
			var unsup *UnsupBatch
			if c.unsupLen > 0 {
				unsup = &UnsupBatch{B: 4, T: c.unsupLen, IDs: make([]int32, 4*c.unsupLen)}
			}
			for lo := 0; lo < 6; lo += 4 {
				if _, err := r.trainer.TrainStep(bt.Slice(lo, min(lo+4, 6)), unsup); err != nil {
					t.Fatal(err)
				}
			}
			held := 0
			for _, a := range r.trainer.acts.acts {
				held += a.Bytes()
			}
			cfgs := map[string]*model.Model{"actor": r.actor, "reference": r.ref, "critic": r.critic}
			planned := 0
			for _, s := range c.opts.ActsPlan(c.actorCkpt, 6, 4, 5+8, c.unsupLen) {
				m := cfgs[s.Model]
				planned += s.Bytes(m.Config, m.HasValueHead(), m.WeightsInfo())
			}
			if held != planned {
				t.Errorf("trainer holds %d bytes of activations, ActsPlan says %d", held, planned)
			}
		})
	}
}

// TestActsSurviveTheEngineRound: with LoRA, the actor's log-prob pass runs
// on a new inference view every round; its buffers are reused, not
// reallocated, and the trainer keeps no view (and so no released
// workspace) alive.
func TestActsSurviveTheEngineRound(t *testing.T) {
	_, ms := testModels(t)
	lo, err := lora.New(ms[0], lora.Config{Dim: 4}, 1)
	if err != nil {
		t.Fatal(err)
	}
	eo := sampledOpts
	eo.IgnoreEOS = true
	e, err := hybridengine.New(ms[0], lo, eo)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(testConfig(), Options{}, Models{Actor: e, ActorLoRA: lo, Ref: ms[1], Critic: ms[2], Reward: ms[3]})
	if err != nil {
		t.Fatal(err)
	}
	var first *model.Acts
	for round := range 3 {
		if _, err := tr.GenerateExperience(testPrompts(uint64(round), 4, 5)); err != nil {
			t.Fatal(err)
		}
		a := tr.acts.acts[siteActorLogp]
		if round == 0 {
			first = a
		} else if a != first {
			t.Errorf("round %d: the actor's log-prob buffers were reallocated", round)
		}
	}
}
