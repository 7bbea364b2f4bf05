package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/chattemplate"
	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/reward"
	"github.com/gochat-ai/gochat/tokenizer"
)

// TestTrainQwen2ChatTemplate (issue 14's must-show): `gochat train` takes
// a Qwen2-shaped model (tiny, random init: `gochat init --arch
// qwen2-tiny`) with the Qwen2.5 tokenizer and chat template through SFT,
// the reward model and PPO. Every step renders its data with the
// template; the outputs are Qwen2 directories (the reward model and
// critic as Qwen2ForSequenceClassification with score.weight) that load
// again; the step-3 actor's answers end at the template's end of turn.
func TestTrainQwen2ChatTemplate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the three steps")
	}
	qwen3, qwen25 := filepath.Join(sharedData, "qwen3-tokenizer"), filepath.Join(sharedData, "qwen2.5-tokenizer")
	needShared(t, qwen3, qwen25)
	dir := t.TempDir()
	tok := filepath.Join(dir, "tok")
	os.MkdirAll(tok, 0o755)
	// Qwen2.5's vocabulary is Qwen3's (SOURCES.md); its config has the
	// Qwen2.5 chat template.
	for src, name := range map[string]string{filepath.Join(qwen3, "tokenizer.json"): "tokenizer.json",
		filepath.Join(qwen25, "tokenizer_config.json"): "tokenizer_config.json"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(tok, name), b, 0o644)
	}
	// Qwen2.5-Instruct's generation config: generation stops at either id.
	genCfg := `{"eos_token_id": [151645, 151643], "pad_token_id": 151643}`
	os.WriteFile(filepath.Join(tok, "generation_config.json"), []byte(genCfg), 0o644)
	base := filepath.Join(dir, "base")
	if _, e, code := run(t, "--log-format", "json", "init", "--arch", "qwen2-tiny", "--output-dir", base, "--tokenizer", tok); code != 0 {
		t.Fatal(lastLine(e))
	}
	recipe := filepath.Join(dir, "r.yaml")
	os.WriteFile(recipe, []byte(`description: qwen2-tiny with its chat template
steps:
  sft: {data-split: "2,4,4", max-seq-len: 128, per-device-train-batch-size: 4, max-steps: 3, data-cache: "off"}
  reward: {data-split: "2,4,4", max-seq-len: 128, per-device-train-batch-size: 2, max-steps: 3, data-cache: "off"}
  ppo: {data-split: "2,4,4", max-prompt-seq-len: 96, max-answer-seq-len: 8, per-device-generation-batch-size: 2,
        per-device-training-batch-size: 2, max-steps: 2, num-warmup-steps: 0, print-answers: true, data-cache: "off"}
`), 0o644)
	out := filepath.Join(dir, "out")
	_, e, code := run(t, "--log-format", "json", "train", "--actor", base, "--reward", base, "--data", sample(),
		"--recipe", recipe, "--output-dir", out)
	if code != 0 {
		t.Fatal(lastLine(e))
	}
	for _, want := range []string{"step 1 renders the data with the chat template", "step 2 renders the data with the chat template",
		"step 3 renders the prompts with the chat template"} {
		if !strings.Contains(e, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	for _, c := range []struct {
		dir, vh, arch string
	}{
		{"actor", "no", "Qwen2ForCausalLM"}, {"reward", "require", "Qwen2ForSequenceClassification"},
		{"ppo/actor", "no", "Qwen2ForCausalLM"}, {"ppo/critic", "require", "Qwen2ForSequenceClassification"},
	} {
		p := filepath.Join(out, c.dir)
		m, err := model.Load(dev, p, model.LoadOptions{ValueHead: c.vh})
		if err != nil {
			t.Errorf("%s: %v", c.dir, err)
			continue
		}
		cfg, _ := os.ReadFile(filepath.Join(p, "config.json"))
		if m.Config.ModelType != "qwen2" || !strings.Contains(string(cfg), c.arch) {
			t.Errorf("%s: model_type %q, config %s", c.dir, m.Config.ModelType, cfg)
		}
		if tk, err := tokenizer.Load(p); err != nil {
			t.Errorf("%s: tokenizer: %v", c.dir, err)
		} else if ids := tk.EOSIDs(); !slices.Contains(ids, 151643) || !slices.Contains(ids, 151645) {
			t.Errorf("%s: eos ids %v: generation_config.json was not kept", c.dir, ids)
		}
	}
	// --print-answers shows the rendered prompts: the generation prompt of
	// the Qwen2.5 template.
	if !strings.Contains(e, `<|im_start|>assistant\n`) {
		t.Errorf("step 3's prompts do not end with the template's generation prompt:\n%s", lastLine(e))
	}

	// gochat score renders the conversation and the answer with the
	// template, as step 2 trained the reward model.
	rm := filepath.Join(out, "reward")
	sout, e, code := run(t, "--log-format", "json", "score", "--model", rm, "--prompt", "\n\nHuman: What is 2+2?\n\nAssistant:",
		"--answer", " 4", "--answer", " 5", "--json", "--dtype", "fp32")
	var got struct {
		Scores []float32
		IDs    [][]int32 `json:"ids"`
	}
	if code != 0 || json.Unmarshal([]byte(sout), &got) != nil || len(got.Scores) != 2 || len(got.IDs) != 2 {
		t.Fatalf("score: code %d %q %s", code, sout, lastLine(e))
	}
	tpl, err := chattemplate.Load(rm)
	if err != nil {
		t.Fatal(err)
	}
	rtok, _ := tokenizer.Load(rm)
	m, _ := model.Load(dev, rm, model.LoadOptions{ValueHead: "require"})
	for i, a := range []string{"4", "5"} {
		text, err := tpl.Render([]chattemplate.Message{{Role: "user", Content: "What is 2+2?"}, {Role: "assistant", Content: a}}, chattemplate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids := rtok.Encode(text, false)
		want, err := reward.Score(m, [][]int32{ids}, 0)
		if err != nil || want[0] != got.Scores[i] {
			t.Errorf("gochat score of %q: %v, the rendered conversation scores %v (%v)", a, got.Scores[i], want, err)
		}
		if !slices.Equal(got.IDs[i], ids) {
			t.Errorf("gochat score --json of %q: ids %v, the rendered conversation is %v", a, got.IDs[i], ids)
		}
	}
	// gochat generate --chat-template auto starts from the rendered
	// conversation with the generation prompt.
	actor := filepath.Join(out, "ppo", "actor")
	gout, e, code := run(t, "--log-format", "json", "generate", "--model", actor, "--prompt", "What is 2+2?",
		"--chat-template", "auto", "--max-new-tokens", "2", "--json")
	var gen struct {
		PromptIDs []int32 `json:"prompt_ids"`
	}
	if code != 0 || json.Unmarshal([]byte(gout), &gen) != nil {
		t.Fatalf("generate: code %d %q %s", code, gout, lastLine(e))
	}
	text, err := tpl.Render([]chattemplate.Message{{Role: "user", Content: "What is 2+2?"}}, chattemplate.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := rtok.Encode(text, false); !slices.Equal(gen.PromptIDs, want) {
		t.Errorf("generate's prompt %v, the rendered conversation %v", gen.PromptIDs, want)
	}
}
