package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/sft"
	"github.com/gochat-ai/gochat/train"
)

func newBenchCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure kernel and training throughput",
		Long:  "Reproducible performance figures: GEMM GFLOP/s and training tokens/s on random data.",
	}
	cmd.AddCommand(newBenchMatmulCmd(g, nil), newBenchTrainCmd(g, nil), newBenchSFTCmd(g, nil), newBenchDecodeCmd(g, nil))
	return cmd
}

// BenchMatmulOptions are the options of `gochat bench matmul`.
type BenchMatmulOptions struct {
	g         *Globals
	Shape     string
	Transpose string
	DType     string
	ABF16     bool
	Repeats   int
	JSON      bool
	m, n, k   int
}

func newBenchMatmulCmd(g *Globals, runF func(*BenchMatmulOptions) error) *cobra.Command {
	opts := &BenchMatmulOptions{g: g}
	cmd := &cobra.Command{
		Use:   "matmul --shape MxNxK [--transpose nn|nt|tn|tt] [--dtype fp32|bf16]",
		Short: "GEMM GFLOP/s: C[M,N] = op(A)[M,K]·op(B)[K,N] in fp32 or bf16",
		Long: "GEMM GFLOP/s: C[M,N] = op(A)[M,K]·op(B)[K,N] with C in fp32.\n\n" +
			"--dtype fp32 multiplies fp32 operands. --dtype bf16 stores B in bf16, as a model weight is\n" +
			"stored in bf16 mode, keeps A in fp32 (rounded to bf16 as it is read, like an activation)\n" +
			"and accumulates in fp32, as PyTorch's bf16 matmul does. --a-bf16 stores A in bf16 too,\n" +
			"as torch.matmul on two bf16 tensors reads it (C stays fp32).",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			var err error
			if opts.m, opts.n, opts.k, err = parseShape(opts.Shape); err != nil {
				return usageError{err}
			}
			switch opts.Transpose {
			case "nn", "nt", "tn", "tt":
			default:
				return usageErrorf("--transpose %q: want nn, nt, tn or tt", opts.Transpose)
			}
			switch opts.DType {
			case "fp32", "bf16":
			default:
				return usageErrorf("--dtype %q: want fp32 or bf16", opts.DType)
			}
			if opts.Repeats < 0 {
				return usageErrorf("--repeats must be >= 0 (0: enough for about a second)")
			}
			if opts.ABF16 && opts.DType != "bf16" {
				return usageErrorf("--a-bf16 needs --dtype bf16")
			}
			if runF != nil {
				return runF(opts)
			}
			return runBenchMatmul(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Shape, "shape", "512x768x768", "M x N x K")
	f.StringVar(&opts.Transpose, "transpose", "nt", "nn, nt, tn or tt: whether A and B are stored transposed")
	f.StringVar(&opts.DType, "dtype", "fp32", "fp32, or bf16: B stored in bf16, A in fp32 rounded as it is read, fp32 accumulation")
	f.BoolVar(&opts.ABF16, "a-bf16", false, "with --dtype bf16: A stored in bf16 too")
	f.IntVar(&opts.Repeats, "repeats", 0, "timed runs (0 = enough for about a second)")
	f.BoolVar(&opts.JSON, "json", false, "print one JSON object")
	return cmd
}

func parseShape(s string) (m, n, k int, err error) {
	parts := strings.Split(strings.ToLower(s), "x")
	if len(parts) != 3 {
		return 0, 0, 0, fmt.Errorf("--shape %q: want MxNxK, e.g. 512x768x768", s)
	}
	var v [3]int
	for i, p := range parts {
		v[i], err = strconv.Atoi(p)
		if err != nil || v[i] < 1 {
			return 0, 0, 0, fmt.Errorf("--shape %q: %q is not a positive integer", s, p)
		}
	}
	return v[0], v[1], v[2], nil
}

func runBenchMatmul(opts *BenchMatmulOptions) error {
	dev, err := newCPU(opts.g)
	if err != nil {
		return err
	}
	m, n, k := opts.m, opts.n, opts.k
	ta, tb := opts.Transpose[0] == 't', opts.Transpose[1] == 't'
	rng := rand.New(rand.NewPCG(1, 1))
	rnd := func(sz int) (kernels.Buffer, error) {
		h := make([]float32, sz)
		for i := range h {
			h[i] = rng.Float32()*2 - 1
		}
		b, err := dev.Alloc(kernels.F32, sz)
		if err != nil {
			return nil, err
		}
		dev.WriteF32(b, h)
		return b, nil
	}
	var a, b, c kernels.Buffer
	for _, x := range []struct {
		p    *kernels.Buffer
		size int
	}{{&a, m * k}, {&b, k * n}, {&c, m * n}} {
		if *x.p, err = rnd(x.size); err != nil {
			return fmt.Errorf("bench matmul: %w", err)
		}
	}
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	run := func() { dev.Gemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, n) }
	name := dev.Name()
	if opts.DType == "bf16" {
		// B as a bf16 weight: rounded once, here, not in the timed runs.
		bh := make(cpu.BF16, k*n)
		for i, v := range b.(cpu.F32) {
			bh[i] = cpu.ToBF16(v)
		}
		av := a
		if opts.ABF16 {
			ah := make(cpu.BF16, m*k)
			for i, v := range a.(cpu.F32) {
				ah[i] = cpu.ToBF16(v)
			}
			av = ah
		}
		run = func() { dev.GemmBF16(ta, tb, m, n, k, 1, av, lda, bh, ldb, 0, c, n) }
		name += ", bf16 " + dev.GemmBF16Kernel()
		if opts.ABF16 {
			name += ", A in bf16"
		}
	}
	flops := 2 * float64(m) * float64(n) * float64(k)
	med := medianSeconds(run, opts.Repeats)
	res := map[string]any{"m": m, "n": n, "k": k, "transpose": opts.Transpose, "dtype": opts.DType, "a_bf16": opts.ABF16, "threads": dev.Threads(), "gflops": round(flops/med/1e9, 2)}
	if opts.JSON {
		return json.NewEncoder(opts.g.Out).Encode(res)
	}
	_, err = fmt.Fprintf(opts.g.Out, "matmul %dx%dx%d %s %s on %s: %.1f GFLOP/s (median of runs, %.3f ms each)\n",
		m, n, k, opts.Transpose, opts.DType, name, flops/med/1e9, med*1e3)
	return err
}

