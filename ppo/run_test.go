package ppo

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/train"
)

// runRig is what Run needs: the four tiny models (model/testdata and
// reward/testdata, vocabulary 96) and the data.
type runRig struct {
	dev kernels.Device
	m   Models
	d   Data
}

func newRunRig(t *testing.T, withLoRA bool) *runRig {
	t.Helper()
	dev, ms := testModels(t)
	return newRunRigWith(t, dev, ms, withLoRA)
}

// newRunRigWith is newRunRig on models ms of dev.
func newRunRigWith(t *testing.T, dev kernels.Device, ms [4]*model.Model, withLoRA bool) *runRig {
	t.Helper()
	actor := ms[0]
	var lo *lora.LoRA
	var err error
	if withLoRA {
		if lo, err = lora.New(actor, lora.Config{Dim: 4}, 7); err != nil {
			t.Fatal(err)
		}
	}
	eng, err := hybridengine.New(actor, lo, sampledOpts)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 3))
	exs := func(n, lo, hi int) []data.Example {
		out := make([]data.Example, n)
		for i := range out {
			ids := []int32{2}
			for range lo + rng.IntN(hi-lo+1) {
				ids = append(ids, int32(3+rng.IntN(93)))
			}
			out[i] = data.Example{IDs: ids}
		}
		return out
	}
	return &runRig{dev: dev,
		m: Models{Actor: eng, ActorLoRA: lo, Ref: ms[1], Critic: ms[2], Reward: ms[3]},
		d: Data{Prompts: exs(10, 1, 4), PromptLen: 5, PAD: 1, Unsup: exs(7, 3, 12), UnsupLen: 13}}
}

// runConfig is a complete step 3 on the rig: two generation batches per
// round, two PPO epochs, micro-batches of 2 rows, mixture training, EMA,
// score scaling, a cosine schedule, a checkpoint every round.
func runConfig(dir string) RunConfig {
	cfg := testConfig()
	cfg.GenerationBatches, cfg.PPOEpochs = 2, 2
	cfg.ScoreScaling, cfg.ScoreNorm = true, true
	cfg.EMABeta = 0.9
	return RunConfig{Config: cfg,
		Options:  Options{Schedule: "cosine", Warmup: 2, MaxGradNorm: 1, EnableEMA: true, Seed: 21, ActorLoRALR: 1e-2},
		GenBatch: 3, TrainBatch: 2, Epochs: 2, SaveEvery: 2, Dir: dir, Fingerprint: "test", Log: zerolog.Nop()}
}

// state reads the trained state: actor, critic, EMA.
func (r *runRig) state(t *testing.T, res *Result) [][]float32 {
	t.Helper()
	actor, err := r.m.Actor.Model()
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{params(actor), params(r.m.Critic)}
	flat, lo := res.Trainer.EMA()
	for _, b := range []kernels.Buffer{flat, lo} {
		if b != nil {
			h := make([]float32, b.Len())
			r.dev.ReadF32(h, b)
			out = append(out, h)
		}
	}
	if r.m.ActorLoRA != nil {
		h := make([]float32, r.m.ActorLoRA.NumParams())
		r.dev.ReadF32(h, r.m.ActorLoRA.Params)
		out = append(out, h)
	}
	return out
}

// metricsWithoutTimes reads metrics.jsonl without the wall-clock fields.
func metricsWithoutTimes(t *testing.T, dir string) []map[string]float64 {
	t.Helper()
	recs, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		for k := range r {
			if strings.HasSuffix(k, "_seconds") || strings.HasSuffix(k, "_per_sec") {
				delete(r, k)
			}
		}
	}
	return recs
}

