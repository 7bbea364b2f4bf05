package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/zero"
)

// lmStage trains a tiny OPT as a language model on fixed random
// sequences: one forward and one backward pass per batch, as sft does.
type lmStage struct {
	m    *model.Model
	seqs [][]int32
	t    int
	acts *model.Acts
	// failSeed, when not zero, makes the batch of this dropout seed fail
	// (a rank that dies mid-run).
	failSeed uint64
	// stopSeed, when not zero, calls stop at the batch of this dropout
	// seed (a signal that reaches one rank).
	stopSeed uint64
	stop     func()
}

// newLMStage builds an lmStage over n sequences and its Trainable: the
// whole model, or with loraDim > 0 only LoRA adapters of that rank on a
// frozen base (--only-optimize-lora).
func newLMStage(t *testing.T, dev kernels.Device, dt kernels.DType, n, loraDim int) (*lmStage, Trainable) {
	t.Helper()
	cfg := &model.Config{ModelType: "opt", VocabSize: 96, HiddenSize: 32, FFNDim: 64, NumLayers: 3, NumHeads: 4,
		MaxPositions: 16, WordEmbedProjDim: 32, DoLayerNormBefore: true, EnableBias: true,
		LayerNormElementwiseAffine: true, Activation: "relu", TieWordEmbeddings: true}
	m, err := model.New(dev, cfg, model.Options{DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	m.InitRandom(3, 0.05)
	r := rand.New(rand.NewPCG(11, 0))
	s := &lmStage{m: m, t: 8}
	for range n {
		seq := make([]int32, s.t)
		for j := range seq {
			seq[j] = int32(r.IntN(cfg.VocabSize))
		}
		s.seqs = append(s.seqs, seq)
	}
	po := ParamOptions{LR: 1e-3, WeightDecay: 0.1}
	if loraDim > 0 {
		lo, err := lora.New(m, lora.Config{Dim: loraDim}, 9)
		if err != nil {
			t.Fatal(err)
		}
		m.SetAdapter(lo)
		po.LoRA, po.LoRALR, po.OnlyLoRA = lo, 1e-2, true
	}
	tr, err := ModelTrainable(m, po)
	if err != nil {
		t.Fatal(err)
	}
	return s, tr
}

func (s *lmStage) TrainBatch(idx []int, seed uint64) (BatchStats, error) {
	if s.failSeed != 0 && seed == s.failSeed {
		return BatchStats{}, fmt.Errorf("injected failure")
	}
	if s.stopSeed != 0 && seed == s.stopSeed {
		s.stop()
	}
	var ids []int32
	for _, i := range idx {
		ids = append(ids, s.seqs[i]...)
	}
	a, err := s.m.ReuseActsIn(&s.acts, model.ActsShape{B: len(idx), T: s.t, Opts: model.ActsOptions{Train: true}})
	if err != nil {
		return BatchStats{}, err
	}
	in := model.Batch{IDs: ids, Targets: model.ShiftLabels(ids, len(idx), s.t), Seed: seed}
	if err := s.m.Forward(a, in); err != nil {
		return BatchStats{}, err
	}
	loss, _, err := s.m.MeanLoss(a)
	if err != nil {
		return BatchStats{}, err
	}
	if err := s.m.Backward(a, s.m.MeanLossGrad(a)); err != nil {
		return BatchStats{}, err
	}
	return BatchStats{Loss: float64(loss), Tokens: len(ids)}, nil
}

// Evaluate scores the first 4 sequences one per batch, as the stages do:
// the ranks share the batches, and under ZeRO-3 a rank with fewer batches
// than rank 0 makes the gathers of the forward passes it lacks.
func (s *lmStage) Evaluate() (*Eval, error) {
	return &Eval{Batches: 4, Names: []string{"loss"},
		Batch: func(b int) ([]float64, error) {
			a, err := s.m.ReuseActsIn(&s.acts, model.ActsShape{B: 1, T: s.t, Opts: model.ActsOptions{Train: true}})
			if err != nil {
				return nil, err
			}
			in := model.Batch{IDs: s.seqs[b], Targets: model.ShiftLabels(s.seqs[b], 1, s.t)}
			if err := s.m.Forward(a, in); err != nil {
				return nil, err
			}
			loss, _, err := s.m.MeanLoss(a)
			return []float64{float64(loss)}, err
		},
		Metrics: func(sum []float64) (map[string]float64, error) {
			return map[string]float64{"eval_loss": sum[0] / 4}, nil
		},
	}, nil
}

// zeroRun trains on ranks in-process ranks at a ZeRO stage and returns
// rank 0's weights and final evaluation (every rank's must agree).
func zeroRun(t *testing.T, ranks int, stage zero.Stage, dt kernels.DType, cfg Config) ([]float32, float64) {
	t.Helper()
	w, ev, err := zeroRunFail(t, ranks, stage, dt, cfg, -1)
	if err != nil {
		t.Fatalf("%d ranks, ZeRO-%d: %v", ranks, stage, err)
	}
	return w, ev
}

// zeroRunFail is zeroRun whose batch failAt (counted over the run, from
// 0; -1 for none) fails on the rank that computes it.
func zeroRunFail(t *testing.T, ranks int, stage zero.Stage, dt kernels.DType, cfg Config, failAt int) ([]float32, float64, error) {
	t.Helper()
	evals := make([]float64, ranks)
	devs := make([]kernels.Device, ranks)
	for i := range devs {
		devs[i] = must(cpu.New(cpu.Options{Threads: 1}))
	}
	out := make([][]float32, ranks)
	err := disttest.Run(devs, func(c dist.Comm, dev kernels.Device) error {
		s, tr := newLMStage(t, dev, dt, cfg.TrainSize, 0)
		if failAt >= 0 {
			s.failSeed = microSeed(cfg.Seed, failAt)
		}
		cfg := cfg
		cfg.Comm, cfg.ZeRO = c, stage
		res, err := Run(context.Background(), dev, cfg, s, tr)
		if err != nil {
			return err
		}
		evals[c.Rank()] = res.Eval["eval_loss"]
		if s.m.Hook != nil {
			return fmt.Errorf("the model is still hooked after Run")
		}
		w := make([]float32, s.m.NumParams())
		dev.ReadF32(w, s.m.Params.Flat)
		out[c.Rank()] = w
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	for r := 1; r < ranks; r++ {
		if d := maxRelDiff(out[r], out[0]); d != 0 {
			t.Fatalf("%d ranks, ZeRO-%d: rank %d's weights differ from rank 0's by %g", ranks, stage, r, d)
		}
		if evals[r] != evals[0] {
			t.Fatalf("%d ranks, ZeRO-%d: rank %d's eval_loss %v, rank 0's %v", ranks, stage, r, evals[r], evals[0])
		}
	}
	return out[0], evals[0], nil
}

// maxRelDiff is the largest |a−b| / max(|b|, 1e-2) over the elements.
func maxRelDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		d := math.Abs(float64(a[i])-float64(b[i])) / math.Max(math.Abs(float64(b[i])), 1e-2)
		m = math.Max(m, d)
	}
	return m
}

// TestZeROStagesMatchOneProcess: ZeRO stages 0-3 on 2 and 3 ranks give the
// weights of one process with the same global batch and seed (fp32: 1e-5
// relative, the reductions only change the summation order; bf16: within
// one bf16 step, 2^-7 relative). 13 examples in batches of 2 with 2
// accumulation steps: on 3 ranks a round has 6 batches, and the last
// round of each epoch 1, so ranks 1 and 2 sit idle in it.
func TestZeROStagesMatchOneProcess(t *testing.T) {
	cfg := Config{TrainSize: 13, MicroBatch: 2, Epochs: 2, Schedule: "linear", Warmup: 1,
		ClipNorm: 1, AdamW: optim.DefaultAdamW, Seed: 5, Fingerprint: "zero", Log: zerolog.Nop()}
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		tol := 1e-5
		if dt == kernels.BF16 {
			tol = 1.0 / 128
		}
		for _, ranks := range []int{2, 3} {
			c := cfg
			c.GradAccum = 6 / ranks // the same global batch on 2 and 3 ranks
			c.Dir = t.TempDir()
			one := c
			one.GradAccum = 6
			one.Dir = t.TempDir()
			want, wantEval := zeroRun(t, 1, 0, dt, one)
			init, _ := zeroRun(t, 1, 0, dt, Config{TrainSize: 13, MicroBatch: 13, GradAccum: 1, MaxSteps: 1,
				Schedule: "constant", AdamW: optim.DefaultAdamW, Fingerprint: "init", Log: zerolog.Nop(), Warmup: 1 << 20})
			if d := maxRelDiff(want, init); d < 0.01 {
				t.Fatalf("training moved the weights by %g relative: too little to compare", d)
			}
			for stage := zero.Stage(0); stage <= 3; stage++ {
				c.Dir = t.TempDir()
				got, ev := zeroRun(t, ranks, stage, dt, c)
				// The evaluation of the same weights is the same float64
				// (each batch's loss is shared exactly and summed in order);
				// of weights within the tolerance, within it too.
				if d := math.Abs(ev-wantEval) / wantEval; d > tol || (d != 0 && maxRelDiff(got, want) == 0) {
					t.Errorf("%v, %d ranks, ZeRO-%d: eval_loss %v, one process %v", dt, ranks, stage, ev, wantEval)
				}
				if d := maxRelDiff(got, want); d > tol {
					t.Errorf("%v, %d ranks, ZeRO-%d: weights differ from one process by %.3g relative (tolerance %g)", dt, ranks, stage, d, tol)
				} else {
					t.Logf("%v, %d ranks, ZeRO-%d: max relative difference %.3g", dt, ranks, stage, d)
				}
			}
		}
	}
}

// TestZeROResume: a run checkpointed on 3 ranks at ZeRO-3 (each rank its
// own ranges) and killed by a failing rank resumes on 2 ranks at ZeRO-1,
// and on 1 process, to the weights of an uninterrupted run: within 1e-5
// relative in fp32, and in bf16 within one bf16 step (2^-7), as in
// TestZeROStagesMatchOneProcess: another rank count sums the gradients in
// another order, and a master weight that ends near a rounding boundary
// of bf16 may round the other way (with the fp32 kernels' bf16 path, one
// weight of the 1- and 2-rank resumes does: 7.6e-4).
func TestZeROResume(t *testing.T) {
	cfg := Config{TrainSize: 13, MicroBatch: 2, GradAccum: 1, Epochs: 2, Schedule: "linear", Warmup: 1,
		ClipNorm: 1, AdamW: optim.DefaultAdamW, Seed: 5, SaveEvery: 1, Fingerprint: "zero", Log: zerolog.Nop()}
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
		tol := 1e-5
		if dt == kernels.BF16 {
			tol = 1.0 / 128
		}
		c3 := cfg
		c3.GradAccum = 2
		c3.Dir = t.TempDir()
		want, _ := zeroRun(t, 3, 3, dt, c3)
		for _, resume := range []struct {
			ranks int
			stage zero.Stage
		}{{2, 1}, {1, 0}, {3, 2}} {
			c := c3
			c.Dir = t.TempDir()
			// Batch 9 is in round 2 (6 batches a round): the checkpoint of
			// round 1 stays.
			if _, _, err := zeroRunFail(t, 3, 3, dt, c, 9); err == nil {
				t.Fatal("the failing rank did not stop the run")
			}
			if !HasCheckpoint(c.Dir) {
				t.Fatal("no checkpoint left by the interrupted run")
			}
			c.Resume = true
			c.GradAccum = 6 / resume.ranks
			got, _ := zeroRun(t, resume.ranks, resume.stage, dt, c)
			if d := maxRelDiff(got, want); d > tol {
				t.Errorf("%v: resumed on %d ranks at ZeRO-%d: %.3g relative from the uninterrupted run", dt, resume.ranks, resume.stage, d)
			}
		}
	}
}

