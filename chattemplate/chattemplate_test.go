package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sharedData is the shared data directory beside the checkout (../shared).
var sharedData = filepath.Join("..", "..", "shared", "data")

// needShared skips the test when path (under ../shared) is absent, or fails it
// when the environment variable CI is set: CI checks out ../shared beside the
// repository, so there a missing file is a broken checkout.
func needShared(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("shared test data not found at %s, and CI is set (CI checks out ../shared beside the repository): %v", path, err)
		}
		t.Skipf("shared test data not found at %s (the shared data directory beside the checkout): %v", path, err)
	}
}

// goldenNow is the clock scripts/chat_template_golden.py fixes strftime_now to.
var goldenNow = func() time.Time { return time.Date(2024, 7, 6, 9, 5, 3, 0, time.Local) }

type goldenFile struct {
	Templates []struct {
		Name   string `json:"name"`
		Where  string `json:"where"`
		Dir    string `json:"dir"`
		SHA256 string `json:"sha256"`
	} `json:"templates"`
	Cases []struct {
		Template            string                     `json:"template"`
		Name                string                     `json:"name"`
		Messages            json.RawMessage            `json:"messages"`
		AddGenerationPrompt bool                       `json:"add_generation_prompt"`
		Tools               json.RawMessage            `json:"tools"`
		Vars                map[string]json.RawMessage `json:"vars"`
		Text                *string                    `json:"text"`
		Error               string                     `json:"error"`
		ErrorType           string                     `json:"error_type"`
	} `json:"cases"`
}

func modelDir(where, dir string) string {
	if where == "shared" {
		return filepath.Join(sharedData, dir)
	}
	return filepath.Join("testdata", "models", dir)
}