// TestRunResumeIsExact runs a complete step 3 through the library entry
// point, once uninterrupted and once cancelled in the middle of a round
// and resumed from its checkpoint by a fresh set of models: weights, EMA,
// adapters and the metrics log end identical.
func TestRunResumeIsExact(t *testing.T) {
	for _, withLoRA := range []bool{false, true} {
		ref := newRunRig(t, withLoRA)
		refDir := t.TempDir()
		want, err := Run(context.Background(), ref.dev, runConfig(refDir), ref.m, ref.d)
		if err != nil {
			t.Fatal(err)
		}
		// 10 prompts in batches of 3: 4 generation batches, 2 rounds per
		// epoch, 4 rounds; each round trains 2 epochs × ⌈rows/2⌉ iterations.
		if want.Rounds != 4 || want.PPOSteps < 8 {
			t.Fatalf("rounds %d, PPO steps %d", want.Rounds, want.PPOSteps)
		}
		if _, err := os.Stat(filepath.Join(refDir, TimingFile)); err != nil {
			t.Error(err)
		}
		recs := metricsWithoutTimes(t, refDir)
		if len(recs) != 4 {
			t.Fatalf("%d metrics records, want one per round", len(recs))
		}
		for _, k := range []string{"actor_loss", "critic_loss", "unsup_loss", "reward_score", "reward_score_ema", "kl", "answer_len", "actor_lr", "ppo_steps"} {
			if _, ok := recs[0][k]; !ok {
				t.Errorf("metrics record lacks %s: %v", k, recs[0])
			}
		}

		// Cancelled during the third round (after the round-2 checkpoint),
		// then resumed by new models from the same files.
		dir := t.TempDir()
		r := newRunRig(t, withLoRA)
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		r.d.Check = func(_, _ []int32) (bool, bool) {
			if calls++; calls == 13 {
				cancel()
			}
			return false, false
		}
		if _, err := Run(ctx, r.dev, runConfig(dir), r.m, r.d); !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted run: %v", err)
		}
		if !train.HasCheckpoint(dir) {
			t.Fatal("no checkpoint before the interruption")
		}
		r2 := newRunRig(t, withLoRA)
		cfg := runConfig(dir)
		cfg.Resume = true
		got, err := Run(context.Background(), r2.dev, cfg, r2.m, r2.d)
		if err != nil {
			t.Fatal(err)
		}
		if got.PPOSteps != want.PPOSteps {
			t.Errorf("resumed run ends at PPO step %d, want %d", got.PPOSteps, want.PPOSteps)
		}
		ws, gs := ref.state(t, want), r2.state(t, got)
		for i := range ws {
			if !slices.Equal(ws[i], gs[i]) {
				t.Errorf("LoRA %v: trained buffer %d differs after resume", withLoRA, i)
			}
		}
		if got := metricsWithoutTimes(t, dir); !slices.EqualFunc(got, recs, func(a, b map[string]float64) bool {
			return len(a) == len(b) && func() bool {
				for k, v := range a {
					if w, ok := b[k]; !ok || (v != w && !(math.IsNaN(v) && math.IsNaN(w))) {
						return false
					}
				}
				return true
			}()
		}) {
			t.Errorf("LoRA %v: resumed metrics %v\nwant %v", withLoRA, got, recs)
		}
	}
}

// TestRunMixtureSchedule: with mixture training (two actor updates per
// PPO iteration) and a cosine schedule, the logged actor learning rate
// rises through the warm-up, then never increases and ends near 0 (indexed
// by optimizer steps it reached 0 halfway and climbed back).
func TestRunMixtureSchedule(t *testing.T) {
	r := newRunRig(t, false)
	cfg := runConfig(t.TempDir())
	cfg.GenerationBatches, cfg.PPOEpochs, cfg.TrainBatch, cfg.Epochs = 1, 1, 3, 4
	cfg.Warmup = 2
	res, err := Run(context.Background(), r.dev, cfg, r.m, r.d)
	if err != nil {
		t.Fatal(err)
	}
	recs := metricsWithoutTimes(t, cfg.Dir)
	var lrs []float64
	for _, rec := range recs {
		lrs = append(lrs, rec["actor_lr"])
	}
	t.Logf("actor lr per round: %v", lrs)
	peak := cfg.ActorLR
	if len(lrs) != 16 || res.PPOSteps != 16 {
		t.Fatalf("%d rounds, %d PPO steps; want 16 and 16", len(lrs), res.PPOSteps)
	}
	for i := 3; i < len(lrs); i++ {
		if lrs[i] > lrs[i-1] {
			t.Errorf("actor lr rises after warm-up: round %d %v > round %d %v", i+1, lrs[i], i, lrs[i-1])
		}
	}
	if last := lrs[len(lrs)-1]; !(last < 0.02*peak) {
		t.Errorf("actor lr ends at %v, want near 0 (peak %v)", last, peak)
	}
}

// TestEmptyBatchKeepsRound: a generation batch whose answers are all too
// short, at the end of a round, is skipped; the batches already collected
// in the round are still trained on.
func TestEmptyBatchKeepsRound(t *testing.T) {
	r := newRunRig(t, false)
	cfg := runConfig("")
	cfg.Iterations = 100
	tr, err := NewTrainer(cfg.Config, cfg.Options, r.m)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	gen := func(p hybridengine.Prompts) (*Batch, error) {
		if calls++; calls%2 == 0 {
			return nil, ErrNoAnswers
		}
		return tr.generate(p, false)
	}
	cfg.GradAccum, cfg.ScoreEMAAlpha = 1, 0.9
	r.d.PAD = 1
	st := newStage(cfg, r.d, tr, group{dev: r.dev}, gen)
	tcfg := train.Config{TrainSize: len(r.d.Prompts), MicroBatch: 3, GradAccum: 2, MaxSteps: 2, Seed: 1, Log: zerolog.Nop()}
	res, err := train.RunRounds(context.Background(), r.dev, tcfg, st)
	if err != nil {
		t.Fatal(err)
	}
	if res.Last["skipped_batches"] != 1 || !(res.Last["ppo_steps"] > 0) {
		t.Errorf("last round %v: want one skipped batch and the other trained", res.Last)
	}
}

