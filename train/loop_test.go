package train

import (
	"context"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/optim"
)

// linStage is least squares on a device buffer: loss = mean_i (w·x_i − y_i)²,
// with optional per-micro-batch noise keyed by the dropout seed (so resume
// has to replay seeds exactly to be bit-identical).
type linStage struct {
	dev      kernels.Device
	w, g     kernels.Buffer
	x        [][]float32
	y        []float32
	noise    bool
	nanAt    int // TrainBatch call that returns NaN (0: never)
	calls    int
	cancel   func()
	cancelAt int
}

func newLin(t *testing.T, n, d int) *linStage {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	s := &linStage{dev: dev, w: must(dev.Alloc(kernels.F32, d)), g: must(dev.Alloc(kernels.F32, d))}
	truth := make([]float32, d)
	for i := range truth {
		truth[i] = float32(rng.NormFloat64())
	}
	for range n {
		x := make([]float32, d)
		var y float32
		for j := range x {
			x[j] = float32(rng.NormFloat64())
			y += x[j] * truth[j]
		}
		s.x, s.y = append(s.x, x), append(s.y, y)
	}
	return s
}

func (s *linStage) TrainBatch(idx []int, seed uint64) (BatchStats, error) {
	s.calls++
	if s.cancel != nil && s.calls == s.cancelAt {
		s.cancel()
	}
	if s.calls == s.nanAt {
		return BatchStats{Loss: math.NaN()}, nil
	}
	w := make([]float32, s.w.Len())
	s.dev.ReadF32(w, s.w)
	g := make([]float32, len(w))
	s.dev.ReadF32(g, s.g)
	var loss float64
	for _, i := range idx {
		var p float32
		for j, xj := range s.x[i] {
			p += w[j] * xj
		}
		r := p - s.y[i]
		if s.noise {
			r += float32(seed%1000) * 1e-4
		}
		loss += float64(r * r)
		for j, xj := range s.x[i] {
			g[j] += 2 * r * xj / float32(len(idx))
		}
	}
	s.dev.WriteF32(s.g, g)
	return BatchStats{Loss: loss / float64(len(idx)), Tokens: len(idx)}, nil
}

func (s *linStage) Evaluate() (*Eval, error) {
	w := make([]float32, s.w.Len())
	s.dev.ReadF32(w, s.w)
	return &Eval{Batches: len(s.x), Names: []string{"sq"},
		Batch: func(i int) ([]float64, error) {
			var p float32
			for j, xj := range s.x[i] {
				p += w[j] * xj
			}
			return []float64{float64((p - s.y[i]) * (p - s.y[i]))}, nil
		},
		Metrics: func(sum []float64) (map[string]float64, error) {
			return map[string]float64{"eval_loss": sum[0] / float64(len(s.x))}, nil
		}}, nil
}

func (s *linStage) trainable() Trainable {
	return Trainable{
		Groups: []optim.Group{{Name: "w", LR: 0.05, Segments: []optim.Segment{{Name: "w", Params: s.w, Grads: s.g}}}},
		Grads:  []kernels.Buffer{s.g},
		State:  map[string]kernels.Buffer{"w": s.w},
	}
}

func baseConfig(dir string) Config {
	return Config{TrainSize: 37, MicroBatch: 4, GradAccum: 2, Epochs: 3, Schedule: "cosine", Warmup: 2,
		ClipNorm: 1, AdamW: optim.DefaultAdamW, EvalEvery: 4, SaveEvery: 3, Seed: 7, Dir: dir,
		Fingerprint: "lin", Log: zerolog.Nop()}
}

func weights(s *linStage) []float32 {
	w := make([]float32, s.w.Len())
	s.dev.ReadF32(w, s.w)
	return w
}

func TestLoopTrains(t *testing.T) {
	s := newLin(t, 37, 5)
	cfg := baseConfig(t.TempDir())
	if got := cfg.TotalSteps(); got != 15 { // 10 micro-batches -> 5 steps per epoch
		t.Fatalf("TotalSteps = %d, want 15", got)
	}
	res, err := Run(context.Background(), s.dev, cfg, s, s.trainable())
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 15 || !(res.LastLoss < res.FirstLoss) || res.Eval["eval_loss"] >= res.FirstLoss {
		t.Errorf("result %+v", res)
	}
	recs, err := ReadMetrics(cfg.Dir + "/" + MetricsFile)
	if err != nil {
		t.Fatal(err)
	}
	train, evals := 0, 0
	for _, r := range recs {
		if _, ok := r["loss"]; ok {
			train++
			for _, k := range []string{"lr", "grad_norm", "tokens_per_sec", "epoch"} {
				if _, ok := r[k]; !ok {
					t.Errorf("metrics record lacks %s: %v", k, r)
				}
			}
		}
		if _, ok := r["eval_loss"]; ok {
			evals++
		}
	}
	if train != 15 || evals != 4 { // steps 4, 8, 12 and the end
		t.Errorf("%d train and %d eval records, want 15 and 4", train, evals)
	}
	if !HasCheckpoint(cfg.Dir) {
		t.Error("no final checkpoint")
	}
}