// TestZeROOnlyLoRA: with only the LoRA adapters trained on a frozen base
// (--only-optimize-lora), ZeRO-3 partitions the frozen base too, as
// DeepSpeed does: each rank holds a third of it between passes (the
// parameter bytes Run reports), the passes gather it layer by layer, and
// stages 0-3 on 3 ranks give one process's adapters (fp32, 3e-5
// relative: the reductions only change the summation order, but 14 AdamW
// steps amplify it on adapters whose gradients nearly cancel; 5.4e-6 with
// the composed attention kernels, 1.4e-5 with the flash kernels, whose
// backward recomputes the probabilities) and leave the base as it was. A
// checkpoint every step saves each rank's ranges of the base.
func TestZeROOnlyLoRA(t *testing.T) {
	cfg := Config{TrainSize: 13, MicroBatch: 2, Epochs: 2, Schedule: "linear", Warmup: 1,
		ClipNorm: 1, AdamW: optim.DefaultAdamW, Seed: 5, SaveEvery: 1, Fingerprint: "zero-lora"}
	type result struct {
		adapters, base []float32
		paramBytes     int64
	}
	run := func(ranks int, stage zero.Stage, gradAccum int) result {
		t.Helper()
		devs := make([]kernels.Device, ranks)
		for i := range devs {
			devs[i] = must(cpu.New(cpu.Options{Threads: 1}))
		}
		var res result
		dir := t.TempDir() // the ranks' shared output directory
		err := disttest.Run(devs, func(c dist.Comm, dev kernels.Device) error {
			s, tr := newLMStage(t, dev, kernels.F32, cfg.TrainSize, 4)
			var log bytes.Buffer
			cfg := cfg
			cfg.Comm, cfg.ZeRO, cfg.GradAccum, cfg.Dir = c, stage, gradAccum, dir
			cfg.Log = zerolog.New(&log)
			if _, err := Run(context.Background(), dev, cfg, s, tr); err != nil {
				return err
			}
			if c.Rank() != 0 {
				return nil
			}
			res.adapters = make([]float32, tr.State["lora"].Len())
			dev.ReadF32(res.adapters, tr.State["lora"])
			res.base = make([]float32, s.m.NumParams())
			dev.ReadF32(res.base, s.m.Params.Flat)
			var rec struct {
				ParamBytes int64 `json:"param_bytes"`
			}
			for _, line := range strings.Split(log.String(), "\n") {
				if strings.Contains(line, "trained state held per rank") {
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						return err
					}
				}
			}
			res.paramBytes = rec.ParamBytes
			return nil
		})
		if err != nil {
			t.Fatalf("%d ranks, ZeRO-%d: %v", ranks, stage, err)
		}
		return res
	}
	want := run(1, 0, 3)
	init, _ := newLMStage(t, must(cpu.New(cpu.Options{Threads: 1})), kernels.F32, 1, 0)
	base := make([]float32, init.m.NumParams())
	init.m.Dev.ReadF32(base, init.m.Params.Flat)
	held := map[zero.Stage]int64{}
	for stage := zero.Stage(0); stage <= 3; stage++ {
		got := run(3, stage, 1)
		held[stage] = got.paramBytes
		if d := maxRelDiff(got.adapters, want.adapters); d > 3e-5 {
			t.Errorf("ZeRO-%d: adapters differ from one process by %.3g relative", stage, d)
		}
		if !slices.Equal(got.base, base) {
			t.Errorf("ZeRO-%d: the frozen base changed", stage)
		}
	}
	if d := maxRelDiff(want.adapters, run(1, 0, 1).adapters); d < 1e-3 {
		t.Fatalf("the adapters moved by %.3g relative from a shorter run: too little to compare", d)
	}
	// Stage 3 holds the adapters whole and a third of the base (units are
	// split evenly, up to rounding).
	baseBytes := int64(len(base) * 4)
	if full, part := held[0], held[3]; full < baseBytes || part > full-baseBytes+baseBytes/3+64 {
		t.Errorf("parameter bytes held per rank: %d at ZeRO-0, %d at ZeRO-3; the base is %d bytes (want ZeRO-3 to hold a third of it)", full, part, baseBytes)
	}
	t.Logf("parameter bytes held per rank: %v", held)
}

