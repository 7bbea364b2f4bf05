package cli

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/dist/mpi"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/train"
)

// mpirunLauncher returns mpirun and the flags Open MPI needs here, or
// skips the test without MPI (fails it under CI).
func mpirunLauncher(t *testing.T) []string {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs MPI for the multi-rank tests: no mpirun on PATH (%s)", mpi.InstallHint)
		}
		t.Skipf("MPI not installed: no mpirun on PATH (%s)", mpi.InstallHint)
	}
	out, _ := exec.Command(path, "--version").CombinedOutput()
	if strings.Contains(string(out), "Open MPI") || strings.Contains(string(out), "OpenRTE") {
		// As root Open MPI needs the first flag, with more ranks than cores
		// the second, and without the third it pins each rank to one core.
		return []string{path, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"}
	}
	return []string{path}
}

// buildGochat builds the gochat binary without cgo into a temporary
// directory.
func buildGochat(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gochat")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/gochat-ai/gochat/cmd/gochat")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestDataParallel: `mpirun -np 2 gochat sft` (and `gochat reward`) at
// ZeRO stage 0, with --per-device-train-batch-size 5 and
// --gradient-accumulation-steps 2 (global batch 20 of the 24 examples:
// every epoch ends with a short round of one batch, which leaves rank 1
// without one, and a short batch), saves the weights of one process with
// --gradient-accumulation-steps 4 and the same seed (dropout on), fp32:
// every weight w within 1e-5 of the one-process value relative to
// max(|w|, RMS of the weights) — the ranks' gradient sums add the same
// terms in another order. Its metrics (loss, grad_norm before clipping,
// lr, accuracy...) match within 1e-5 too, which a wrong gradient scale
// would break even where AdamW hides it; only rank 0 writes them. Without
// MPI it skips, except in CI.
func TestDataParallel(t *testing.T) {
	launcher := mpirunLauncher(t)
	if testing.Short() {
		t.Skip("builds gochat and runs mpirun")
	}
	bin := buildGochat(t)
	t.Run("sft", func(t *testing.T) { testDataParallel(t, launcher, bin, "sft", tinyModel(t), "1,0,0", "3e-3", 2, 2) })
	// bf16 (bf16 weights, fp32 gradients and master weights): the ranks'
	// gradient sums round differently in fp32, and a master weight near a
	// bf16 rounding boundary then lands one bf16 step (2^-8 relative) on
	// the other side; so a weight may differ by up to 2^-7 relative (two
	// steps over the run), and at most 0.01% of them by more than 1e-5
	// (measured: 16 of 1.6M, largest 0.0054).
	t.Run("sft-bf16", func(t *testing.T) {
		testDataParallelOpts(t, launcher, bin, "sft", tinyModel(t), "1,0,0", "3e-3", 2, 2, "bf16", 1.0/128)
	})
	// 3 ranks, no accumulation: global batch 15 of 24 examples, so every
	// epoch's second round has two batches and rank 2 none. At 3e-3 one
	// weight of 1.6M differed by 1.13e-5 (the rounding of a three-way sum,
	// amplified by AdamW as below); hence 1e-3.
	t.Run("sft-3-ranks", func(t *testing.T) { testDataParallel(t, launcher, bin, "sft", tinyModel(t), "1,0,0", "1e-3", 3, 1) })
	// At 3e-3 the reward run's largest difference was 2.2e-5 (3 of 1.6M
	// weights over 1e-5): AdamW turns the rounding of a gradient sum whose
	// terms nearly cancel into a visible change of that weight's update,
	// in proportion to the learning rate. Hence 1e-3.
	t.Run("reward", func(t *testing.T) {
		testDataParallel(t, launcher, bin, "reward", rewardModel(t), "0,1,0", "1e-3", 2, 2)
	})
	// ZeRO: each stage on 2 or 3 ranks against one process, with a
	// checkpoint every step (each rank writes its ranges).
	t.Run("sft-zero1-3-ranks", func(t *testing.T) {
		testDataParallel(t, launcher, bin, "sft", tinyModel(t), "1,0,0", "1e-3", 3, 1, "--zero-stage", "1")
	})
	t.Run("sft-zero2", func(t *testing.T) {
		testDataParallel(t, launcher, bin, "sft", tinyModel(t), "1,0,0", "1e-3", 2, 2, "--zero-stage", "2")
	})
	t.Run("sft-zero3-3-ranks", func(t *testing.T) {
		testDataParallel(t, launcher, bin, "sft", tinyModel(t), "1,0,0", "1e-3", 3, 1, "--zero-stage", "3")
	})
	t.Run("sft-bf16-zero3", func(t *testing.T) {
		testDataParallelOpts(t, launcher, bin, "sft", tinyModel(t), "1,0,0", "3e-3", 2, 2, "bf16", 1.0/128, "--zero-stage", "3")
	})
	t.Run("reward-zero3", func(t *testing.T) {
		testDataParallel(t, launcher, bin, "reward", rewardModel(t), "0,1,0", "1e-3", 2, 2, "--zero-stage", "3")
	})
	// Step 3: 2 ranks (actor ZeRO-3, critic ZeRO-2) against one process
	// with --gradient-accumulation-steps 2 (two streams of generation
	// batches), with EMA, whitening and score scaling.
	t.Run("ppo-zero3-zero2", func(t *testing.T) {
		testDataParallelPPO(t, launcher, bin, 2, "--actor-zero-stage", "3", "--critic-zero-stage", "2")
	})
	t.Run("ppo-3-ranks", func(t *testing.T) {
		testDataParallelPPO(t, launcher, bin, 3, "--actor-zero-stage", "1")
	})
	t.Run("train-demo", func(t *testing.T) { testDataParallelTrain(t, launcher, bin) })
}

