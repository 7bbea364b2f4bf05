package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/plan"
	"github.com/gochat-ai/gochat/recipes"
)

// runMem runs gochat with a machine that offers avail bytes.
func runMem(t *testing.T, avail int64, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	g := &Globals{In: strings.NewReader(""), Out: &out, Err: &errb,
		Memory: func() (plan.Memory, error) {
			return plan.Memory{MemAvailable: avail, CgroupFree: -1, Available: avail}, nil
		}}
	code = execute(g, args)
	return out.String(), errb.String(), code
}

// configDir writes a model directory holding only the config.json of a
// built-in architecture: enough for the planner, nothing to load.
func configDir(t *testing.T, arch string) string {
	t.Helper()
	c, err := model.PresetConfig(arch)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), arch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

const gb = int64(1_000_000_000)

func TestEstimateCommand(t *testing.T) {
	args := []string{"estimate", "sft", "--model", "opt-125m", "--max-seq-len", "256", "--per-device-train-batch-size", "4", "--dtype", "fp32"}
	out, errOut, code := runMem(t, 64*gb, args...)
	if code != 0 {
		t.Fatalf("estimate: %s", errOut)
	}
	for _, want := range []string{"step 1 (sft), fp32", "weights", "moments", "activations", "logits", "device memory by phase: load",
		"peak:", "fits:"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = runMem(t, 2*gb, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("estimate --json: %s", errOut)
	}
	var res struct {
		Steps []struct {
			Fits     bool
			Estimate plan.Estimate
			Changes  []plan.Change
		}
		Memory plan.Memory
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(res.Steps) != 1 || res.Steps[0].Fits || res.Steps[0].Estimate.Peak <= 2*gb || len(res.Steps[0].Changes) == 0 || res.Memory.Available != 2*gb {
		t.Errorf("--json: %+v", res)
	}
	// The planner's own check: every proposed change fits.
	for _, c := range res.Steps[0].Changes {
		if c.Peak > 2*gb {
			t.Errorf("change %v does not fit", c)
		}
	}

	// The other steps, by built-in architecture names.
	for _, a := range [][]string{
		{"estimate", "reward", "--model", "opt-350m", "--lora-dim", "8", "--only-optimize-lora"},
		{"estimate", "ppo", "--actor", "opt-125m", "--critic", "opt-125m", "--max-prompt-seq-len", "64", "--max-answer-seq-len", "32", "--enable-ema"},
		{"estimate", "train", "--actor", "opt-125m", "--reward", "opt-125m", "--recipe", "none"},
	} {
		if out, errOut, code := runMem(t, 64*gb, a...); code != 0 || !strings.Contains(out, "peak:") {
			t.Errorf("%v: code %d\n%s%s", a, code, out, errOut)
		}
	}
	if _, errOut, code := runMem(t, 64*gb, "estimate", "sft", "--model", "opt-9b"); code != exitUsage || !strings.Contains(errOut, "--model opt-9b") {
		t.Errorf("unknown model: code %d %s", code, errOut)
	}
}

// TestPreflightRefusesPPO is issue 10's case: step 3 on an opt-1.3b actor
// and an opt-350m critic and reward model in fp32 without LoRA on a 24 GB
// machine is refused before anything is loaded (the model directories
// hold only config.json), naming what would fit; --skip-preflight lets it
// through to loading (which then fails here, there being no weights).
func TestPreflightRefusesPPO(t *testing.T) {
	actor, critic := configDir(t, "opt-1.3b"), configDir(t, "opt-350m")
	out := filepath.Join(t.TempDir(), "ppo")
	args := []string{"--log-format", "json", "ppo", "--actor", actor, "--critic", critic, "--data", "x.jsonl", "--output-dir", out,
		"--dtype", "fp32", "--max-prompt-seq-len", "256", "--max-answer-seq-len", "256", "--per-device-generation-batch-size", "4",
		"--per-device-training-batch-size", "4"}
	start := time.Now()
	_, errOut, code := runMem(t, 24*gb, args...)
	if code != exitUsage {
		t.Fatalf("code %d: %s", code, errOut)
	}
	msg := lastLine(errOut)
	for _, want := range []string{"step 3 (ppo) does not fit in memory", "Largest parts: actor optimizer moments", "--only-optimize-lora",
		"--skip-preflight"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q: %s", want, msg)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refused after %v", d)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the refused run created its output directory")
	}
	_, errOut, code = runMem(t, 24*gb, append(args, "--skip-preflight")...)
	if code == 0 || strings.Contains(lastLine(errOut), "does not fit") || !strings.Contains(errOut, "running anyway") {
		t.Errorf("--skip-preflight: code %d: %s", code, lastLine(errOut))
	}
}

// TestPreflightRefusesTrainBeforeStep1: gochat train checks step 3 before
// step 1 runs.
func TestPreflightRefusesTrainBeforeStep1(t *testing.T) {
	actor, rm := configDir(t, "opt-1.3b"), configDir(t, "opt-350m")
	recipe := filepath.Join(t.TempDir(), "r.yaml")
	os.WriteFile(recipe, []byte(`steps:
  sft: {dtype: bf16, lora-dim: 8, only-optimize-lora: true, max-seq-len: 64, per-device-train-batch-size: 1, per-device-eval-batch-size: 1}
  reward: {dtype: bf16, max-seq-len: 64, per-device-train-batch-size: 1, per-device-eval-batch-size: 1}
  ppo: {dtype: fp32, max-prompt-seq-len: 64, max-answer-seq-len: 64}
`), 0o644)
	out := filepath.Join(t.TempDir(), "out")
	_, errOut, code := runMem(t, 24*gb, "--log-format", "json", "train", "--actor", actor, "--reward", rm, "--data", "x.jsonl",
		"--recipe", recipe, "--output-dir", out)
	if code != exitUsage || !strings.Contains(lastLine(errOut), "step 3 (ppo) does not fit") || !strings.Contains(lastLine(errOut), recipe) {
		t.Errorf("code %d: %s", code, lastLine(errOut))
	}
	if _, err := os.Stat(filepath.Join(out, "actor")); err == nil {
		t.Error("step 1 ran")
	}
}

// TestRecipesFitTheirBudgets runs the planner over every built-in recipe
// (its own actor and reward model, its flags): on its CPU budget as gochat
// runs it today, on its GPU budget per GPU under its ZeRO settings.
func TestRecipesFitTheirBudgets(t *testing.T) {
	for _, name := range recipes.Names() {
		t.Run(name, func(t *testing.T) {
			r, err := recipes.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			b := r.Budget
			if b.CPUMemoryGB == 0 && b.GPUMemoryGB == 0 {
				t.Fatalf("budget %+v states no memory", b)
			}
			var errb bytes.Buffer
			g := &Globals{Out: &errb, Err: &errb}
			o := &TrainOptions{g: g, recipe: r, Recipe: name, Actor: r.Actor, Reward: r.Reward, Steps: []int{1, 2, 3},
				DType: "auto", Seed: 1234, perGPU: !b.IsCPU()}
			plans, err := o.planSteps(nil)
			if err != nil {
				t.Fatal(err)
			}
			limit := int64((b.CPUMemoryGB + b.GPUMemoryGB) * float64(gb))
			if len(plans) != 3 {
				t.Fatalf("%d steps planned", len(plans))
			}
			for _, p := range plans {
				t.Logf("%s: peak %s of %s", p.what, plan.GiB(p.est.Peak), b)
				if p.est.Peak > limit {
					t.Errorf("%s: estimated peak %.1f GB exceeds the budget %s", p.what, float64(p.est.Peak)/float64(gb), b)
				}
			}
		})
	}
}

// TestTrainPicksRecipe covers the choice of a recipe without --recipe.
func TestTrainPicksRecipe(t *testing.T) {
	dirs := map[string]string{}
	for _, a := range []string{"opt-125m", "opt-350m", "opt-1.3b"} {
		dirs[a] = configDir(t, a)
	}
	for _, c := range []struct {
		actor, reward string
		avail         int64
		want          string // recipe, "" for none, "error: ..." for an error
	}{
		{"opt-125m", "opt-125m", 24 * gb, "opt-125m-cpu"},
		{"opt-1.3b", "opt-350m", 24 * gb, "opt-1.3b-cpu-24gb"},
		{"opt-1.3b", "opt-350m", 8 * gb, "error: no built-in recipe for these model sizes fits"},
		{"opt-125m", "opt-350m", 24 * gb, ""},
	} {
		t.Run(fmt.Sprintf("%s+%s@%dGB", c.actor, c.reward, c.avail/gb), func(t *testing.T) {
			var errb bytes.Buffer
			g := &Globals{Out: &errb, Err: &errb, Memory: func() (plan.Memory, error) {
				return plan.Memory{Available: c.avail, MemAvailable: c.avail, CgroupFree: -1}, nil
			}}
			var got *TrainOptions
			cmd := newTrainCmd(g, func(o *TrainOptions) error { got = o; return nil })
			cmd.SetArgs([]string{"--actor", dirs[c.actor], "--reward", dirs[c.reward], "--output-dir", t.TempDir()})
			cmd.SetOut(&errb)
			cmd.SetErr(&errb)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			switch {
			case strings.HasPrefix(c.want, "error: "):
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(c.want, "error: ")) {
					t.Errorf("error %v, want %q", err, c.want)
				}
			case err != nil:
				t.Fatal(err)
			case c.want == "" && got.recipe != nil:
				t.Errorf("picked %s, want none", got.Recipe)
			case c.want != "" && (got.recipe == nil || got.Recipe != c.want):
				t.Errorf("picked %q, want %s", got.Recipe, c.want)
			}
		})
	}
	// --recipe none: no recipe, and no choice made.
	var got *TrainOptions
	cmd := newTrainCmd(&Globals{}, func(o *TrainOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--actor", dirs["opt-125m"], "--reward", dirs["opt-125m"], "--output-dir", t.TempDir(), "--recipe", "none"})
	if err := cmd.Execute(); err != nil || got.recipe != nil {
		t.Errorf("--recipe none: %v, %v", err, got.recipe)
	}
}

// TestChooseRecipeGPUs covers the GPU side of the choice (gochat finds no
// GPU today; the rule is DeepSpeed-Chat's deployment types by GPU count
// and memory).
func TestChooseRecipeGPUs(t *testing.T) {
	actor, _ := model.PresetConfig("opt-1.3b")
	rm, _ := model.PresetConfig("opt-350m")
	o := &TrainOptions{g: &Globals{}, Actor: "opt-1.3b", Reward: "opt-350m", Steps: []int{1, 2, 3}, DType: "auto", Seed: 1}
	for _, c := range []struct {
		hw   recipes.Hardware
		want string
	}{
		{recipes.Hardware{GPUs: 1, GPUMemoryGB: 48, Nodes: 1}, "opt-1.3b-single-gpu"},
		{recipes.Hardware{GPUs: 8, GPUMemoryGB: 40, Nodes: 1}, "opt-1.3b-single-node"},
		{recipes.Hardware{GPUs: 1, GPUMemoryGB: 24, Nodes: 1}, ""},
	} {
		name, _, err := o.chooseRecipe(actor, rm, c.hw, 1<<40)
		if (c.want == "") != (err != nil) || name != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.hw, name, err, c.want)
		}
	}
}