// medianSeconds warms fn up, then times it repeats times (or for about a
// second when repeats is 0) and returns the median duration in seconds.
func medianSeconds(fn func(), repeats int) float64 {
	start := time.Now()
	fn()
	fn()
	if repeats == 0 {
		per := time.Since(start).Seconds() / 2
		repeats = int(min(max(1/max(per, 1e-9), 5), 200))
	}
	ts := make([]float64, repeats)
	for i := range ts {
		t0 := time.Now()
		fn()
		ts[i] = time.Since(t0).Seconds()
	}
	return median(ts)
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(x float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(x*p+0.5)) / p
}

// BenchTrainOptions are the options of `gochat bench train`.
type BenchTrainOptions struct {
	g          *Globals
	Model      string
	Batch, Seq int
	Steps      int
	Checkpoint bool
	DType      string
	Rounds     int
	JSON       bool
}

func newBenchTrainCmd(g *Globals, runF func(*BenchTrainOptions) error) *cobra.Command {
	return newBenchStepCmd(g, "train", "Training tokens/s: forward + backward + AdamW on random weights and tokens", runBenchTrain, runF)
}

// newBenchSFTCmd is `gochat bench sft`: the training benchmark through the
// real step-1 path (data collation, sft.Stage, train.Run with its
// optimizer, clipping and schedule) on random weights and random tokens.
func newBenchSFTCmd(g *Globals, runF func(*BenchTrainOptions) error) *cobra.Command {
	return newBenchStepCmd(g, "sft", "SFT tokens/s through the real training loop (random weights and tokens)", runBenchSFT, runF)
}

