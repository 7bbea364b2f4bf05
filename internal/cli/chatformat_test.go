package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/chattemplate"
	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/tokenizer"
)

// testTemplate is a small chat template for the OPT test models: turns as
// "### role:\n" headers, assistant turns ended by eos_token (OPT's </s>).
const testTemplate = "{% for m in messages %}{{ '### ' + m['role'] + ':\\n' + m['content'] }}" +
	"{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}" +
	"{% if add_generation_prompt %}{{ '### assistant:\\n' }}{% endif %}"

func writeTemplate(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "chat.jinja")
	if err := os.WriteFile(p, []byte(testTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestChatTemplateFlag: --chat-template defaults to auto on sft, reward,
// ppo, train, chat and data inspect; gochat train passes it to every step
// (a recipe's value applies to its step unless the command line sets it);
// a run without a template keeps its fingerprint (no chat_template field).
func TestChatTemplateFlag(t *testing.T) {
	g := &Globals{}
	var st *StageOptions
	for _, mk := range []func() interface {
		SetArgs([]string)
		Execute() error
	}{
		func() interface {
			SetArgs([]string)
			Execute() error
		} {
			return newSFTCmd(g, func(o *StageOptions) error { st = o; return nil })
		},
		func() interface {
			SetArgs([]string)
			Execute() error
		} {
			return newRewardCmd(g, func(o *StageOptions) error { st = o; return nil })
		},
	} {
		for _, c := range []struct {
			args []string
			want string
		}{{nil, "auto"}, {[]string{"--chat-template", "none"}, "none"}, {[]string{"--chat-template", "t.jinja"}, "t.jinja"}} {
			cmd := mk()
			cmd.SetArgs(append([]string{"--model", "m", "--output-dir", "o"}, c.args...))
			if err := cmd.Execute(); err != nil || st.ChatTemplate != c.want {
				t.Errorf("%v: %v, chat template %q, want %q", c.args, err, st.ChatTemplate, c.want)
			}
		}
		if b, _ := json.Marshal(st); strings.Contains(string(b), "chat") {
			t.Errorf("a run without a template has a chat field in its fingerprint: %s", b)
		}
	}
	var p *PPOOptions
	pc := newPPOCmd(g, func(o *PPOOptions) error { p = o; return nil })
	pc.SetArgs([]string{"--actor", "a", "--critic", "c", "--output-dir", "o"})
	if err := pc.Execute(); err != nil || p.ChatTemplate != "auto" {
		t.Fatalf("ppo: %v %q", err, p.ChatTemplate)
	}
	if b, _ := json.Marshal(p); strings.Contains(string(b), "Chat") {
		t.Errorf("ppo: a run without a template has a chat field in its fingerprint: %s", b)
	}
	p.ChatDigest = "abc"
	if b, _ := json.Marshal(p); !strings.Contains(string(b), `"ChatDigest":"abc"`) {
		t.Errorf("ppo: the template digest is not in the fingerprint: %s", b)
	}
	var ch *ChatOptions
	cc := newChatCmd(g, func(o *ChatOptions) error { ch = o; return nil })
	cc.SetArgs([]string{"--model", "m", "--chat-template", "none"})
	if err := cc.Execute(); err != nil || ch.ChatTemplate != "none" {
		t.Errorf("chat: %v %+v", err, ch)
	}
	var di *DataInspectOptions
	dc := newDataCmd(g, func(o *DataInspectOptions) error { di = o; return nil })
	dc.SetArgs([]string{"inspect", "x.jsonl"})
	if err := dc.Execute(); err != nil || di.ChatTemplate != "auto" {
		t.Errorf("data inspect: %v %+v", err, di)
	}

	recipe := filepath.Join(t.TempDir(), "r.yaml")
	os.WriteFile(recipe, []byte("description: t\nsteps:\n  reward: {chat-template: none}\n"), 0o644)
	for _, c := range []struct {
		args []string
		want [3]string // what sft, reward and ppo get
	}{
		{nil, [3]string{"auto", "none", "auto"}},
		{[]string{"--chat-template", "f.jinja"}, [3]string{"f.jinja", "f.jinja", "f.jinja"}},
		{[]string{"--chat-template", "auto"}, [3]string{"auto", "auto", "auto"}},
	} {
		var tr *TrainOptions
		tc := newTrainCmd(g, func(o *TrainOptions) error { tr = o; return nil })
		tc.SetArgs(append([]string{"--actor", "a", "--reward", "r", "--output-dir", "o", "--recipe", recipe}, c.args...))
		if err := tc.Execute(); err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 3; n++ {
			st, so := tr.newStep(n)
			if err := tr.prepare(st, st.args, false); err != nil {
				t.Fatalf("%v step %d: %v", c.args, n, err)
			}
			got := ""
			if so.stage != nil {
				got = so.stage.ChatTemplate
			} else {
				got = so.ppo.ChatTemplate
			}
			if got != c.want[n-1] {
				t.Errorf("train %v: step %d gets --chat-template %q, want %q", c.args, n, got, c.want[n-1])
			}
		}
	}
}

// TestResolveChatTemplate: auto finds the tokenizer's template or none
// (OPT), none is none, FILE renders with the tokenizer's special tokens; a
// missing or useless FILE is a usage error. stopIDs adds the template's
// end-of-turn token when it is a special token.
func TestResolveChatTemplate(t *testing.T) {
	opt := filepath.Join(sharedData, "opt-tokenizer")
	qwen := filepath.Join(sharedData, "qwen3-tokenizer")
	tiny := filepath.Join(sharedData, "tinyllama-tokenizer")
	needShared(t, opt, qwen, tiny)
	load := func(dir string) *tokenizer.Tokenizer {
		tok, err := tokenizer.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	optTok, qwenTok, tinyTok := load(opt), load(qwen), load(tiny)
	for _, flag := range []string{"auto", "none"} {
		if cf, err := resolveChatTemplate(flag, opt, optTok); cf != nil || err != nil {
			t.Errorf("OPT %s: %v %v", flag, cf, err)
		}
	}
	if cf, err := resolveChatTemplate("none", qwen, qwenTok); cf != nil || err != nil {
		t.Errorf("Qwen3 none: %v %v", cf, err)
	}
	cf, err := resolveChatTemplate("auto", qwen, qwenTok)
	if err != nil || cf == nil || cf.End != "<|im_end|>\n" {
		t.Fatalf("Qwen3 auto: %+v %v", cf, err)
	}
	imEnd, _ := qwenTok.TokenID("<|im_end|>")
	if ids := stopIDs(qwenTok, cf); !slices.Contains(ids, imEnd) || !slices.Contains(ids, qwenTok.EOSIDs()[0]) {
		t.Errorf("Qwen3 stop ids %v lack <|im_end|> %d", ids, imEnd)
	}
	if ids := stopIDs(qwenTok, nil); slices.Contains(ids, imEnd) && qwenTok.EOSIDs()[0] != imEnd {
		t.Errorf("Qwen3 without a template stops at <|im_end|>: %v", ids)
	}
	tcf, err := resolveChatTemplate("auto", tiny, tinyTok)
	if err != nil || tcf == nil {
		t.Fatal(err)
	}
	if ids, eos := stopIDs(tinyTok, tcf), tinyTok.EOSIDs(); !slices.Equal(ids, eos) {
		t.Errorf("TinyLlama stop ids %v, want its EOS ids %v (its end of turn is </s>)", ids, eos)
	}

	file := writeTemplate(t)
	fcf, err := resolveChatTemplate(file, opt, optTok)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := fcf.Reply([]chattemplate.Message{{Role: "user", Content: "Hi"}}, "Hello.")
	if want := "### user:\nHi\n### assistant:\nHello.</s>\n"; got != want || fcf.End != "</s>\n" {
		t.Errorf("FILE with OPT's eos_token: %q, want %q (end %q)", got, want, fcf.End)
	}
	if ids := stopIDs(optTok, fcf); !slices.Equal(ids, []int32{2}) {
		t.Errorf("OPT stop ids %v", ids)
	}
	for _, c := range []struct{ src, want string }{
		{"", "no such file"},
		{"{{ messages[0]['content'] }}", "does not write the assistant"},
		{"{% if %}", "--chat-template"},
	} {
		f := filepath.Join(t.TempDir(), "bad.jinja")
		if c.src != "" {
			os.WriteFile(f, []byte(c.src), 0o644)
		}
		_, err := resolveChatTemplate(f, opt, optTok)
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ue) {
			t.Errorf("template %q: %v, want a usage error with %q", c.src, err, c.want)
		}
	}
}

// TestChatRewardSequence: step 3's reward model sees an answer as step 2
// saw a chosen answer: the generated ids (the template's lead, the text,
// the end-of-turn token) give the sequence step 2 built for that text.
func TestChatRewardSequence(t *testing.T) {
	for _, dir := range []string{"qwen3-tokenizer", "tinyllama-tokenizer"} {
		path := filepath.Join(sharedData, dir)
		needShared(t, path)
		dt, eos, _, _, err := loadDataTokenizer(path, 1)
		if err != nil {
			t.Fatal(err)
		}
		tok := dt.t
		cf, err := resolveChatTemplate("auto", path, tok)
		if err != nil {
			t.Fatal(err)
		}
		s := data.Sample{Prompt: "\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: What is 2+2?\n\nAssistant:", Chosen: " It is 4."}
		o := data.Options{MaxSeqLen: 512, MaxPromptLen: 512, Tokenizer: dt, Chat: cf, EOS: eos}
		prompt, _, err := data.NewExample(s, data.PhasePPO, o)
		if err != nil {
			t.Fatal(err)
		}
		pair, _, err := data.NewExample(s, data.PhaseReward, o)
		if err != nil {
			t.Fatal(err)
		}
		stops := stopIDs(tok, cf)
		stop := func(id int32) bool { return slices.Contains(stops, id) }
		// What the actor would generate: the lead, the answer, the end of turn.
		answer := tok.Encode(cf.Lead+"It is 4.", false)
		answer = append(answer, stops[len(stops)-1], 13)
		cr := newChatReward(tok, cf, []data.Example{prompt}, stop)
		seq, err := cr.sequence(prompt.IDs, answer)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seq, pair.IDs) {
			t.Errorf("%s: reward sequence\n%v\nstep 2's\n%v", dir, seq, pair.IDs)
		}
		if _, err := cr.sequence(answer, answer); err == nil {
			t.Errorf("%s: an unknown prompt was scored", dir)
		}
		p, a, err := cr.texts(prompt.IDs, answer)
		if err != nil || !strings.HasSuffix(p, "assistant\n") && !strings.HasSuffix(p, "<|assistant|>\n") || a != cf.Lead+"It is 4." {
			t.Errorf("%s: texts %q %q %v", dir, p, a, err)
		}
	}
}

// TestTrainChatTemplateFile runs gochat train with --chat-template FILE on
// the tiny OPT (steps 1-3 render the data with it), checks that the step
// outputs carry the template as chat_template.jinja and their run records
// its digest, that `gochat chat` on the SFT output picks it up (auto), and
// that `gochat data inspect` builds the same step-1 ids as the template's
// rendering tokenized without BOS.
func TestTrainChatTemplateFile(t *testing.T) {
	mdir := tinyModel(t)
	file := writeTemplate(t)
	dir := t.TempDir()
	recipe := filepath.Join(dir, "r.yaml")
	body := `description: test
steps:
  sft: {data-split: "1,0,0", max-seq-len: 64, per-device-train-batch-size: 8, max-steps: 2, data-cache: "off"}
  reward: {data-split: "0,1,0", max-seq-len: 64, per-device-train-batch-size: 8, max-steps: 2, data-cache: "off"}
  ppo: {data-split: "0,0,1", max-prompt-seq-len: 100, max-answer-seq-len: 6, per-device-generation-batch-size: 4,
        per-device-training-batch-size: 4, max-steps: 1, num-warmup-steps: 0, data-cache: "off", print-answers: true}
`
	os.WriteFile(recipe, []byte(body), 0o644)
	out := filepath.Join(dir, "out")
	_, errOut, code := run(t, "--log-format", "json", "train", "--actor", mdir, "--reward", mdir, "--data", sample(),
		"--recipe", recipe, "--output-dir", out, "--chat-template", file)
	if code != 0 {
		t.Fatalf("train: %s", lastLine(errOut))
	}
	if n := strings.Count(errOut, "renders the"); n != 3 {
		t.Errorf("%d steps say they render with the template, want 3", n)
	}
	if !strings.Contains(errOut, `"prompt":"### user:\n`) {
		t.Errorf("step 3's sample prompts are not rendered with the template:\n%s", errOut)
	}
	tm, _ := chattemplate.New(testTemplate, nil)
	for _, d := range []string{"actor", "reward", "ppo/actor", "ppo/critic"} {
		b, err := os.ReadFile(filepath.Join(out, d, chatTemplateFile))
		if err != nil || string(b) != testTemplate {
			t.Errorf("%s/%s: %v", d, chatTemplateFile, err)
		}
	}
	for _, d := range []string{"actor", "reward"} {
		b, _ := os.ReadFile(filepath.Join(out, d, runFile))
		if !strings.Contains(string(b), tm.Digest()) {
			t.Errorf("%s/%s does not record the template digest", d, runFile)
		}
	}
	// The SFT output's own template (auto) drives gochat chat.
	var o, e bytes.Buffer
	if code := Main([]string{"chat", "--model", filepath.Join(out, "actor"), "--max-new-tokens", "4"},
		strings.NewReader("Hello there\nclear\nWhat is 2+2?\nquit\n"), &o, &e); code != 0 {
		t.Fatalf("chat: %s", e.String())
	}
	if n := strings.Count(o.String(), "\n"); n != 2 {
		t.Errorf("chat: %d answer lines, want 2:\n%q", n, o.String())
	}

	// data inspect shows the ids of the rendered text, without BOS.
	iout, errOut, code := run(t, "data", "inspect", sample(), "--tokenizer", mdir, "--chat-template", file, "--examples", "1", "--data-split", "1,0,0")
	if code != 0 {
		t.Fatalf("data inspect: %s", errOut)
	}
	tok, err := tokenizer.Load(mdir)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := data.ReadSamples(sample(), mustAdapter(t))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rows {
		text := "### user:\n" + strings.TrimPrefix(strings.TrimPrefix(r.Prompt, "\n\nHuman: "), " ")
		text = strings.TrimSuffix(text, "\n\nAssistant:") + "\n### assistant:\n" + strings.TrimPrefix(r.Chosen, " ") + "</s>\n"
		ids := tok.Encode(text, false)
		if strings.Contains(iout, idList(ids)) && ids[0] != 2 {
			found = true
		}
	}
	if !found || !strings.Contains(iout, "not rendered") {
		t.Errorf("data inspect does not show a rendered example's ids:\n%s", iout)
	}
}

func mustAdapter(t *testing.T) *data.Adapter {
	a, ok := data.Lookup("Dahoas/rm-static")
	if !ok {
		t.Fatal("no rm-static adapter")
	}
	return a
}
