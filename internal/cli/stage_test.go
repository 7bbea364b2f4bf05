package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/demo"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/ppo"
	"github.com/gochat-ai/gochat/reward"
	"github.com/gochat-ai/gochat/tensor"
	"github.com/gochat-ai/gochat/tokenizer"
	"github.com/gochat-ai/gochat/train"
)

const sharedData = "../../../shared/data"

// TestMain lets a test re-run this binary as the gochat command (for the
// SIGKILL test): GOCHAT_TEST_MAIN=1 runs Main on the arguments after "--".
// No test reaches the Hub or the developer's Hugging Face cache: the cache
// is an empty temporary folder and HF_HUB_OFFLINE=1, unless a test sets
// HF_ENDPOINT to a fake Hub and clears it (hubnames_test.go).
func TestMain(m *testing.M) {
	if os.Getenv("GOCHAT_TEST_MAIN") == "1" {
		args := os.Args
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		os.Exit(Main(args, os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv("GOCHAT_TEST_SIGNALS") == "1" {
		signalsChild()
	}
	cache, err := os.MkdirTemp("", "gochat-hf-cache-")
	if err != nil {
		panic(err)
	}
	os.Setenv("HF_HUB_CACHE", cache)
	os.Setenv("HF_HOME", cache) // no token file of the developer's
	os.Setenv("HF_HUB_OFFLINE", "1")
	os.Setenv("HF_ENDPOINT", "http://127.0.0.1:1") // nothing listens there
	code := m.Run()
	os.RemoveAll(cache)
	os.Exit(code)
}

// tinyModel writes a randomly initialised tiny OPT with the real OPT
// tokenizer files into a temporary directory.
func tinyModel(t *testing.T) string { return tinyModelWith(t, false) }

// rewardModel is tinyModel with a value head (seeded 3) saved in it.
func rewardModel(t *testing.T) string { return tinyModelWith(t, true) }

func tinyModelWith(t *testing.T, valueHead bool) string {
	t.Helper()
	tokDir := filepath.Join(sharedData, "opt-tokenizer")
	needShared(t, tokDir)
	cfg, err := model.ParseConfig([]byte(`{"model_type":"opt","vocab_size":50272,"hidden_size":32,"ffn_dim":64,
		"num_hidden_layers":2,"num_attention_heads":2,"max_position_embeddings":128,"do_layer_norm_before":true,"dropout":0.1}`))
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := cpu.New(cpu.Options{})
	m, _ := model.New(dev, cfg, model.Options{ValueHead: valueHead})
	m.InitRandom(1, 0.02)
	m.InitValueHead(3)
	dir := t.TempDir()
	if err := m.Save(dir, model.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := copyTokenizerFiles(tokDir, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func sample() string { return filepath.Join(sharedData, "rm-static-sample", "sample.jsonl") }

func metrics(t *testing.T, dir string) []map[string]float64 {
	t.Helper()
	recs, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestSFTAndRewardOverfit trains on ../shared/data/rm-static-sample: the SFT
// loss falls, and the reward model reaches training accuracy 1.
func TestSFTAndRewardOverfit(t *testing.T) {
	mdir := tinyModel(t)
	out := t.TempDir()
	sftDir, rwDir := filepath.Join(out, "sft"), filepath.Join(out, "reward")
	_, errOut, code := run(t, "--log-format", "json", "sft", "--model", mdir, "--data", sample(), "--data-split", "1,0,0",
		"--max-seq-len", "48", "--per-device-train-batch-size", "8", "--learning-rate", "3e-3", "--num-train-epochs", "10",
		"--output-dir", sftDir, "--data-cache", "off", "--enable-tensorboard")
	if code != 0 {
		t.Fatalf("sft: %s", errOut)
	}
	recs := metrics(t, sftDir)
	first, last := recs[0]["loss"], recs[len(recs)-1]["loss"]
	if !(last < first-2) {
		t.Errorf("SFT loss %v -> %v: did not fall", first, last)
	}
	for _, f := range []string{"config.json", "model.safetensors", "vocab.json", "merges.txt", "loss.png", "checkpoint/state.json"} {
		if _, err := os.Stat(filepath.Join(sftDir, f)); err != nil {
			t.Errorf("sft output: %v", err)
		}
	}
	if ev, _ := filepath.Glob(filepath.Join(sftDir, "tensorboard", "events.out.tfevents.*")); len(ev) != 1 {
		t.Errorf("tensorboard files: %v", ev)
	}
	// The saved model is exactly the trained one: its logits equal those of
	// the final training state in checkpoint/.
	checkSavedEqualsCheckpoint(t, sftDir)
	// The SFT output loads and generates, from ids and from text with its
	// own tokenizer.
	if _, errOut, code := run(t, "generate", "--model", sftDir, "--prompt-ids", "2,50118,50118,33837,35", "--max-new-tokens", "3"); code != 0 {
		t.Errorf("generate from the SFT output: %s", errOut)
	}
	gout, errOut, code := run(t, "generate", "--model", sftDir, "--prompt", "\n\nHuman: Hi\n\nAssistant:", "--max-new-tokens", "3", "--json")
	var gen struct {
		PromptIDs []int32 `json:"prompt_ids"`
		Text      *string `json:"text"`
	}
	if code != 0 || json.Unmarshal([]byte(gout), &gen) != nil || gen.Text == nil || len(gen.PromptIDs) != 10 || gen.PromptIDs[0] != 2 || gen.PromptIDs[5] != 12289 {
		t.Errorf("generate --prompt: code %d, %q, %s", code, gout, errOut)
	}

	_, errOut, code = run(t, "--log-format", "json", "reward", "--model", sftDir, "--data", sample(), "--data-split", "0,1,0",
		"--max-seq-len", "48", "--per-device-train-batch-size", "8", "--learning-rate", "2e-3", "--num-train-epochs", "40",
		"--output-dir", rwDir, "--data-cache", "off")
	if code != 0 {
		t.Fatalf("reward: %s", errOut)
	}
	recs = metrics(t, rwDir)
	acc := 0.0
	for _, r := range recs[len(recs)-4:] {
		if a, ok := r["accuracy"]; ok {
			acc = a
		}
	}
	if acc != 1 {
		t.Errorf("reward model training accuracy %v at the end, want 1", acc)
	}
	dev, _ := cpu.New(cpu.Options{})
	rm, err := model.Load(dev, rwDir, model.LoadOptions{})
	if err != nil || !rm.HasValueHead() {
		t.Fatalf("reward output: %v (value head: %v)", err, err == nil && rm.HasValueHead())
	}
	// gochat score ranks the sample's pairs as trained (most rows are in
	// the training part) and scores text exactly as reward.Score does.
	f, err := os.ReadFile(sample())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(rwDir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(f)), "\n")[:10]
	ranked := 0
	for i, line := range lines {
		var row struct{ Prompt, Chosen, Rejected string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		sout, errOut, code := run(t, "score", "--model", rwDir, "--prompt", row.Prompt, "--answer", row.Chosen, "--answer", row.Rejected, "--json", "--dtype", "fp32")
		var res struct{ Scores []float32 }
		if code != 0 || json.Unmarshal([]byte(sout), &res) != nil || len(res.Scores) != 2 {
			t.Fatalf("score: code %d %q %s", code, sout, errOut)
		}
		if res.Scores[0] > res.Scores[1] {
			ranked++
		}
		if i == 0 {
			want, err := reward.Score(rm, [][]int32{tok.Encode(row.Prompt+row.Chosen+data.DefaultEndText, true)}, 0)
			if err != nil || want[0] != res.Scores[0] {
				t.Errorf("gochat score %v, reward.Score %v (%v)", res.Scores[0], want, err)
			}
		}
	}
	if ranked < 8 {
		t.Errorf("gochat score prefers the chosen answer in %d of %d sample rows", ranked, len(lines))
	}
}

func TestStageBadInput(t *testing.T) {
	mdir := tinyModel(t)
	out := t.TempDir()
	base := []string{"--model", mdir, "--data", sample(), "--max-seq-len", "32", "--data-cache", "off", "--max-steps", "1"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"empty split", []string{"sft", "--data-split", "0,1,1", "--output-dir", filepath.Join(out, "a")}, "training split is empty"},
		{"seq too long", []string{"sft", "--max-seq-len", "4096", "--output-dir", filepath.Join(out, "b")}, "max_position_embeddings"},
		{"scheduler", []string{"sft", "--lr-scheduler-type", "warmup_cosine", "--output-dir", filepath.Join(out, "c")}, "unknown lr scheduler"},
		{"lora pattern", []string{"sft", "--lora-dim", "4", "--lora-module-name", "mlp.c_fc", "--output-dir", filepath.Join(out, "d")}, "matches no linear layer"},
		{"nan", []string{"sft", "--learning-rate", "1e30", "--max-grad-norm", "0", "--max-steps", "4", "--lr-scheduler-type", "constant", "--output-dir", filepath.Join(out, "e")}, "non-finite"},
		{"only lora", []string{"reward", "--only-optimize-lora", "--output-dir", filepath.Join(out, "f")}, "--lora-dim"},
	}
	for _, c := range cases {
		args := append(append([]string{"--log-format", "json"}, c.args[0]), append(base, c.args[1:]...)...)
		_, errOut, code := run(t, args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: code %d, stderr %q; want an error containing %q", c.name, code, lastLine(errOut), c.want)
		}
	}
	// A different run in the output directory is refused without --overwrite.
	dir := filepath.Join(out, "g")
	if _, e, code := run(t, append([]string{"--log-format", "json", "sft", "--output-dir", dir}, base...)...); code != 0 {
		t.Fatal(e)
	}
	_, errOut, code := run(t, append([]string{"--log-format", "json", "sft", "--output-dir", dir, "--seed", "5"}, base...)...)
	if code == 0 || !strings.Contains(errOut, "holds a different run") {
		t.Errorf("different run: code %d, %q", code, lastLine(errOut))
	}
	if _, e, code := run(t, append([]string{"--log-format", "json", "sft", "--output-dir", dir, "--seed", "5", "--overwrite"}, base...)...); code != 0 {
		t.Errorf("--overwrite: %s", lastLine(e))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestSFTResumeAfterSIGKILL kills `gochat sft` mid-epoch, resumes it, and
// compares the final weights with an uninterrupted run byte for byte — in
// bf16, so the checkpoint must carry the fp32 master weights as well.
func TestSFTResumeAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the command three times")
	}
	mdir := tinyModel(t)
	out := t.TempDir()
	args := func(dir string) []string {
		return []string{"--log-format", "json", "--threads", "2", "sft", "--model", mdir, "--data", sample(), "--data-split", "1,0,0",
			"--max-seq-len", "40", "--per-device-train-batch-size", "4", "--gradient-accumulation-steps", "2",
			"--num-train-epochs", "4", "--save-interval", "2", "--learning-rate", "1e-3", "--output-dir", dir, "--data-cache", "off",
			"--dtype", "bf16"} // the fp32 master weights must survive the kill too
	}
	ref := filepath.Join(out, "ref")
	if _, e, code := run(t, args(ref)...); code != 0 {
		t.Fatal(e)
	}
	dir := filepath.Join(out, "killed")
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args(dir)...)...)
	cmd.Env = append(os.Environ(), "GOCHAT_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once a checkpoint past step 2 exists (mid-epoch: 3 steps an epoch).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "checkpoint", "state.json"))
		var st struct {
			Position struct {
				Step int `json:"step"`
			} `json:"position"`
		}
		if err == nil && json.Unmarshal(b, &st) == nil && st.Position.Step >= 4 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no checkpoint in time: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		t.Skip("the run finished before it could be killed")
	}
	_, e, code := run(t, append(args(dir), "--resume")...)
	if code != 0 {
		t.Fatalf("resume: %s", e)
	}
	a, _ := os.ReadFile(filepath.Join(ref, "model.safetensors"))
	b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("weights after kill and resume differ from the uninterrupted run")
	}
}

func checkSavedEqualsCheckpoint(t *testing.T, dir string) {
	t.Helper()
	dev, _ := cpu.New(cpu.Options{})
	saved, err := model.Load(dev, dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := tensor.Open(filepath.Join(dir, train.CheckpointDir, "state.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	flat := make([]float32, saved.NumParams())
	if err := ck.ReadF32("param.model", flat); err != nil {
		t.Fatal(err)
	}
	trained, _ := model.New(dev, saved.Config, model.Options{})
	dev.WriteF32(trained.Params.Flat, flat)
	ids := []int32{2, 50118, 50118, 33837, 35, 1437, 20, 6}
	logits := func(m *model.Model) []float32 {
		a := must(m.NewActs(1, len(ids), model.ActsOptions{}))
		if err := m.Forward(a, model.Batch{IDs: ids}); err != nil {
			t.Fatal(err)
		}
		l, _ := m.Logits(a)
		return l
	}
	if !slices.Equal(logits(saved), logits(trained)) {
		t.Error("the saved model's logits differ from the trained model's")
	}
}

// TestColumnMapping trains on a generic JSON-lines file whose columns are
// named by the flags.
func TestColumnMapping(t *testing.T) {
	mdir := tinyModel(t)
	path := filepath.Join(t.TempDir(), "pairs.jsonl")
	rows := `{"q": "\n\nHuman: hi\n\nAssistant:", "good": " hello there", "bad": " go away"}
{"q": "\n\nHuman: 2+2?\n\nAssistant:", "good": " 4", "bad": " 5"}
`
	if err := os.WriteFile(path, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "rw")
	_, errOut, code := run(t, "--log-format", "json", "reward", "--model", mdir, "--data", path, "--data-split", "0,1,0",
		"--prompt-column", "q", "--chosen-column", "good", "--rejected-column", "bad", "--max-seq-len", "32",
		"--max-steps", "2", "--output-dir", out, "--data-cache", "off")
	if code != 0 {
		t.Fatalf("reward with a column mapping: %s", lastLine(errOut))
	}
	if len(metrics(t, out)) < 2 {
		t.Error("no training records")
	}
	_, errOut, code = run(t, "--log-format", "json", "reward", "--model", mdir, "--data", path, "--data-split", "0,1,0",
		"--max-seq-len", "32", "--max-steps", "1", "--output-dir", out+"2", "--data-cache", "off")
	if code == 0 || !strings.Contains(errOut, "prompt") {
		t.Errorf("missing column: code %d, %s", code, lastLine(errOut))
	}
}

// TestChatPipe talks to a model through a pipe: one answer line per
// question, "clear" and "quit" handled.
func TestChatPipe(t *testing.T) {
	mdir := tinyModel(t)
	var out, errb bytes.Buffer
	code := Main([]string{"chat", "--model", mdir, "--max-new-tokens", "5"},
		strings.NewReader("Hello there\n\nHow are you?\nclear\nWhat is 2+2?\nquit\nignored\n"), &out, &errb)
	if code != 0 {
		t.Fatalf("chat: %s", errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Errorf("%d answer lines, want 3:\n%q", n, out.String())
	}
}

// ppoArgs are the arguments of a short step 3 of model dir (actor and
// critic) on the shared sample's prompts, plus extra.
func ppoArgs(dir, out string, extra ...string) []string {
	return append([]string{"--log-format", "json", "ppo", "--actor", dir, "--critic", dir, "--data", sample(),
		"--data-split", "0,0,1", "--max-prompt-seq-len", "100", "--per-device-generation-batch-size", "4",
		"--output-dir", out, "--data-cache", "off"}, extra...)
}

// TestPPOSmoke runs step 3 end to end on the shared sample's prompts with a
// tiny model as actor and critic (a fresh value head) and the same model
// with a value head as the reward model.
func TestPPOSmoke(t *testing.T) {
	mdir, rm := tinyModel(t), rewardModel(t)
	out := filepath.Join(t.TempDir(), "ppo")
	_, errOut, code := run(t, ppoArgs(mdir, out, "--reward", rm, "--max-answer-seq-len", "8", "--per-device-training-batch-size", "2",
		"--max-steps", "2", "--num-warmup-steps", "0", "--enable-ema")...)
	if code != 0 {
		t.Fatalf("ppo: %s", lastLine(errOut))
	}
	for _, d := range []string{"actor", "critic", "actor_ema"} {
		if _, err := os.Stat(filepath.Join(out, d, "model.safetensors")); err != nil {
			t.Errorf("output %s: %v", d, err)
		}
	}
	var tm ppo.Timing
	if b, err := os.ReadFile(filepath.Join(out, ppo.TimingFile)); err != nil || json.Unmarshal(b, &tm) != nil ||
		tm.GenerationSeconds <= 0 || tm.TrainingSeconds <= 0 || tm.ExperienceSeconds <= 0 || tm.GeneratedTokens <= 0 ||
		tm.TotalSeconds < tm.GenerationSeconds+tm.TrainingSeconds {
		t.Errorf("timing.json: %+v, %v", tm, err)
	}
	recs := metrics(t, out)
	if len(recs) < 2 {
		t.Fatalf("%d metrics records", len(recs))
	}
	for _, k := range []string{"actor_loss", "critic_loss", "reward_score", "kl", "answer_len", "generation_tokens_per_sec", "training_seconds"} {
		if _, ok := recs[0][k]; !ok {
			t.Errorf("metrics lack %s", k)
		}
	}
	if _, e, code := run(t, "--log-format", "json", "ppo", "--actor", mdir, "--critic", mdir, "--reward", rm, "--data", sample(),
		"--output-dir", out, "--max-steps", "1", "--max-prompt-seq-len", "100", "--max-answer-seq-len", "8"); code == 0 || !strings.Contains(e, "holds") {
		t.Errorf("existing output: code %d %s", code, lastLine(e))
	}
}

// scoreOf runs `gochat score` on one answer.
func scoreOf(t *testing.T, rm, prompt, answer string) float64 {
	t.Helper()
	// fp32: the callers compare with fp32 models loaded here (--dtype auto
	// would depend on the CPU).
	out, e, code := run(t, "score", "--model", rm, "--prompt", prompt, "--answer", answer, "--json", "--dtype", "fp32")
	var res struct{ Scores []float64 }
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Scores) != 1 {
		t.Fatalf("gochat score: code %d %s %s", code, out, lastLine(e))
	}
	return res.Scores[0]
}

// TestPrintAnswersMatchScore: the score `gochat ppo --print-answers` prints
// for a sampled answer is `gochat score`'s on the printed prompt and
// answer; and step 3's scoring path (rewardSequence, then reward.Score)
// gives `gochat score`'s score for answers that end in "." and in EOS, where
// joining separately tokenized ids would not (BPE merges "." with the end
// text).
func TestPrintAnswersMatchScore(t *testing.T) {
	rm := rewardModel(t)
	out := filepath.Join(t.TempDir(), "ppo")
	_, errOut, code := run(t, ppoArgs(rm, out, "--max-answer-seq-len", "6", "--per-device-training-batch-size", "4",
		"--max-steps", "1", "--print-answers", "--dtype", "fp32")...)
	if code != 0 {
		t.Fatalf("ppo: %s", lastLine(errOut))
	}
	n := 0
	for _, line := range strings.Split(errOut, "\n") {
		var rec struct {
			Message        string
			Prompt, Answer string
			Score          float64
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Message != "sample" {
			continue
		}
		n++
		if got := scoreOf(t, rm, rec.Prompt, rec.Answer); math.Abs(got-rec.Score) > 1e-5*(1+math.Abs(got)) {
			t.Errorf("answer %q: --print-answers score %v, gochat score %v", rec.Answer, rec.Score, got)
		}
	}
	if n == 0 {
		t.Fatal("no sample lines")
	}

	dev, _ := cpu.New(cpu.Options{})
	m, err := model.Load(dev, rm, model.LoadOptions{ValueHead: "yes"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(rm)
	if err != nil {
		t.Fatal(err)
	}
	eos := int32(m.Config.EOSTokenID)
	seqOf := rewardSequence(tok, eos, data.DefaultEndText)
	prompt := "\n\nHuman: What is the capital of France?\n\nAssistant:"
	pids := tok.Encode(prompt, true)
	for _, c := range []struct {
		answer string
		eos    bool
	}{{" Paris.", false}, {" Paris.", true}, {" It is Paris", true}} {
		ids := tok.Encode(c.answer, false)
		if c.eos {
			ids = append(ids, eos)
		}
		seq, err := seqOf(pids, ids)
		if err != nil {
			t.Fatal(err)
		}
		got, err := reward.Score(m, [][]int32{seq}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := scoreOf(t, rm, prompt, c.answer); math.Abs(float64(got[0])-want) > 1e-5*(1+math.Abs(want)) {
			t.Errorf("answer %q (EOS %v): step 3 scores %v, gochat score %v", c.answer, c.eos, got[0], want)
		}
	}
}

// checkStepReports checks what scripts/gpu-check.sh (rlhf-run) reads from
// the JSON log of `gochat train`: for each of the three steps a "step done"
// line with its elapsed_seconds and a "memory:" line with the step's name
// and its device peak.
func checkStepReports(t *testing.T, log string) {
	t.Helper()
	done, peak := map[float64]float64{}, map[string]float64{}
	for _, line := range strings.Split(log, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		msg, _ := rec["message"].(string)
		switch {
		case msg == "step done":
			n, _ := rec["step"].(float64)
			done[n], _ = rec["elapsed_seconds"].(float64)
		case strings.HasPrefix(msg, "memory: device peak"):
			name, _ := rec["step"].(string)
			peak[name], _ = rec["device_peak_bytes"].(float64)
		}
	}
	for n, name := range []string{"step 1 (sft)", "step 2 (reward)", "step 3 (ppo)"} {
		if done[float64(n+1)] <= 0 {
			t.Errorf("no elapsed_seconds in step %d's \"step done\" line (%v)", n+1, done)
		}
		if peak[name] <= 0 {
			t.Errorf("no device_peak_bytes for %s (%v)", name, peak)
		}
	}
}

// TestTrainSteps runs `gochat train` with a recipe file on the shared
// sample: all three steps, then nothing to redo, then --force for step 3,
// and a recipe with a misspelt flag.
func TestTrainSteps(t *testing.T) {
	mdir := tinyModel(t)
	dir := t.TempDir()
	recipe := filepath.Join(dir, "r.yaml")
	body := `description: test
steps:
  sft: {data-split: "1,0,0", max-seq-len: 48, per-device-train-batch-size: 8, max-steps: 2, data-cache: "off"}
  reward: {data-split: "0,1,0", max-seq-len: 48, per-device-train-batch-size: 8, max-steps: 2, data-cache: "off"}
  ppo: {data-split: "0,0,1", max-prompt-seq-len: 100, max-answer-seq-len: 6, per-device-generation-batch-size: 4,
        per-device-training-batch-size: 4, max-steps: 1, num-warmup-steps: 0, data-cache: "off"}
`
	os.WriteFile(recipe, []byte(body), 0o644)
	out := filepath.Join(dir, "out")
	args := []string{"--log-format", "json", "train", "--actor", mdir, "--reward", mdir, "--data", sample(), "--recipe", recipe, "--output-dir", out}
	_, errOut, code := run(t, args...)
	if code != 0 {
		t.Fatalf("train: %s", lastLine(errOut))
	}
	for _, d := range []string{"actor", "reward", "ppo/actor", "ppo/critic"} {
		if _, err := os.Stat(filepath.Join(out, d, "model.safetensors")); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	checkStepReports(t, errOut)
	_, errOut, _ = run(t, args...)
	if strings.Count(errOut, "complete, skipped") != 3 {
		t.Errorf("second run did not skip the three finished steps:\n%s", errOut)
	}
	_, errOut, code = run(t, append(args, "--step", "3", "--force")...)
	if code != 0 || strings.Count(errOut, "step done") != 1 {
		t.Errorf("--step 3 --force: code %d\n%s", code, errOut)
	}
	os.WriteFile(recipe, []byte("steps:\n  sft: {learning-rat: 1}\n"), 0o644)
	_, errOut, code = run(t, append(args, "--force")...)
	if code != exitUsage || !strings.Contains(errOut, "learning-rat") {
		t.Errorf("misspelt recipe flag: code %d, %s", code, lastLine(errOut))
	}
}

// TestTrainDemoShort runs the demo recipe's pipeline, shortened, and checks
// report.json's shape.
func TestTrainDemoShort(t *testing.T) {
	dir := t.TempDir()
	recipe := filepath.Join(dir, "demo-short.yaml")
	body := `description: the demo, shortened for CI
generator: demo
actor: "{demo}/base"
reward: "{output}/actor"
steps:
  sft: {data: ["{demo}/data/sft"], data-split: "1,0,0", max-seq-len: 40, per-device-train-batch-size: 32, max-steps: 3, add-eot-token: true, data-cache: "off"}
  reward: {data: ["{demo}/data/pairs"], data-split: "0,1,0", max-seq-len: 40, per-device-train-batch-size: 32, max-steps: 3, data-cache: "off"}
  ppo: {critic: "{output}/actor", reward: "{output}/reward", data: ["{demo}/data/prompts"], data-split: "0,0,1", max-prompt-seq-len: 40, max-answer-seq-len: 6, per-device-generation-batch-size: 16, per-device-training-batch-size: 16, max-steps: 2, num-warmup-steps: 0, enable-ema: true, data-cache: "off"}
`
	os.WriteFile(recipe, []byte(body), 0o644)
	out := filepath.Join(dir, "out")
	rep, _ := runDemo(t, "--log-format", "json", "train", "--recipe", recipe, "--output-dir", out)
	want := map[string][]string{
		"sft":    {"steps", "train_loss_first", "train_loss_last", "eval_loss"},
		"reward": {"steps", "eval_accuracy", "chosen_mean", "rejected_mean"},
		"ppo":    {"steps", "reward_mean_first", "reward_mean_last", "kl_last"},
		"eval":   {"prompts", "sft_accuracy", "ppo_accuracy", "ppo_ema_accuracy", "sft_reward_mean", "ppo_reward_mean"},
		"timing": {"step1_seconds", "step2_seconds", "step3_seconds", "generation_seconds", "training_seconds"},
	}
	for blk, keys := range want {
		for _, k := range keys {
			if _, ok := rep[blk][k]; !ok {
				t.Errorf("report.json lacks %s.%s", blk, k)
			}
		}
	}
	if rep["eval"]["prompts"] != float64(demo.DefaultOptions.Eval) || rep["sft"]["steps"] != 3 {
		t.Errorf("report %v", rep)
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Error(err)
	}
}

// TestDemoMeetsTargets runs the README's main job, the full demo recipe,
// and checks issue 5's targets on the held-out questions: reward-model
// accuracy ≥ 0.9, and PPO beating SFT in exact-checker accuracy and in
// reward-model score, for the OPT demo and its LLaMA-family twin. About
// two minutes each on two cores.
func TestDemoMeetsTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the full demo")
	}
	// opt: the default; llama: `gochat train --recipe demo --arch llama`,
	// the demo's models in the LLaMA family's shape (issue 14).
	for _, arch := range []string{"opt", "llama"} {
		t.Run(arch, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "demo")
			args := []string{"--log-format", "json", "train", "--recipe", "demo", "--output-dir", out}
			if arch != "opt" {
				args = append(args, "--arch", arch)
			}
			rep, b := runDemo(t, args...)
			ev := rep["eval"]
			t.Logf("report: %s", b)
			if rep["reward"]["eval_accuracy"] < 0.9 {
				t.Errorf("reward eval_accuracy %v < 0.9", rep["reward"]["eval_accuracy"])
			}
			if !(ev["ppo_accuracy"] > ev["sft_accuracy"]) {
				t.Errorf("ppo_accuracy %v does not beat sft_accuracy %v", ev["ppo_accuracy"], ev["sft_accuracy"])
			}
			if !(ev["ppo_reward_mean"] > ev["sft_reward_mean"]) {
				t.Errorf("ppo_reward_mean %v does not beat sft_reward_mean %v", ev["ppo_reward_mean"], ev["sft_reward_mean"])
			}
		})
	}
}

// TestTrainResumeAfterSIGKILL kills `gochat train` during step 2, and
// again during step 3 (actor LoRA, two generation batches per round, two
// PPO epochs, score scaling and mixture training on), and runs it again
// each time: finished steps are not redone, the interrupted one resumes
// from its checkpoint, and every output equals an uninterrupted run's byte
// for byte.
func TestTrainResumeAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline several times")
	}
	mdir := tinyModel(t)
	dir := t.TempDir()
	recipe := filepath.Join(dir, "r.yaml")
	os.WriteFile(recipe, []byte(`description: resume test
steps:
  sft: {data-split: "1,0,0", max-seq-len: 40, per-device-train-batch-size: 8, max-steps: 2, data-cache: "off"}
  reward: {data-split: "0,1,0", max-seq-len: 40, per-device-train-batch-size: 2, max-steps: 24, save-interval: 1, data-cache: "off"}
  ppo: {data-split: "0,0,1", max-prompt-seq-len: 100, max-answer-seq-len: 6, per-device-generation-batch-size: 2,
        per-device-training-batch-size: 1, max-steps: 12, save-interval: 1, num-warmup-steps: 0, enable-ema: true,
        actor-lora-dim: 4, generation-batches: 2, ppo-epochs: 2, use-score-scaling: true, use-score-norm: true,
        unsupervised-dataset: "`+sample()+`", unsupervised-dataset-column: chosen, data-cache: "off"}
`), 0o644)
	args := func(out string) []string {
		return []string{"--log-format", "json", "--threads", "2", "train", "--actor", mdir, "--reward", mdir, "--data", sample(),
			"--recipe", recipe, "--output-dir", out}
	}
	ref := filepath.Join(dir, "ref")
	if _, e, code := run(t, args(ref)...); code != 0 {
		t.Fatal(lastLine(e))
	}
	for _, step := range listDir(ref) {
		if _, err := os.Stat(filepath.Join(ref, step, runFile)); err == nil {
			assertRunOutputs(t, filepath.Join(ref, step))
		}
	}
	out := filepath.Join(dir, "killed")
	// killAt runs the pipeline in a child process and SIGKILLs it once the
	// step's checkpoint record satisfies ready.
	killAt := func(step string, ready func(b []byte) bool) {
		cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args(out)...)...)
		cmd.Env = append(os.Environ(), "GOCHAT_TEST_MAIN=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			b, err := os.ReadFile(filepath.Join(out, step, "checkpoint", "state.json"))
			if err == nil && ready(b) {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("no %s checkpoint in time", step)
			}
			time.Sleep(2 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if _, err := os.Stat(filepath.Join(out, step, completeFile)); err == nil {
			t.Skipf("%s finished before it could be killed", step)
		}
	}
	// Step 2, after its third optimizer step.
	killAt("reward", func(b []byte) bool {
		var st struct {
			Position struct {
				Step int `json:"step"`
			} `json:"position"`
		}
		return json.Unmarshal(b, &st) == nil && st.Position.Step >= 3
	})
	// Running again resumes step 2; kill it again in step 3.
	killAt("ppo", func(b []byte) bool {
		var st struct {
			Position struct {
				Batches int `json:"micro_step"`
			} `json:"position"`
		}
		return json.Unmarshal(b, &st) == nil && st.Position.Batches >= 4
	})
	_, errOut, code := run(t, args(out)...)
	if code != 0 {
		t.Fatal(lastLine(errOut))
	}
	if strings.Count(errOut, "complete, skipped") != 2 {
		t.Errorf("steps 1 and 2 were not skipped:\n%s", errOut)
	}
	if !strings.Contains(errOut, "resumed from checkpoint") {
		t.Errorf("step 3 did not resume:\n%s", errOut)
	}
	for _, f := range []string{"reward/model.safetensors", "ppo/actor/model.safetensors", "ppo/critic/model.safetensors",
		"ppo/actor_ema/model.safetensors"} {
		a, _ := os.ReadFile(filepath.Join(ref, f))
		b, _ := os.ReadFile(filepath.Join(out, f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s after kill and resume differs from the uninterrupted run's", f)
		}
	}
	want, got := metrics(t, filepath.Join(ref, "ppo")), metrics(t, filepath.Join(out, "ppo"))
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("step-3 metrics: %d records after resume, %d uninterrupted", len(got), len(want))
	}
	if _, ok := want[0]["unsup_loss"]; !ok {
		t.Error("step-3 metrics lack unsup_loss (mixture training)")
	}
	// 2 generation batches of 2 prompts, micro-batches of 1 row, 2 PPO
	// epochs: more than 4 iterations a round only if both took effect.
	if want[0]["ppo_steps"] < 5 {
		t.Errorf("round 1 ran %v PPO iterations; --generation-batches 2 --ppo-epochs 2 not in effect", want[0]["ppo_steps"])
	}
	for i := range want {
		for _, k := range []string{"step", "reward_score", "reward_score_ema", "kl", "actor_loss", "critic_loss", "unsup_loss", "actor_lr"} {
			if got[i][k] != want[i][k] {
				t.Errorf("metrics record %d: %s %v, uninterrupted %v", i, k, got[i][k], want[i][k])
			}
		}
	}
	if _, err := os.Stat(filepath.Join(out, "ppo", train.CheckpointDir)); err == nil {
		t.Error("the finished step 3 left its checkpoint behind")
	}
}

// TestChatClampsMaxNewTokens: a --max-new-tokens past the model's room is
// capped with a notice (half the positions), not refused.
func TestChatClampsMaxNewTokens(t *testing.T) {
	mdir := tinyModel(t)
	var out, errb bytes.Buffer
	code := Main([]string{"chat", "--model", mdir, "--max-new-tokens", "100000"},
		strings.NewReader("Hello there\nquit\n"), &out, &errb)
	if code != 0 {
		t.Fatalf("chat: %s", errb.String())
	}
	if !strings.Contains(errb.String(), "answers are capped at") {
		t.Errorf("no notice of the cap in %q", errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Errorf("%d answer lines, want 1:\n%q", n, out.String())
	}
}

// runDemo runs gochat train with args (a recipe with the demo generator,
// --output-dir OUT) and returns OUT/report.json, parsed and as written.
func runDemo(t *testing.T, args ...string) (map[string]map[string]float64, []byte) {
	t.Helper()
	if _, errOut, code := run(t, args...); code != 0 {
		t.Fatalf("demo: %s", lastLine(errOut))
	}
	out := args[slices.Index(args, "--output-dir")+1]
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]map[string]float64
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, b
}