// newBenchStepCmd builds a training benchmark command; run does the work
// unless a test passes runF.
func newBenchStepCmd(g *Globals, name, short string, run, runF func(*BenchTrainOptions) error) *cobra.Command {
	opts := &BenchTrainOptions{g: g}
	cmd := &cobra.Command{
		Use:   name + " --model opt-125m|CONFIG.json --batch B --seq T",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if opts.Batch < 1 || opts.Seq < 2 || opts.Steps < 1 {
				return usageErrorf("--batch >= 1, --seq >= 2 and --steps >= 1 are required")
			}
			if runF != nil {
				return runF(opts)
			}
			return run(opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Model, "model", "opt-125m", "a built-in architecture ("+strings.Join(model.PresetNames(), ", ")+") or a config.json")
	f.IntVar(&opts.Batch, "batch", 4, "batch size B")
	f.IntVar(&opts.Seq, "seq", 128, "sequence length T")
	f.IntVar(&opts.Steps, "steps", 5, "timed optimizer steps (after one warm-up step)")
	f.BoolVar(&opts.Checkpoint, "gradient-checkpointing", false, "recompute each layer in the backward pass")
	bindDType(f, &opts.DType)
	if name == "train" {
		f.Lookup("dtype").Usage += "; several, comma-separated (fp32,bf16), are measured side by side"
		f.IntVar(&opts.Rounds, "rounds", 1, "with several --dtype: runs of --steps per dtype, taken in turn")
	}
	f.BoolVar(&opts.JSON, "json", false, "print one JSON object")
	return cmd
}

// benchModel is the randomly initialised model a training benchmark runs.
func benchModel(opts *BenchTrainOptions) (*model.Model, error) {
	cfg, err := loadArch(opts.Model)
	if err != nil {
		return nil, usageError{err}
	}
	if opts.Seq > cfg.MaxPositions {
		return nil, usageErrorf("--seq %d exceeds the model's max_position_embeddings %d", opts.Seq, cfg.MaxPositions)
	}
	dev, err := newDevice(opts.g)
	if err != nil {
		return nil, err
	}
	dt, err := resolveDType(opts.g, opts.DType, dev)
	if err != nil {
		return nil, err
	}
	m, err := model.New(dev, cfg, model.Options{DType: dt})
	if err != nil {
		return nil, err
	}
	m.InitRandom(1, 0.02)
	return m, nil
}

func loadArch(name string) (*model.Config, error) {
	if strings.HasSuffix(name, ".json") {
		return model.LoadConfig(name)
	}
	return model.PresetConfig(name)
}

// benchTrainResult is one dtype's figures in `gochat bench train`; with
// --json one object a line (scripts/gpu-check.sh reads tokens_per_sec and
// params: model FLOPs utilisation is 6·params·tokens/s over the GPU's
// peak).
type benchTrainResult struct {
	Model      string  `json:"model"`
	Params     int     `json:"params"`
	Batch      int     `json:"batch"`
	Seq        int     `json:"seq"`
	DType      string  `json:"dtype"`
	TPS        float64 `json:"tokens_per_sec"`
	StepSecs   float64 `json:"step_seconds"`
	DevicePeak int64   `json:"device_peak_bytes"`
	PeakRSS    int64   `json:"peak_rss_bytes"`
	VsFirst    float64 `json:"vs_first"`
	Device     string  `json:"device"`
	times      []float64
}

// runBenchTrain times training steps for each --dtype given (a comma
// list), --rounds times in turn (fp32, bf16, fp32, bf16, ...) so that a
// machine's drift hits each alike; each dtype's figure is the median of
// all its steps, and its memory the device peak of its own device.
func runBenchTrain(opts *BenchTrainOptions) error {
	dts := strings.Split(opts.DType, ",")
	for _, dt := range dts {
		if err := checkDTypeFlag(dt); err != nil {
			return err
		}
	}
	res := make([]benchTrainResult, len(dts))
	for i := range res {
		res[i].Model, res[i].Batch, res[i].Seq = opts.Model, opts.Batch, opts.Seq
	}
	for range max(opts.Rounds, 1) {
		for i, dt := range dts {
			o := *opts
			o.DType = dt
			if err := benchTrainOnce(&o, &res[i]); err != nil {
				return err
			}
		}
	}
	B, T := opts.Batch, opts.Seq
	for i := range res {
		r := &res[i]
		med := median(r.times)
		r.TPS, r.StepSecs = round(float64(B*T)/med, 2), round(med, 4)
		r.VsFirst = round(r.TPS/res[0].TPS, 3)
		r.PeakRSS = peakRSS()
		if opts.JSON {
			if err := json.NewEncoder(opts.g.Out).Encode(r); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintf(opts.g.Out, "train %s %s B=%d T=%d on %s: %.1f tokens/s, %.3f s/step (median of %d steps; %.2fx the first), device peak %.0f MiB\n",
			opts.Model, r.DType, B, T, r.Device, r.TPS, med, len(r.times), r.VsFirst, float64(r.DevicePeak)/(1<<20)); err != nil {
			return err
		}
	}
	if !opts.JSON && len(res) > 1 {
		_, err := fmt.Fprintf(opts.g.Out, "process peak RSS %.0f MiB (all dtypes; one dtype per process for each one's)\n", float64(peakRSS())/(1<<20))
		return err
	}
	return nil
}

// benchTrainOnce builds a model in opts.DType on a new device, takes one
// warm-up step and opts.Steps timed ones, and adds them to r.
func benchTrainOnce(opts *BenchTrainOptions, r *benchTrainResult) error {
	m, err := benchModel(opts)
	if err != nil {
		return err
	}
	defer m.Free()
	cfg, dev := m.Config, m.Dev
	tr, err := train.ModelTrainable(m, train.ParamOptions{LR: 1e-4})
	if err != nil {
		return err
	}
	opt, err := train.NewOptimizer(dev, tr, train.OptimizerConfig{AdamW: optim.DefaultAdamW, Schedule: "constant", Total: 1})
	if err != nil {
		return err
	}
	defer opt.Free()
	B, T := opts.Batch, opts.Seq
	rng := rand.New(rand.NewPCG(2, 2))
	ids := make([]int32, B*T)
	for i := range ids {
		ids[i] = int32(3 + rng.IntN(cfg.VocabSize-3))
	}
	batch := model.Batch{IDs: ids, Targets: model.ShiftLabels(ids, B, T)}
	a, err := m.NewActs(B, T, model.ActsOptions{Train: true, Dropout: true, Checkpoint: opts.Checkpoint})
	if err != nil {
		return err
	}
	defer a.Free()
	step := 0
	var loss float32
	trainStep := func() error {
		step++
		batch.Seed = uint64(step)
		if err := m.Forward(a, batch); err != nil {
			return err
		}
		loss, _, _ = m.MeanLoss(a)
		if err := m.Backward(a, m.MeanLossGrad(a)); err != nil {
			return err
		}
		_, err := opt.Step(0, 1) // zeroes the gradients
		return err
	}
	opts.g.Log.Info().Str("model", opts.Model).Int("params", m.NumParams()).Int("batch", B).Int("seq", T).Str("device", dev.Name()).Stringer("dtype", m.DType()).Msg("bench train")
	// A step ends when the device has done its work: a GPU queues the
	// optimizer's kernels and returns (Sync waits; on the CPU it returns
	// at once).
	if err := trainStep(); err != nil { // warm-up
		return err
	}
	if err := dev.Sync(); err != nil {
		return err
	}
	for i := range opts.Steps {
		t0 := time.Now()
		if err := trainStep(); err != nil {
			return err
		}
		if err := dev.Sync(); err != nil {
			return err
		}
		sec := time.Since(t0).Seconds()
		r.times = append(r.times, sec)
		opts.g.Log.Debug().Int("step", i+1).Float64("seconds", sec).Float32("loss", loss).Msg("step")
	}
	r.DType, r.Device, r.Params = m.DType().String(), dev.Name(), m.NumParams()
	r.DevicePeak = max(r.DevicePeak, dev.MemStats().Peak)
	return nil
}

func runBenchSFT(opts *BenchTrainOptions) error {
	m, err := benchModel(opts)
	if err != nil {
		return err
	}
	cfg, dev := m.Config, m.Dev
	B, T := opts.Batch, opts.Seq
	rng := rand.New(rand.NewPCG(2, 2))
	set := &data.Set{Phase: data.PhaseSFT}
	for range B * (opts.Steps + 1) {
		ids := make([]int32, T)
		for i := range ids {
			ids[i] = int32(3 + rng.IntN(cfg.VocabSize-3))
		}
		set.Examples = append(set.Examples, data.Example{IDs: ids})
	}
	st, err := sft.New(m, set, nil, sft.Options{MaxSeqLen: T, PAD: int32(cfg.PadTokenID), EvalBatch: B, Dropout: true, Checkpoint: opts.Checkpoint})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gochat-bench-sft-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tr, err := train.ModelTrainable(m, train.ParamOptions{LR: 1e-4})
	if err != nil {
		return err
	}
	tcfg := train.Config{TrainSize: len(set.Examples), MicroBatch: B, GradAccum: 1, MaxSteps: opts.Steps + 1,
		Schedule: "constant", ClipNorm: 1, AdamW: optim.DefaultAdamW, Seed: 1, Dir: dir, Log: opts.g.Log}
	opts.g.Log.Info().Str("model", opts.Model).Int("params", m.NumParams()).Int("batch", B).Int("seq", T).Str("device", dev.Name()).Msg("bench sft")
	if _, err := train.Run(context.Background(), dev, tcfg, st, tr); err != nil {
		return err
	}
	recs, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		return err
	}
	var tps []float64
	for _, r := range recs {
		if v, ok := r["tokens_per_sec"]; ok && r["step"] > 1 { // step 1 is the warm-up
			tps = append(tps, v)
		}
	}
	med := median(tps)
	res := map[string]any{"tokens_per_sec": round(med, 2), "step_seconds": round(float64(B*T)/med, 4), "peak_rss_bytes": peakRSS()}
	if opts.JSON {
		return json.NewEncoder(opts.g.Out).Encode(res)
	}
	_, err = fmt.Fprintf(opts.g.Out, "sft %s B=%d T=%d on %s: %.1f tokens/s (median of %d steps), peak RSS %.0f MiB\n",
		opts.Model, B, T, dev.Name(), med, len(tps), float64(peakRSS())/(1<<20))
	return err
}