// testDataParallelTrain: `mpirun -np 2 gochat train` runs the three steps
// of a shortened demo recipe on one MPI job (ZeRO-2 SFT, ZeRO-3 reward
// model, ZeRO-3 actor and ZeRO-1 critic), rank 0 writing the generator's
// files, the steps' outputs and the report; each step's models equal one
// process's with the recipe's gradient accumulation doubled, in bf16 (set
// in the recipe: auto would make the test depend on the CPU) within one
// bf16 step (2^-7 relative, as the other bf16 cases), and the first step
// of SFT and of the reward model has one process's loss and gradient norm
// (1e-5). Weights in fp32 would not meet 1e-5: the reward model's pairwise
// loss gives the parameters that only see the prompt, which chosen and
// rejected answers share, gradients that cancel to rounding noise, and
// AdamW scales that noise, whose bits depend on the order of the sums
// (the ranks' reduction against one process's accumulation), up to an
// update of the learning rate's size (1.4e-3 relative after 3 steps).
func testDataParallelTrain(t *testing.T, launcher []string, bin string) {
	dir := t.TempDir()
	recipe := func(name, sft, rm, ppo string) string {
		path := filepath.Join(dir, name)
		body := `description: the demo, shortened, for the multi-rank test
generator: demo
actor: "{demo}/base"
reward: "{output}/actor"
steps:
  sft: {data: ["{demo}/data/sft"], data-split: "1,0,0", max-seq-len: 40, per-device-train-batch-size: 16, max-steps: 3, add-eot-token: true, data-cache: "off", dtype: bf16, ` + sft + `}
  reward: {data: ["{demo}/data/pairs"], data-split: "0,1,0", max-seq-len: 40, per-device-train-batch-size: 16, max-steps: 3, data-cache: "off", dtype: bf16, ` + rm + `}
  ppo: {critic: "{output}/actor", reward: "{output}/reward", data: ["{demo}/data/prompts"], data-split: "0,0,1", max-prompt-seq-len: 40, max-answer-seq-len: 6, per-device-generation-batch-size: 8, per-device-training-batch-size: 8, max-steps: 2, num-warmup-steps: 0, enable-ema: true, data-cache: "off", dtype: bf16, ` + ppo + `}
`
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	accum := "gradient-accumulation-steps: 2"
	one := recipe("one.yaml", accum, accum, accum)
	dp := recipe("dp.yaml", "zero-stage: 2", "zero-stage: 3", "actor-zero-stage: 3, critic-zero-stage: 1")
	oneDir, dpDir := filepath.Join(dir, "one"), filepath.Join(dir, "dp")
	args := func(recipe, out string) []string {
		return []string{"--log-format", "json", "--threads", "1", "train", "--recipe", recipe, "--output-dir", out}
	}
	mustRun(t, "one process", append([]string{bin}, args(one, oneDir)...))
	log := mustRun(t, "mpirun -np 2", append(append(launcher, "-np", "2", bin), args(dp, dpDir)...))
	if n := strings.Count(log, `"message":"step done"`); n != 3 {
		t.Errorf("%d steps done, want 3 (rank 0 reports):\n%s", n, log)
	}
	if strings.Contains(log, `"rank":1`) {
		t.Errorf("rank 1 logged:\n%s", log)
	}
	// The first optimizer step of steps 1 and 2 starts from the same
	// weights: its loss and gradient norm differ only by the order of the
	// ranks' sums.
	for _, sub := range []string{"actor", "reward"} {
		a, b := metrics(t, filepath.Join(oneDir, sub))[0], metrics(t, filepath.Join(dpDir, sub))[0]
		for _, k := range []string{"loss", "grad_norm"} {
			if d := math.Abs(a[k]-b[k]) / math.Abs(a[k]); d > 1e-5 {
				t.Errorf("%s step 1: %s %v on 2 ranks, %v in one process", sub, k, b[k], a[k])
			}
		}
	}
	for _, sub := range []string{"actor", "reward", "ppo/actor", "ppo/critic", "ppo/actor_ema"} {
		worst, _ := relDiff(savedParams(t, filepath.Join(oneDir, sub)), savedParams(t, filepath.Join(dpDir, sub)))
		t.Logf("%s: largest relative difference %.3g", sub, worst)
		if worst > 1.0/128 {
			t.Errorf("%s: 2 ranks differ from one process by %.3g relative", sub, worst)
		}
	}
	if slices.Equal(savedParams(t, filepath.Join(dpDir, "actor")), savedParams(t, filepath.Join(dpDir, "ppo/actor"))) {
		t.Error("step 3 did not change the actor")
	}
	for _, f := range []string{"report.json", "actor/" + completeFile, "ppo/" + completeFile} {
		if _, err := os.Stat(filepath.Join(dpDir, f)); err != nil {
			t.Errorf("2-rank output: %v", err)
		}
	}
	// A second run finds every step complete on every rank.
	log = mustRun(t, "mpirun -np 2, again", append(append(launcher, "-np", "2", bin), args(dp, dpDir)...))
	if n := strings.Count(log, "complete, skipped"); n != 3 {
		t.Errorf("the second run skipped %d steps, want 3:\n%s", n, log)
	}
}

// testDataParallelPPO runs gochat ppo on ranks ranks and in one process
// with ranks gradient-accumulation streams, and compares the saved actor,
// critic and actor EMA (fp32, within 1e-5 as above). Generation samples
// from the 20 most likely tokens: the random-init model's distribution over
// its 50,272 tokens is nearly uniform, so the full vocabulary's cumulative
// probabilities lie about 2e-5 apart, and the rounding-level difference the
// ranks' gradient sums leave in the weights (1e-7) flips a sampled token in
// a few runs in a hundred (the flash-attention backward's rounding did so at
// step 3 of this run; ranks and one process then train on different
// answers). With 20 candidates the boundaries lie about 0.05 apart and
// the comparison tests the arithmetic, not that luck.
func testDataParallelPPO(t *testing.T, launcher []string, bin string, ranks int, extra ...string) {
	actor, critic := tinyModel(t), rewardModel(t)
	out := t.TempDir()
	args := func(dir string, accum int) []string {
		return []string{"--log-format", "json", "--threads", "1", "ppo", "--actor", actor, "--critic", critic,
			"--data", sample(), "--data-split", "1,1,8", "--max-prompt-seq-len", "96", "--max-answer-seq-len", "8",
			"--per-device-generation-batch-size", "2", "--per-device-training-batch-size", "2",
			"--gradient-accumulation-steps", fmt.Sprint(accum), "--ppo-epochs", "2", "--max-steps", "12",
			"--actor-learning-rate", "1e-3", "--critic-learning-rate", "1e-3", "--enable-ema", "--whiten-advantages",
			"--use-score-scaling", "--top-k", "20", "--seed", "7", "--dtype", "fp32", "--output-dir", dir, "--data-cache", "off",
			"--save-interval", "4", "--skip-preflight"}
	}
	oneDir, dpDir := filepath.Join(out, "one"), filepath.Join(out, "dp")
	mustRun(t, "one process", append([]string{bin}, args(oneDir, ranks)...))
	log := mustRun(t, fmt.Sprintf("mpirun -np %d", ranks), append(append(append(launcher, "-np", fmt.Sprint(ranks), bin), args(dpDir, 1)...), extra...))
	if !strings.Contains(log, fmt.Sprintf(`"streams":%d`, ranks)) {
		t.Errorf("the run did not report %d streams:\n%s", ranks, log)
	}
	for _, sub := range []string{"actor", "critic", "actor_ema"} {
		worst, _ := relDiff(savedParams(t, filepath.Join(oneDir, sub)), savedParams(t, filepath.Join(dpDir, sub)))
		t.Logf("%s: largest relative difference %.3g", sub, worst)
		if worst > 1e-5 {
			t.Errorf("%s: %d ranks differ from one process by %.3g relative", sub, ranks, worst)
		}
	}
	init := savedParams(t, actor)
	trained := savedParams(t, filepath.Join(oneDir, "actor"))
	if slices.Equal(init, trained) {
		t.Error("the actor did not change")
	}
}

// testDataParallel compares ranks ranks with accum accumulation steps
// against one process with ranks·accum.
func testDataParallel(t *testing.T, launcher []string, bin, command, mdir, split, lr string, ranks, accum int, extra ...string) {
	testDataParallelOpts(t, launcher, bin, command, mdir, split, lr, ranks, accum, "fp32", 1e-5, extra...)
}

// testDataParallelOpts is testDataParallel in dtype, with weights within
// tol (relative, as above) of one process's; metrics within 1e-5 in fp32,
// 1e-3 in bf16.
func testDataParallelOpts(t *testing.T, launcher []string, bin, command, mdir, split, lr string, ranks, accum int, dtype string, tol float64, extra ...string) {
	mtol := 1e-5
	if dtype == "bf16" {
		mtol = 1e-3
	}
	out := t.TempDir()
	// The sample as both the train and the test split: 24 evaluation
	// examples in batches of 5, which the ranks share (on 2 ranks rank 1
	// lacks one batch and, under ZeRO-3, makes its gathers idle).
	ds := filepath.Join(out, "data")
	b, err := os.ReadFile(sample())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(ds, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, split := range []string{"train", "test"} {
		if err := os.WriteFile(filepath.Join(ds, split+".jsonl"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := func(dir string, accum int) []string {
		return []string{"--log-format", "json", "--threads", "1", command, "--model", mdir, "--data", ds,
			"--data-split", split, "--max-seq-len", "48", "--per-device-train-batch-size", "5", "--per-device-eval-batch-size", "5",
			"--gradient-accumulation-steps", fmt.Sprint(accum), "--learning-rate", lr, "--num-train-epochs", "2",
			"--max-grad-norm", "0.5", "--seed", "7", "--dtype", dtype, "--output-dir", dir, "--data-cache", "off", "--save-interval", "1"}
	}
	oneDir, dpDir := filepath.Join(out, "one"), filepath.Join(out, "dp")
	mustRun(t, "one process", append([]string{bin}, args(oneDir, ranks*accum)...))
	log := mustRun(t, fmt.Sprintf("mpirun -np %d", ranks), append(append(append(launcher, "-np", fmt.Sprint(ranks), bin), args(dpDir, accum)...), extra...))
	if !strings.Contains(log, fmt.Sprintf(`"ranks":%d`, ranks)) || !strings.Contains(log, fmt.Sprintf(`"global_batch":%d`, 5*ranks*accum)) {
		t.Errorf("the run did not report %d ranks and a global batch of %d:\n%s", ranks, 5*ranks*accum, log)
	}
	for _, line := range strings.Split(log, "\n") {
		for r := 1; r < ranks; r++ {
			if strings.Contains(line, fmt.Sprintf(`"rank":%d`, r)) {
				t.Errorf("rank %d logged: %s", r, line)
			}
		}
	}

	one, dp := savedParams(t, oneDir), savedParams(t, dpDir)
	if len(one) != len(dp) {
		t.Fatalf("%d parameters vs %d", len(dp), len(one))
	}
	var scale float64 // the parameters' RMS: the floor of the relative error
	for _, v := range one {
		scale += float64(v) * float64(v)
	}
	scale = math.Sqrt(scale / float64(len(one)))
	worst, at := 0.0, 0
	over := [3]int{}
	for i := range one {
		e := math.Abs(float64(dp[i])-float64(one[i])) / math.Max(math.Abs(float64(one[i])), scale)
		if e > worst {
			worst, at = e, i
		}
		for j, tol := range []float64{1e-7, 1e-6, 1e-5} {
			if e > tol {
				over[j]++
			}
		}
	}
	t.Logf("largest relative difference %.3g (parameter %d: %v vs %v); over 1e-7, 1e-6, 1e-5: %v of %d; rms %g", worst, at, dp[at], one[at], over, len(one), scale)
	if dtype == "bf16" && over[2] > len(one)/10000 {
		t.Errorf("%d of %d weights differ by more than 1e-5 (want at most 0.01%%: those a rounding boundary separates)", over[2], len(one))
	}
	if worst > tol {
		t.Errorf("%d ranks vs 1 process: parameter %d is %v vs %v (relative %.3g > %g)", ranks, at, dp[at], one[at], worst, tol)
	}
	// The initial weights moved: the comparison is not vacuous.
	init := savedParams(t, mdir)
	moved := 0.0
	for i := range init {
		moved = math.Max(moved, math.Abs(float64(one[i]-init[i])))
	}
	if moved < 1e-3 {
		t.Errorf("training moved the weights by %g only", moved)
	}

	mo, md := metrics(t, oneDir), metrics(t, dpDir)
	if len(mo) != len(md) || len(mo) < 2 {
		t.Fatalf("metrics: %d records on 2 ranks, %d in one process; want the same, at least 2", len(md), len(mo))
	}
	evals := 0 // records of the evaluation, which the ranks share
	for i := range mo {
		if _, ok := mo[i]["eval_loss"]; ok {
			evals++
		}
		if len(md[i]) != len(mo[i]) {
			t.Errorf("metrics record %d: %v on 2 ranks, %v in one process", i, md[i], mo[i])
		}
		for k := range mo[i] {
			if k == "tokens_per_sec" {
				continue
			}
			if a, b := md[i][k], mo[i][k]; math.Abs(a-b) > mtol*math.Max(math.Abs(b), 1) {
				t.Errorf("metrics record %d: %s %v on 2 ranks, %v in one process", i, k, a, b)
			}
		}
	}
	if evals == 0 {
		t.Error("no evaluation records to compare")
	}
	for _, f := range []string{"model.safetensors", train.CheckpointDir + "/state.json", "loss.png"} {
		if _, err := os.Stat(filepath.Join(dpDir, f)); err != nil {
			t.Errorf("2-rank output: %v", err)
		}
	}
}

// savedParams reads the flat parameters of the model saved in dir.
// mustRun is runJob that fails the test when the command fails.
func mustRun(t *testing.T, name string, argv []string) string {
	t.Helper()
	out, err := runJob(t, argv)
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return out
}

func savedParams(t *testing.T, dir string) []float32 {
	t.Helper()
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	m, err := model.Load(dev, dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	flat := make([]float32, m.NumParams())
	dev.ReadF32(flat, m.Params.Flat)
	return flat
}