// TestStopAgreesAcrossRanks: a stop request that reaches one rank of
// three (rank 2, in round 3 of 4) stops every rank after the same round, with
// one checkpoint of everyone's ZeRO-3 ranges; resuming it on 2 ranks
// gives the weights of an uninterrupted run.
func TestStopAgreesAcrossRanks(t *testing.T) {
	cfg := Config{TrainSize: 13, MicroBatch: 2, GradAccum: 2, Epochs: 2, Schedule: "linear", Warmup: 1,
		ClipNorm: 1, AdamW: optim.DefaultAdamW, Seed: 5, SaveEvery: 100, Fingerprint: "zero", Log: zerolog.Nop()}
	cfg.Dir = t.TempDir()
	want, _ := zeroRun(t, 3, 3, kernels.F32, cfg)
	cfg.Dir = t.TempDir()
	devs := []kernels.Device{must(cpu.New(cpu.Options{Threads: 1})), must(cpu.New(cpu.Options{Threads: 1})), must(cpu.New(cpu.Options{Threads: 1}))}
	steps := make([]int, 3)
	err := disttest.Run(devs, func(c dist.Comm, dev kernels.Device) error {
		s, tr := newLMStage(t, dev, kernels.F32, cfg.TrainSize, 0)
		cfg := cfg
		cfg.Comm, cfg.ZeRO = c, 3
		if c.Rank() == 2 {
			stop := make(chan struct{})
			cfg.Stop = stop
			// Batch 9, the third of round 3 (rounds of 6, 1, 6 and 1 batches
			// over two epochs of 7): rank 2's.
			s.stopSeed, s.stop = microSeed(cfg.Seed, 9), func() { close(stop) }
		}
		_, err := Run(context.Background(), dev, cfg, s, tr)
		ie, ok := errors.AsType[*InterruptedError](err)
		if !ok {
			return fmt.Errorf("rank %d: %v, want an InterruptedError", c.Rank(), err)
		}
		steps[c.Rank()] = ie.Step
		if !ie.Saved {
			return fmt.Errorf("rank %d: stopped without a checkpoint", c.Rank())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if steps[0] != 3 || steps[1] != 3 || steps[2] != 3 {
		t.Fatalf("ranks stopped after steps %v, want 3 each", steps)
	}
	cfg.Resume, cfg.GradAccum = true, 3
	got, _ := zeroRun(t, 2, 1, kernels.F32, cfg)
	if d := maxRelDiff(got, want); d > 1e-5 {
		t.Errorf("resumed after the stop: %.3g relative from the uninterrupted run", d)
	}
}
