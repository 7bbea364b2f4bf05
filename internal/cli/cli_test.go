package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
)

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

func TestVersion(t *testing.T) {
	out, _, code := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "gochat ") {
		t.Errorf("version: code %d, output %q", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuch"}, "unknown command"},
		{[]string{"version", "--bogus"}, "unknown flag"},
		{[]string{"--log-level", "loud", "version"}, "--log-level"},
		{[]string{"--log-format", "xml", "version"}, "--log-format"},
		{[]string{"generate"}, "--model is required"},
		{[]string{"generate", "--model", "x"}, "exactly one of"},
		{[]string{"generate", "--model", "x", "--prompt-ids", "1,a"}, "not a token id"},
		{[]string{"generate", "--model", "x", "--prompt-ids", "1", "--greedy", "--top-k", "3"}, "cannot be combined"},
		{[]string{"generate", "--model", "x", "--prompt-ids", "1", "--temperature", "0"}, "temperature"},
		{[]string{"bench", "matmul", "--shape", "1x2"}, "MxNxK"},
		{[]string{"bench", "matmul", "--transpose", "xy"}, "--transpose"},
		{[]string{"bench", "train", "--model", "opt-7"}, "unknown model"},
		{[]string{"score", "--answer", "x"}, "--model is required"},
		{[]string{"score", "--model", "x"}, "--answer"},
		{[]string{"ppo", "--actor", "a", "--critic", "c", "--data", "d", "--output-dir", "o", "--resume", "--overwrite"}, "exclude each other"},
		{[]string{"ppo", "--actor", "a", "--critic", "c", "--data", "d", "--output-dir", "o", "--use-score-norm"}, "score norm"},
	} {
		_, errOut, code := run(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d, stderr %q; want code %d and %q", c.args, code, errOut, exitUsage, c.want)
		}
	}
}