// TestResumeIsExact interrupts a run after its first checkpoint, resumes it,
// and compares the weights with an uninterrupted run bit for bit.
func TestResumeIsExact(t *testing.T) {
	ref := newLin(t, 37, 5)
	ref.noise = true
	if _, err := Run(context.Background(), ref.dev, baseConfig(t.TempDir()), ref, ref.trainable()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	s.noise = true
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.cancelAt = cancel, 17 // mid-epoch 2, after the step-6 checkpoint
	_, err := Run(ctx, s.dev, baseConfig(dir), s, s.trainable())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	s2 := newLin(t, 37, 5) // a fresh process: weights from scratch
	s2.noise = true
	cfg := baseConfig(dir)
	cfg.Resume = true
	res, err := Run(context.Background(), s2.dev, cfg, s2, s2.trainable())
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 15 || s2.calls >= 30 {
		t.Errorf("resumed run: %d steps, %d micro-batches recomputed", res.Steps, s2.calls)
	}
	if !slices.Equal(weights(ref), weights(s2)) {
		t.Errorf("resumed weights %v differ from uninterrupted %v", weights(s2), weights(ref))
	}
	recs, _ := ReadMetrics(dir + "/" + MetricsFile)
	steps := map[float64]int{}
	for _, r := range recs {
		if _, ok := r["loss"]; ok {
			steps[r["step"]]++
		}
	}
	for st := 1.0; st <= 15; st++ {
		if steps[st] != 1 {
			t.Errorf("metrics has %d records of step %v", steps[st], st)
		}
	}
}

func TestNonFiniteStopsAndKeepsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	s.nanAt = 15
	_, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable())
	var nf *NonFiniteError
	if !errors.As(err, &nf) || nf.Checkpoint != 6 || !strings.Contains(err.Error(), "step 8") {
		t.Fatalf("error %v, want a non-finite loss at step 8 with the step-6 checkpoint intact", err)
	}
	var st ckptState
	err = ReadRecord(dir, &st)
	if err != nil || st.Position.Step != 6 {
		t.Errorf("checkpoint after the failure: %+v, %v", st.Position, err)
	}
}

func TestResumeRefusesAnotherRun(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	if _, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(dir)
	cfg.Resume, cfg.Fingerprint = true, "other"
	if _, err := Run(context.Background(), s.dev, cfg, s, s.trainable()); err == nil || !strings.Contains(err.Error(), "different run") {
		t.Errorf("error %v, want a refusal", err)
	}
}

func TestConfigErrors(t *testing.T) {
	s := newLin(t, 3, 2)
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.TrainSize = 0 }, "training split is empty"},
		{func(c *Config) { c.Schedule = "warmup_decay" }, "unknown lr scheduler"},
		{func(c *Config) { c.GradAccum = 0 }, "--gradient-accumulation-steps"},
	} {
		cfg := baseConfig(t.TempDir())
		c.mod(&cfg)
		if _, err := Run(context.Background(), s.dev, cfg, s, s.trainable()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

func TestPlotMetrics(t *testing.T) {
	s := newLin(t, 37, 5)
	cfg := baseConfig(t.TempDir())
	if _, err := Run(context.Background(), s.dev, cfg, s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	files, err := PlotMetrics(cfg.Dir+"/"+MetricsFile, cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Errorf("plots %v, want loss, lr and grad_norm", files)
	}
}

// TestResumeFromOldCheckpoint: a save interrupted between its two renames
// leaves only checkpoint.old; --resume uses it instead of starting afresh.
func TestResumeFromOldCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	if _, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, CheckpointDir), filepath.Join(dir, CheckpointDir+".old")); err != nil {
		t.Fatal(err)
	}
	if !HasCheckpoint(dir) {
		t.Fatal("checkpoint.old not found")
	}
	s2 := newLin(t, 37, 5)
	cfg := baseConfig(dir)
	cfg.Resume = true
	res, err := Run(context.Background(), s2.dev, cfg, s2, s2.trainable())
	if err != nil {
		t.Fatal(err)
	}
	if s2.calls != 0 || res.Steps != 15 || !slices.Equal(weights(s), weights(s2)) {
		t.Errorf("resume from checkpoint.old: %d micro-batches recomputed, %d steps, weights equal %v",
			s2.calls, res.Steps, slices.Equal(weights(s), weights(s2)))
	}
}