// TestNonFiniteStopsBeforeUpdate: a NaN reward makes the advantages NaN;
// TrainStep returns a NonFiniteError and neither the actor nor the critic
// (nor the EMA) has changed.
func TestNonFiniteStopsBeforeUpdate(t *testing.T) {
	opts := Options{EnableEMA: true, Score: func(_, _ []int32) float32 { return float32(math.NaN()) }}
	rig := newRig(t, testConfig(), opts, sampledOpts)
	bt, err := rig.trainer.GenerateExperience(testPrompts(3, 6, 5))
	if err != nil {
		t.Fatal(err)
	}
	_, err = rig.trainer.TrainStep(bt, nil)
	var nf *train.NonFiniteError
	if !errors.As(err, &nf) || nf.What != "actor loss" {
		t.Fatalf("error %v, want a non-finite actor loss", err)
	}
	if !slices.Equal(params(rig.actor), rig.initActor) || !slices.Equal(params(rig.critic), rig.initCrit) {
		t.Error("weights changed by a step with a NaN loss")
	}
	flat, _ := rig.trainer.EMA()
	ema := make([]float32, flat.Len())
	rig.dev.ReadF32(ema, flat)
	if !slices.Equal(ema, rig.initActor) {
		t.Error("EMA changed by a step with a NaN loss")
	}
}

// TestRunNonFinite: through Run, a NaN stops step 3 with the round and the
// intact checkpoint named.
func TestRunNonFinite(t *testing.T) {
	r := newRunRig(t, false)
	cfg := runConfig(t.TempDir())
	cfg.SaveEvery = 1
	k := 0
	cfg.Score = func(_, _ []int32) float32 {
		if k++; k > 10 {
			return float32(math.Inf(1)) - float32(math.Inf(1))
		}
		return 1
	}
	_, err := Run(context.Background(), r.dev, cfg, r.m, r.d)
	var nf *train.NonFiniteError
	if !errors.As(err, &nf) || nf.Checkpoint < 1 || nf.Step != nf.Checkpoint+1 {
		t.Fatalf("error %v, want a non-finite value after an intact checkpoint", err)
	}
	if !train.HasCheckpoint(cfg.Dir) {
		t.Error("checkpoint gone")
	}
}

// TestCheckLengths: the reward model's limit counts the end text.
func TestCheckLengths(t *testing.T) {
	r := newRunRig(t, false)
	max := r.m.Reward.ModelConfig().MaxPositions
	if err := CheckLengths(r.m, max-4, 4, 0); err != nil {
		t.Errorf("fitting lengths refused: %v", err)
	}
	err := CheckLengths(r.m, max-4, 4, 1)
	if err == nil || !strings.Contains(err.Error(), "reward model") || !strings.Contains(err.Error(), "--reward-end-text") {
		t.Errorf("error %v, want the reward model's limit with the end text", err)
	}
	if err := CheckLengths(r.m, max, 1, 0); err == nil || !strings.Contains(err.Error(), "actor") {
		t.Errorf("error %v, want the actor's limit", err)
	}
}

// TestRoundMetrics: the reward-score EMA moves once per round (not once
// per PPO iteration and epoch), from the mean raw score of all the round's
// answers, and answer_accuracy counts every batch of the round.
func TestRoundMetrics(t *testing.T) {
	r := newRunRig(t, false)
	cfg := runConfig(t.TempDir())
	cfg.TrainBatch, cfg.MaxSteps, cfg.SaveEvery = 1, 4, 0 // many iterations per round, two rounds
	var scores []float64
	cfg.Score = func(_, answer []int32) float32 {
		v := float32(len(answer)) + float32(len(scores))/8
		scores = append(scores, float64(v))
		return v
	}
	graded := 0
	r.d.Check = func(_, _ []int32) (bool, bool) { graded++; return graded%2 == 0, true }
	if _, err := Run(context.Background(), r.dev, cfg, r.m, r.d); err != nil {
		t.Fatal(err)
	}
	recs := metricsWithoutTimes(t, cfg.Dir)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	// Each round has two generation batches of 3 prompts (rows with at
	// most one answer token are dropped before scoring).
	n0 := 0
	for _, rec := range recs[:1] {
		n0 = int(6 - rec["dropped_rows"])
	}
	m0, m1 := meanF(scores[:n0]), meanF(scores[n0:])
	a := cfg.ScoreEMAAlpha
	for i, c := range []struct{ score, ema float64 }{{m0, m0}, {m1, a*m0 + (1-a)*m1}} {
		if math.Abs(recs[i]["reward_score"]-c.score) > 1e-6 || math.Abs(recs[i]["reward_score_ema"]-c.ema) > 1e-6 {
			t.Errorf("round %d: reward_score %v, ema %v; want %v, %v", i+1, recs[i]["reward_score"], recs[i]["reward_score_ema"], c.score, c.ema)
		}
	}
	if recs[0]["ppo_steps"] < 4 || recs[0]["answer_accuracy"] != 0.5 {
		t.Errorf("round 1: %v PPO steps, accuracy %v over both batches", recs[0]["ppo_steps"], recs[0]["answer_accuracy"])
	}
}

func meanF(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}