// TestGolden renders every conversation of testdata/golden.json with every
// real template (TinyLlama, Qwen2.5, Qwen3 from ../shared/data; SmolLM2,
// Mistral-Instruct v0.1/v0.2 and two written for the tests from
// testdata/models) and compares byte for byte with Python's jinja2 set up as
// transformers sets it up; where jinja2 raised, the same error is expected.
func TestGolden(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	for _, tm := range g.Templates {
		t.Run(tm.Name, func(t *testing.T) {
			dir := modelDir(tm.Where, tm.Dir)
			if tm.Where == "shared" {
				needShared(t, dir)
			}
			tpl, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if d := tpl.Digest(); d != tm.SHA256 {
				t.Fatalf("%s: template digest %s, the golden file was made from %s: rerun scripts/chat_template_golden.py", dir, d, tm.SHA256)
			}
			n := 0
			for _, c := range g.Cases {
				if c.Template != tm.Name {
					continue
				}
				n++
				opts := Options{AddGenerationPrompt: c.AddGenerationPrompt, Tools: c.Tools, Now: goldenNow}
				if len(c.Vars) > 0 {
					opts.Vars = map[string]any{}
					for k, v := range c.Vars {
						opts.Vars[k] = v
					}
				}
				got, err := tpl.RenderJSON(c.Messages, opts)
				switch {
				case c.Text != nil && err != nil:
					t.Errorf("%s: %v\nwant %q", c.Name, err, *c.Text)
				case c.Text != nil && got != *c.Text:
					t.Errorf("%s:\n got %q\nwant %q", c.Name, got, *c.Text)
				case c.Text == nil && err == nil:
					t.Errorf("%s: rendered %q, want %s %q", c.Name, got, c.ErrorType, c.Error)
				case c.ErrorType == "TemplateError":
					var te *TemplateError
					if !errors.As(err, &te) || te.Msg != c.Error {
						t.Errorf("%s: error %v, want the template to raise %q", c.Name, err, c.Error)
					}
				case c.ErrorType == "UndefinedError":
					var ue *UndefinedError
					if !errors.As(err, &ue) || ue.Msg != c.Error {
						t.Errorf("%s: error %v, want UndefinedError %q", c.Name, err, c.Error)
					}
				}
			}
			if n < 20 {
				t.Errorf("only %d golden cases for %s", n, tm.Name)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tmp := t.TempDir()
	write := func(dir, name, text string) string {
		d := filepath.Join(tmp, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		name, dir  string
		noTemplate bool
		wantIn     []string
	}{
		{"missing directory", filepath.Join(tmp, "nope"), false, []string{"tokenizer_config.json", "no such file"}},
		{"bad JSON", write("bad", "tokenizer_config.json", `{"chat_template": `), false, []string{"bad", "tokenizer_config.json"}},
		{"no template", write("none", "tokenizer_config.json", `{"bos_token": "<s>", "model_max_length": 1000000000000000019884624838656}`), true, []string{"none"}},
		{"null template", write("null", "tokenizer_config.json", `{"chat_template": null}`), true, nil},
		{"template of a wrong type", write("num", "tokenizer_config.json", `{"chat_template": 3}`), false, []string{"neither a string nor a list"}},
		{"unparsable template", write("syntax", "tokenizer_config.json", `{"chat_template": "{% for m in messages %}{{ m.content }}"}`), false, []string{"tokenizer_config.json", `template "default"`, "endfor"}},
		{"unparsable jinja file", write("jsyntax", "chat_template.jinja", `{{ 1 + }}`), false, []string{"chat_template.jinja"}},
		{"unknown filter", write("filter", "tokenizer_config.json", `{"chat_template": "{{ x | frobnicate }}"}`), false, []string{"No filter named 'frobnicate'"}},
		{"bad special token", write("tok", "tokenizer_config.json", `{"chat_template": "x", "bos_token": 3}`), false, []string{"bos_token"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.dir)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if errors.Is(err, ErrNoTemplate) != c.noTemplate {
				t.Errorf("errors.Is(err, ErrNoTemplate) = %v, want %v (err: %v)", !c.noTemplate, c.noTemplate, err)
			}
			for _, w := range c.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadNoTemplateShared(t *testing.T) {
	dir := filepath.Join(sharedData, "mistral-v0.1-tokenizer")
	needShared(t, dir)
	if _, err := Load(dir); !errors.Is(err, ErrNoTemplate) {
		t.Fatalf("Load(%s) = %v, want ErrNoTemplate (the base model has no chat template)", dir, err)
	}
}

func TestLoadSources(t *testing.T) {
	l3, err := Load(filepath.Join("testdata", "models", "llama3-style"))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(l3.Path()) != "chat_template.jinja" {
		t.Errorf("llama3-style: template from %s, want chat_template.jinja over tokenizer_config.json", l3.Path())
	}
	if s, _ := l3.SpecialToken("bos_token"); s != "<|begin_of_text|>" {
		t.Errorf("bos_token %q", s)
	}
	named, err := Load(filepath.Join("testdata", "models", "named-templates"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(named.Names(), ","); got != "default,tool_use" {
		t.Errorf("names %s", got)
	}
	msgs := []Message{{"user", "hi"}}
	def, err := named.Render(msgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tool, err := named.Render(msgs, Options{Name: "tool_use", Tools: json.RawMessage(`[{"name": "f"}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "<|user|>") || !strings.Contains(tool, "[TOOLS] f") {
		t.Errorf("default %q, tool_use %q", def, tool)
	}
	if _, err := named.Render(msgs, Options{Name: "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown template name: %v", err)
	}
	// AddedToken objects count as their content (mistral-instruct-v0.2's bos_token).
	m2, err := Load(filepath.Join("testdata", "models", "mistral-instruct-v0.2"))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := m2.SpecialToken("bos_token"); s != "<s>" {
		t.Errorf("AddedToken bos_token %q", s)
	}
}

func TestRenderOptions(t *testing.T) {
	tpl, err := New("{{ bos_token }}|{{ enable_thinking }}|{{ x.b }}{{ x.a }}|{{ tools }}|{{ messages[0].role }}:{{ messages[0].content }}|{{ add_generation_prompt }}", map[string]string{"bos_token": "<s>"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render([]Message{{"user", "é"}}, Options{AddGenerationPrompt: true,
		Vars: map[string]any{"enable_thinking": false, "x": json.RawMessage(`{"b": 1, "a": [2]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<s>|False|1[2]|None|user:é|True"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := tpl.Render(nil, Options{Vars: map[string]any{"messages": 1}}); err == nil {
		t.Error("Vars may not set messages")
	}
	raise, err := New("{{ raise_exception('no ' ~ messages|length) }}", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = raise.Render(nil, Options{})
	var te *TemplateError
	if !errors.As(err, &te) || te.Msg != "no 0" {
		t.Errorf("raise_exception: %v", err)
	}
}

// TestAssistantSpans finds each assistant message's text in real templates'
// renderings by rendering prefixes, and checks it is the message's content
// followed by the template's end-of-turn text.
func TestAssistantSpans(t *testing.T) {
	conv := []Message{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}, {"assistant", "4"}}
	noSystem := conv[1:]
	for _, c := range []struct {
		where, dir string
		msgs       []Message
		end        string // what follows the content inside the span
	}{
		{"shared", "tinyllama-tokenizer", conv, "</s>\n"},
		{"shared", "qwen2.5-tokenizer", conv, "<|im_end|>\n"},
		{"testdata", "smollm2-instruct", conv, "<|im_end|>\n"},
		{"testdata", "mistral-instruct-v0.1", noSystem, "</s> "},
		{"testdata", "mistral-instruct-v0.2", conv, "</s>"},
		{"testdata", "llama3-style", conv, "<|eot_id|>"},
		{"shared", "qwen3-tokenizer", conv[:3], "<|im_end|>\n"},
	} {
		t.Run(c.dir, func(t *testing.T) {
			dir := modelDir(c.where, c.dir)
			if c.where == "shared" {
				needShared(t, dir)
			}
			tpl, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Now: goldenNow}
			text, spans, err := tpl.AssistantSpans(c.msgs, opts)
			if err != nil {
				t.Fatal(err)
			}
			full, err := tpl.Render(c.msgs, opts)
			if err != nil || full != text {
				t.Fatalf("text %q differs from Render %q (%v)", text, full, err)
			}
			var want []int
			for i, m := range c.msgs {
				if m.Role == "assistant" {
					want = append(want, i)
				}
			}
			if len(spans) != len(want) {
				t.Fatalf("%d spans, want %d", len(spans), len(want))
			}
			for k, s := range spans {
				m := c.msgs[want[k]]
				got := text[s.Start:s.End]
				if s.Message != want[k] || !strings.HasSuffix(got, m.Content+c.end) {
					t.Errorf("span %d (message %d) = %q, want message %d ending %q", k, s.Message, got, want[k], m.Content+c.end)
				}
				if k > 0 && s.Start < spans[k-1].End {
					t.Errorf("span %d overlaps the one before", k)
				}
			}
		})
	}
	// Qwen3 renders an assistant turn with an empty <think></think> block only
	// when it is last: its multi-turn spans cannot come from prefixes.
	dir := filepath.Join(sharedData, "qwen3-tokenizer")
	needShared(t, dir)
	q3, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = q3.AssistantSpans(conv, Options{})
	var se *SpanError
	if !errors.As(err, &se) || se.Message != 2 {
		t.Errorf("qwen3 multi-turn: %v, want a SpanError for message 2", err)
	}
}

func TestAssistantSpansGeneration(t *testing.T) {
	tpl, err := New("{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}</s>{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{"user", "a"}, {"assistant", "bb"}, {"user", "c"}, {"assistant", "dd"}}
	text, spans, err := tpl.AssistantSpans(msgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bb</s>", "dd</s>"}
	if len(spans) != 2 {
		t.Fatalf("spans %v", spans)
	}
	for k, s := range spans {
		if text[s.Start:s.End] != want[k] || s.Message != 2*k+1 {
			t.Errorf("span %d: message %d %q, want message %d %q", k, s.Message, text[s.Start:s.End], 2*k+1, want[k])
		}
	}
}