// TestResumeCleansAndRefuses: the temporary folder of a killed save is
// removed at the next start; a checkpoint folder without its state.json is
// refused under --resume instead of silently starting over.
func TestResumeCleansAndRefuses(t *testing.T) {
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	if _, err := Run(context.Background(), s.dev, baseConfig(dir), s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(dir, ".checkpoint-123")
	if err := os.MkdirAll(partial, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(dir)
	cfg.Resume = true
	if _, err := Run(context.Background(), s.dev, cfg, s, s.trainable()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(partial); err == nil {
		t.Error("partial checkpoint left behind")
	}
	if err := os.Remove(filepath.Join(dir, CheckpointDir, stateRecord)); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), s.dev, cfg, s, s.trainable())
	if err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("error %v, want an incomplete checkpoint refused", err)
	}
}

// TestStopSavesAndResumes: a stop request mid-round (during step 5, not a
// checkpoint step) ends the run after that round with a checkpoint, and
// a resume from it gives the uninterrupted run's weights bit for bit and
// its metrics record for record; one before the first round saves
// nothing.
func TestStopSavesAndResumes(t *testing.T) {
	ref := newLin(t, 37, 5)
	ref.noise = true
	refDir := t.TempDir()
	if _, err := Run(context.Background(), ref.dev, baseConfig(refDir), ref, ref.trainable()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := newLin(t, 37, 5)
	s.noise = true
	stop := make(chan struct{})
	s.cancel, s.cancelAt = func() { close(stop) }, 9 // the first batch of step 5
	cfg := baseConfig(dir)
	cfg.Stop = stop
	_, err := Run(context.Background(), s.dev, cfg, s, s.trainable())
	ie, ok := errors.AsType[*InterruptedError](err)
	if !ok || ie.Step != 5 || !ie.Saved || s.calls != 10 {
		t.Fatalf("stopped run: %v (%+v), %d batches computed; want a checkpoint after step 5 and 10 batches", err, ie, s.calls)
	}
	if !strings.Contains(err.Error(), "checkpoint saved in "+filepath.Join(dir, CheckpointDir)) {
		t.Errorf("message %q does not say where the checkpoint is", err)
	}
	s2 := newLin(t, 37, 5)
	s2.noise = true
	cfg = baseConfig(dir)
	cfg.Resume = true
	if _, err := Run(context.Background(), s2.dev, cfg, s2, s2.trainable()); err != nil {
		t.Fatal(err)
	}
	if s2.calls != 20 {
		t.Errorf("the resumed run computed %d batches, want the 20 after step 5", s2.calls)
	}
	if !slices.Equal(weights(ref), weights(s2)) {
		t.Errorf("resumed weights %v differ from uninterrupted %v", weights(s2), weights(ref))
	}
	want, _ := ReadMetrics(filepath.Join(refDir, MetricsFile))
	got, _ := ReadMetrics(filepath.Join(dir, MetricsFile))
	if len(got) != len(want) {
		t.Fatalf("%d metrics records after stop and resume, %d uninterrupted", len(got), len(want))
	}
	for i := range want {
		delete(want[i], "tokens_per_sec")
		delete(got[i], "tokens_per_sec")
		if !maps.Equal(got[i], want[i]) {
			t.Errorf("metrics record %d: %v, uninterrupted %v", i, got[i], want[i])
		}
	}

	// Stopped before anything ran: nothing to save.
	s3 := newLin(t, 37, 5)
	closed := make(chan struct{})
	close(closed)
	cfg = baseConfig(t.TempDir())
	cfg.Stop = closed
	_, err = Run(context.Background(), s3.dev, cfg, s3, s3.trainable())
	if ie, ok := errors.AsType[*InterruptedError](err); !ok || ie.Saved || s3.calls != 0 || HasCheckpoint(cfg.Dir) {
		t.Errorf("stopped before the first round: %v, %d batches, checkpoint %v", err, s3.calls, HasCheckpoint(cfg.Dir))
	}
}