func TestGenerateFlags(t *testing.T) {
	g := &Globals{}
	var got *GenerateOptions
	cmd := newGenerateCmd(g, func(o *GenerateOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--model", "m", "--prompt-ids", "2, 100,200", "--top-k", "5", "--seed", "9", "--max-new-tokens", "3"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Sample.Greedy || got.Sample.TopK != 5 || got.Sample.Seed != 9 || got.MaxNewTokens != 3 || len(got.ids) != 3 || got.ids[1] != 100 {
		t.Errorf("parsed options %+v", got)
	}
	cmd = newGenerateCmd(g, func(o *GenerateOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--model", "m", "--prompt-ids", "2"})
	if err := cmd.Execute(); err != nil || !got.Sample.Greedy {
		t.Errorf("greedy is not the default: %v %+v", err, got.Sample)
	}
}

func TestGenerateJSON(t *testing.T) {
	dir := filepath.Join("..", "..", "model", "testdata", "golden", "preln")
	out, errOut, code := run(t, "--log-format", "json", "generate", "--model", dir, "--prompt-ids", "2,10,20,30", "--max-new-tokens", "5", "--json", "--dtype", "fp32")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var res struct {
		PromptIDs []int32   `json:"prompt_ids"`
		Tokens    []int32   `json:"tokens"`
		LogProbs  []float32 `json:"logprobs"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if len(res.PromptIDs) != 4 || len(res.Tokens) == 0 || len(res.Tokens) > 5 || len(res.Tokens) != len(res.LogProbs) {
		t.Fatalf("unexpected result %+v", res)
	}
	// Check against the full forward: greedy tokens are the argmax, and the
	// log-probabilities are those of the full softmax.
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	m, err := model.Load(dev, dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seq := append(append([]int32{}, res.PromptIDs...), res.Tokens...)
	a := must(m.NewActs(1, len(seq), model.ActsOptions{}))
	if err := m.Forward(a, model.Batch{IDs: seq}); err != nil {
		t.Fatal(err)
	}
	logits, _ := m.Logits(a)
	V := m.Config.VocabSize
	for i, tok := range res.Tokens {
		row := logits[(len(res.PromptIDs)-1+i)*V : (len(res.PromptIDs)+i)*V]
		best := 0
		for j := range row {
			if row[j] > row[best] {
				best = j
			}
		}
		if int(tok) != best {
			t.Errorf("token %d = %d, argmax is %d", i, tok, best)
		}
		if lp := model.LogSoftmaxAt(row, int(tok)); math.Abs(float64(lp-res.LogProbs[i])) > 1e-4 {
			t.Errorf("logprob %d = %v, full forward gives %v", i, res.LogProbs[i], lp)
		}
	}
}

func TestBenchMatmulJSON(t *testing.T) {
	out, errOut, code := run(t, "--threads", "1", "bench", "matmul", "--shape", "64x48x32", "--transpose", "tn", "--repeats", "3", "--json")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res["m"] != 64.0 || res["transpose"] != "tn" || res["threads"] != 1.0 || !(res["gflops"].(float64) > 0) {
		t.Errorf("result %v", res)
	}
}

// TestBenchTrainJSON runs the training benchmark for one dtype, then for
// fp32 and bf16 side by side: one JSON object per dtype, in the order
// asked, each with its own device peak; bf16's is no larger (the masters'
// low halves and the bf16 weights are the fp32 weights' bytes).
func TestBenchTrainJSON(t *testing.T) {
	cfg := filepath.Join("..", "..", "model", "testdata", "golden", "postln", "config.json")
	type result struct {
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
	}
	for _, c := range []struct {
		dtype string
		want  []string
	}{{"fp32", []string{"f32"}}, {"fp32,bf16", []string{"f32", "bf16"}}} {
		out, errOut, code := run(t, "bench", "train", "--model", cfg, "--batch", "2", "--seq", "8", "--steps", "2", "--rounds", "2", "--dtype", c.dtype, "--json")
		if code != 0 {
			t.Fatalf("--dtype %s: code %d: %s", c.dtype, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(c.want) {
			t.Fatalf("--dtype %s: want %d JSON lines, got %q", c.dtype, len(c.want), out)
		}
		var res []result
		for i, l := range lines {
			var r result
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			if r.DType != c.want[i] || !(r.TPS > 0 && r.StepSecs > 0 && r.PeakRSS > 0 && r.DevicePeak > 0 && r.VsFirst > 0) ||
				r.Model != cfg || r.Params <= 0 || r.Batch != 2 || r.Seq != 8 {
				t.Errorf("--dtype %s, line %d: %+v", c.dtype, i, r)
			}
			res = append(res, r)
		}
		if len(res) == 2 && res[1].DevicePeak > res[0].DevicePeak {
			t.Errorf("bf16 device peak %d > fp32's %d", res[1].DevicePeak, res[0].DevicePeak)
		}
	}
	if _, errOut, code := run(t, "bench", "train", "--model", cfg, "--dtype", "fp32,fp16"); code != 2 || !strings.Contains(errOut, "--dtype") {
		t.Errorf("--dtype fp32,fp16: code %d, %q", code, errOut)
	}
}

func TestInit(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join("..", "..", "model", "testdata", "golden", "postln", "config.json")
	if _, e, code := run(t, "init", "--arch", cfg, "--output-dir", dir, "--seed", "3"); code != 0 {
		t.Fatal(e)
	}
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	m, err := model.Load(dev, dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.NumParams() == 0 || m.Config.DoLayerNormBefore {
		t.Errorf("initialised model: %d params, config %+v", m.NumParams(), m.Config)
	}
	if _, _, code := run(t, "init", "--arch", "opt-9b", "--output-dir", dir); code != exitUsage {
		t.Errorf("unknown architecture: code %d", code)
	}
}

func TestRecipes(t *testing.T) {
	out, _, code := run(t, "recipes")
	if code != 0 || !strings.Contains(out, "opt-1.3b-single-gpu") {
		t.Errorf("recipes: %d %q", code, out)
	}
	out, _, code = run(t, "recipes", "show", "opt-1.3b-single-gpu")
	if code != 0 || !strings.Contains(out, "learning-rate") {
		t.Errorf("recipes show: %d %q", code, out)
	}
	if _, _, code := run(t, "recipes", "show", "nope"); code != exitUsage {
		t.Errorf("unknown recipe: code %d", code)
	}
}

// TestPPODropoutFlags: step 3 trains without dropout unless asked
// (--actor-dropout, --critic-dropout); DeepSpeed-Chat's --disable-*
// flags are accepted and contradict the enabling ones.
func TestPPODropoutFlags(t *testing.T) {
	base := []string{"--actor", "a", "--critic", "c", "--data", "d", "--output-dir", "o"}
	for _, c := range []struct {
		args          []string
		actor, critic bool
		err           string
	}{
		{nil, false, false, ""},
		{[]string{"--disable-actor-dropout", "--disable-critic-dropout"}, false, false, ""},
		{[]string{"--actor-dropout"}, true, false, ""},
		{[]string{"--critic-dropout"}, false, true, ""},
		{[]string{"--actor-dropout", "--disable-actor-dropout"}, false, false, "exclude each other"},
	} {
		var got *PPOOptions
		cmd := newPPOCmd(&Globals{}, func(o *PPOOptions) error { got = o; return nil })
		cmd.SetArgs(append(append([]string{}, base...), c.args...))
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if got.ActorDropout != c.actor || got.CriticDropout != c.critic {
			t.Errorf("%v: actor dropout %v, critic dropout %v; want %v, %v", c.args, got.ActorDropout, got.CriticDropout, c.actor, c.critic)
		}
	}
	// The round's shape reaches the PPO configuration ppo.Run reads.
	var got *PPOOptions
	cmd := newPPOCmd(&Globals{}, func(o *PPOOptions) error { got = o; return nil })
	cmd.SetArgs(append(append([]string{}, base...), "--generation-batches", "3", "--ppo-epochs", "2"))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Config.GenerationBatches != 3 || got.Config.PPOEpochs != 2 {
		t.Errorf("ppo.Config has %d generation batches and %d PPO epochs, want 3 and 2", got.Config.GenerationBatches, got.Config.PPOEpochs)
	}
}

// TestNonFiniteFlagsRefused: a NaN or Inf in any floating-point flag is a
// usage error naming the flag, before anything is written (an Inf in
// run.json made the run impossible to resume), from the command line and
// from a recipe.
func TestNonFiniteFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	recipe := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(recipe, []byte("steps:\n  sft: {learning-rate: .inf}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"sft", "--model", "m", "--data", "d", "--output-dir", dir, "--max-grad-norm", "Inf"}, "--max-grad-norm"},
		{[]string{"reward", "--model", "m", "--data", "d", "--output-dir", dir, "--weight-decay", "NaN"}, "--weight-decay"},
		{[]string{"ppo", "--actor", "a", "--critic", "c", "--data", "d", "--output-dir", dir, "--unsup-coef", "-Inf"}, "--unsup-coef"},
		{[]string{"train", "--actor", "a", "--reward", "r", "--recipe", recipe, "--output-dir", dir}, "--learning-rate"},
	} {
		_, errOut, code := run(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.flag) || !strings.Contains(errOut, "finite") {
			t.Errorf("%v: code %d, %s", c.args, code, lastLine(errOut))
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 { // the recipe only
		t.Errorf("files written: %v", entries)
	}
}

// TestIntFlagErrorsNameTheFlag: out-of-range integer flags are refused
// naming the flag and the value.
func TestIntFlagErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sft", "--model", "m", "--data", "d", "--output-dir", dir, "--per-device-train-batch-size", "0"}, "--per-device-train-batch-size must be >= 1, got 0"},
		{[]string{"reward", "--model", "m", "--data", "d", "--output-dir", dir, "--num-warmup-steps", "-3"}, "--num-warmup-steps must be >= 0, got -3"},
		{[]string{"sft", "--model", "m", "--data", "d", "--output-dir", dir, "--save-interval", "-1"}, "--save-interval must be >= 0"},
		{[]string{"ppo", "--actor", "a", "--critic", "c", "--data", "d", "--output-dir", dir, "--per-device-generation-batch-size", "-2"}, "--per-device-generation-batch-size must be >= 1, got -2"},
		{[]string{"ppo", "--actor", "a", "--critic", "c", "--data", "d", "--output-dir", dir, "--ppo-epochs", "0"}, "--ppo-epochs must be >= 1"},
		{[]string{"sft", "--model", "m", "--data", "d", "--output-dir", dir, "--data-split", "0,0,0"}, "sum to zero"},
	} {
		_, errOut, code := run(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d, %s; want %q", c.args, code, lastLine(errOut), c.want)
		}
	}
}

// TestGenerateClampsMaxNewTokens: generation stops at the model's last
// position with a notice instead of refusing; a prompt that fills every
// position is refused.
func TestGenerateClampsMaxNewTokens(t *testing.T) {
	dir := filepath.Join("..", "..", "model", "testdata", "golden", "preln") // 16 positions
	out, errOut, code := run(t, "generate", "--model", dir, "--prompt-ids", "2,10,20,30", "--max-new-tokens", "100", "--json")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "generating at most 12") {
		t.Errorf("no notice of the clamp in %q", errOut)
	}
	var res struct{ Tokens []int32 }
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Tokens) > 12 {
		t.Fatalf("output %q (%v): want at most 12 tokens", out, err)
	}
	ids := strings.TrimSuffix(strings.Repeat("5,", 16), ",")
	if _, errOut, code := run(t, "generate", "--model", dir, "--prompt-ids", ids); code == 0 || !strings.Contains(errOut, "at most 16 positions") {
		t.Errorf("a 16-token prompt: code %d, %q", code, errOut)
	}
}

// TestBenchDecode runs the decoding benchmark for both precisions in one
// process on the tiny golden architecture.
func TestBenchDecode(t *testing.T) {
	cfg := filepath.Join("..", "..", "model", "testdata", "golden", "preln", "config.json")
	out, errOut, code := run(t, "bench", "decode", "--model", cfg, "--dtype", "fp32,bf16", "--prompt", "3", "--new", "4", "--runs", "1", "--json")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got %q", out)
	}
	for i, want := range []string{"f32", "bf16"} {
		var r struct {
			DType   string  `json:"dtype"`
			TPS     float64 `json:"decode_tokens_per_sec"`
			E2E     float64 `json:"tokens_per_sec"`
			Prefill float64 `json:"prefill_seconds"`
			Weight  int     `json:"weight_bytes"`
			Params  int     `json:"params"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil || r.DType != want || r.TPS <= 0 || r.Weight <= 0 || r.Params <= 0 {
			t.Errorf("line %d: %q (%v)", i, lines[i], err)
		}
		// End to end (prefill + decode) is slower than decoding alone
		// (one run: medians of one).
		if !(r.E2E > 0 && r.E2E <= r.TPS) {
			t.Errorf("line %d: end-to-end %v tokens/s, decode %v: %q", i, r.E2E, r.TPS, lines[i])
		}
	}
	if _, errOut, code := run(t, "bench", "decode", "--model", cfg, "--dtype", "fp16"); code != 2 || !strings.Contains(errOut, "--dtype") {
		t.Errorf("--dtype fp16: code %d, %q", code, errOut)
	}
}
