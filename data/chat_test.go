package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/chattemplate"
	"github.com/gochat-ai/gochat/tokenizer"
)

func msgs(pairs ...string) []chattemplate.Message {
	var out []chattemplate.Message
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, chattemplate.Message{Role: pairs[i], Content: pairs[i+1]})
	}
	return out
}

func TestConversation(t *testing.T) {
	for _, c := range []struct {
		prompt string
		want   []chattemplate.Message
		err    string
	}{
		{"\n\nHuman: q\n\nAssistant:", msgs("user", "q"), ""},
		{"\n\nHuman: q1\n\nAssistant: a1\n\nHuman: q2\n\nAssistant:", msgs("user", "q1", "assistant", "a1", "user", "q2"), ""},
		// only the one space after a marker goes; other whitespace stays
		{"\n\nHuman:  two spaces \n\nAssistant:a\n\nHuman:\n\nAssistant:", msgs("user", " two spaces ", "assistant", "a", "user", ""), ""},
		// a newline inside a turn is not a marker
		{"\n\nHuman: line 1\nHuman: line 2\n\nAssistant:", msgs("user", "line 1\nHuman: line 2"), ""},
		{"\n\nHuman: a\n\n\nAssistant:", msgs("user", "a\n"), ""},
		{" Human: Why is the sky blue? Assistant:", msgs("user", "Why is the sky blue?"), ""},
		{" Human:  Assistant:", msgs("user", ""), ""},
		{" plain text prompt", msgs("user", "plain text prompt"), ""},
		{"plain", msgs("user", "plain"), ""},
		{"", msgs("user", ""), ""},
		{"\n\nHuman: one\n\nHuman: two\n\nAssistant:", nil, "two Human turns in a row"},
		{"\n\nHuman: one\n\nAssistant: a\n\nAssistant:", nil, "two Assistant turns in a row"},
		{"\n\nHuman: one\n\nAssistant: a", nil, `does not end with "\n\nAssistant:"`},
		{"Hi\n\nHuman: one\n\nAssistant:", nil, `does not start with "\n\nHuman:"`},
		{"\n\nAssistant: hi\n\nAssistant:", nil, `does not start`},
		{" Human: no end", nil, `" Human:"`},
		{"text Assistant:", nil, `" Assistant:"`},
	} {
		got, err := Conversation(c.prompt)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Conversation(%q) = %v, %v; want an error with %q", c.prompt, got, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Conversation(%q) = %q, %v; want %q", c.prompt, got, err, c.want)
		}
	}
	if a := Answer(" Paris."); a != "Paris." {
		t.Errorf("Answer = %q", a)
	}
	if a := Answer("  x"); a != " x" {
		t.Errorf("Answer = %q", a)
	}
}

// FuzzConversation: no panics; a parsed conversation alternates user and
// assistant turns, starts and ends with the user, and every content is a
// piece of the prompt.
func FuzzConversation(f *testing.F) {
	for _, s := range []string{"\n\nHuman: q\n\nAssistant:", "\n\nHuman: q1\n\nAssistant: a1\n\nHuman: q2\n\nAssistant:",
		" Human: q Assistant:", " Human: Assistant:", "x", "\n\nHuman:\n\nAssistant:\n\nHuman:\n\nAssistant:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prompt string) {
		m, err := Conversation(prompt)
		if err != nil {
			return
		}
		if len(m) == 0 || len(m)%2 == 0 {
			t.Fatalf("%q: %d messages", prompt, len(m))
		}
		for i, x := range m {
			if want := []string{"user", "assistant"}[i%2]; x.Role != want {
				t.Fatalf("%q: message %d is %s", prompt, i, x.Role)
			}
			if !strings.Contains(prompt, x.Content) {
				t.Fatalf("%q: content %q is not in the prompt", prompt, x.Content)
			}
		}
	})
}

// sharedDir returns a directory of ../shared/data, skipping the test when
// it is absent (failing when CI is set, as sampleFile does).
func sharedDir(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "shared", "data", name)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("shared test data absent under CI, which checks out ../shared beside the repository: %v", err)
		}
		t.Skipf("shared test data absent (%v); CI checks out ../shared beside the repository", err)
	}
	return p
}

// hfTok is a real tokenizer as the CLI adapts it: Encode with the
// tokenizer's special tokens, EncodePlain without.
type hfTok struct{ t *tokenizer.Tokenizer }

func (h hfTok) Encode(s string) []int32 { return h.t.Encode(s, true) }
func (h hfTok) EncodePlain(s []string) [][]int32 {
	out := make([][]int32, len(s))
	for i, x := range s {
		out[i] = h.t.Encode(x, false)
	}
	return out
}

// loadChatModel loads a tokenizer and its chat template from ../shared/data.
// Qwen2.5's folder has only its tokenizer_config.json; its vocabulary and
// merges are Qwen3's (SOURCES.md), so it is paired with Qwen3's
// tokenizer.json.
func loadChatModel(t *testing.T, name string) (*tokenizer.Tokenizer, *ChatFormat) {
	t.Helper()
	dir := sharedDir(t, name)
	if name == "qwen2.5-tokenizer" {
		qwen3 := sharedDir(t, "qwen3-tokenizer")
		tmp := t.TempDir()
		for src, dst := range map[string]string{filepath.Join(qwen3, "tokenizer.json"): "tokenizer.json", filepath.Join(dir, "tokenizer_config.json"): "tokenizer_config.json"} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, dst), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dir = tmp
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chattemplate.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := NewChatFormat(tm)
	if err != nil {
		t.Fatal(err)
	}
	return tok, cf
}

type goldenSFT struct {
	Text     string   `json:"text"`
	Spans    [][2]int `json:"spans"`
	LastOnly bool     `json:"last_only"`
}

type goldenRow struct {
	Error    bool                   `json:"error"`
	Messages []chattemplate.Message `json:"messages"`
	SFT      goldenSFT              `json:"sft"`
	Chosen   string                 `json:"chosen"`
	Rejected string                 `json:"rejected"`
	Prompt   string                 `json:"prompt"`
}

type goldenModel struct {
	Dir    string                 `json:"dir"`
	SHA256 string                 `json:"sha256"`
	Rows   map[string][]goldenRow `json:"rows"`
}

func readChatGolden(t *testing.T) []goldenModel {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "chat_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Models []goldenModel `json:"models"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g.Models
}

// TestChatFormatProbe: the lead and end of turn found by rendering a
// one-question exchange.
func TestChatFormatProbe(t *testing.T) {
	for _, c := range []struct{ dir, lead, end string }{
		{"tinyllama-tokenizer", "", "</s>\n"},
		{"qwen3-tokenizer", "<think>\n\n</think>\n\n", "<|im_end|>\n"},
		{"qwen2.5-tokenizer", "", "<|im_end|>\n"},
	} {
		_, cf := loadChatModel(t, c.dir)
		if cf.Lead != c.lead || cf.End != c.end {
			t.Errorf("%s: lead %q end %q, want %q %q", c.dir, cf.Lead, cf.End, c.lead, c.end)
		}
	}
	if _, err := NewChatFormat(mustTemplate(t, "{{ messages[0]['content'] }}")); err == nil || !strings.Contains(err.Error(), "does not write the assistant") {
		t.Errorf("a template without the answer: %v", err)
	}
	if _, err := NewChatFormat(mustTemplate(t, "{{ raise_exception('no') }}")); err == nil || !strings.Contains(err.Error(), "no") {
		t.Errorf("a raising template: %v", err)
	}
}

func mustTemplate(t *testing.T, src string) *chattemplate.Template {
	t.Helper()
	tm, err := chattemplate.New(src, map[string]string{"bos_token": "<s>", "eos_token": "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestChatGolden builds steps 1-3 of ../shared's rm-static sample and of
// testdata/chat_rows.jsonl (multi-turn and malformed prompts) with the
// real TinyLlama, Qwen3 and Qwen2.5 templates and tokenizers, against
// scripts/chat_data_golden.py's renderings (Python jinja2): the ids are
// the tokens of the Python-rendered text without added special tokens,
// the step-1 loss covers exactly the tokens of the assistant messages,
// step-3 prompts end with the generation prompt, and malformed rows are
// dropped and counted.
func TestChatGolden(t *testing.T) {
	genPrompt := map[string]string{"tinyllama-tokenizer": "<|assistant|>\n", "qwen3-tokenizer": "<|im_start|>assistant\n", "qwen2.5-tokenizer": "<|im_start|>assistant\n"}
	files := map[string]string{"sample.jsonl": sampleFile(t, "sample.jsonl"), "chat_rows.jsonl": filepath.Join("testdata", "chat_rows.jsonl")}
	for _, gm := range readChatGolden(t) {
		tok, cf := loadChatModel(t, gm.Dir)
		if cf.Digest() != gm.SHA256 {
			t.Fatalf("%s: template digest %s, golden %s: regenerate with scripts/chat_data_golden.py", gm.Dir, cf.Digest(), gm.SHA256)
		}
		ht := hfTok{tok}
		bos, _ := tok.BOS()
		for fname, path := range files {
			golden := gm.Rows[fname]
			errRows := 0
			for _, g := range golden {
				if g.Error {
					errRows++
				}
			}
			ds := fileDataset(rmStatic(t), []string{path})
			name := gm.Dir + "/" + fname
			build := func(p Phase, split Split) *Set {
				t.Helper()
				set, err := Build(ds, Train, p, Options{Split: split, Seed: 1234, MaxSeqLen: 4096, MaxPromptLen: 4096,
					Tokenizer: ht, Chat: cf, EOS: 2})
				if err != nil {
					t.Fatalf("%s phase %d: %v", name, p, err)
				}
				st := set.Stats[0]
				if st.Unrendered != int64(errRows) || len(st.RenderErrors) != min(errRows, maxErrors) || st.Kept+st.Unrendered != st.Selected {
					t.Errorf("%s phase %d: stats %+v, want %d unrendered", name, p, st, errRows)
				}
				return set
			}

			sft := build(PhaseSFT, Split{1, 0, 0})
			lastOnly := 0
			for _, ex := range sft.Examples {
				g := golden[ex.Row]
				want := tok.Encode(g.SFT.Text, false)
				if !slices.Equal(ex.IDs, want) {
					t.Fatalf("%s row %d: step-1 ids\n%v\nwant the golden text's\n%v", name, ex.Row, ex.IDs, want)
				}
				if len(ex.IDs) > 0 && ex.IDs[0] == bos && !strings.HasPrefix(g.SFT.Text, "<s>") {
					t.Errorf("%s row %d: a BOS the template did not write", name, ex.Row)
				}
				// Each golden byte span maps exactly onto tokens: the tokens of
				// the text before each bound are a prefix of the ids.
				var wantSpans []int32
				for _, sp := range g.SFT.Spans {
					for _, b := range sp {
						pre := tok.Encode(g.SFT.Text[:b], false)
						if !slices.Equal(pre, ex.IDs[:min(len(pre), len(ex.IDs))]) {
							t.Fatalf("%s row %d: a token crosses byte %d", name, ex.Row, b)
						}
						wantSpans = append(wantSpans, int32(len(pre)))
					}
					// Byte-level BPE decodes to the span's text exactly.
					if strings.HasPrefix(gm.Dir, "qwen") {
						s, e := wantSpans[len(wantSpans)-2], wantSpans[len(wantSpans)-1]
						if txt, _ := tok.Decode(ex.IDs[s:e], false); txt != g.SFT.Text[sp[0]:sp[1]] {
							t.Errorf("%s row %d: span tokens decode to %q, want %q", name, ex.Row, txt, g.SFT.Text[sp[0]:sp[1]])
						}
					}
				}
				if !slices.Equal(ex.Spans, wantSpans) {
					t.Errorf("%s row %d: spans %v, want %v", name, ex.Row, ex.Spans, wantSpans)
				}
				if g.SFT.LastOnly {
					lastOnly++
				}
				// The collator's labels: ids inside the spans, ignored elsewhere.
				b, err := Collator{T: len(ex.IDs), PAD: 0, ResponseOnly: true}.SFT([]Example{ex})
				if err != nil {
					t.Fatal(err)
				}
				targets := 0
				for i, l := range b.Labels {
					in := false
					for k := 0; k+1 < len(wantSpans); k += 2 {
						in = in || (int32(i) >= wantSpans[k] && int32(i) < wantSpans[k+1])
					}
					if in != (l != IgnoreIndex) || (in && l != ex.IDs[i]) {
						t.Fatalf("%s row %d: label %d at %d (in a span: %v)", name, ex.Row, l, i, in)
					}
					if in && i > 0 {
						targets++
					}
				}
				if n := (Collator{T: len(ex.IDs), ResponseOnly: true}).SFTTargets(ex); n != targets {
					t.Errorf("%s row %d: SFTTargets %d, want %d", name, ex.Row, n, targets)
				}
			}
			if got := sft.Stats[0].LastTurnOnly; got != int64(lastOnly) {
				t.Errorf("%s: LastTurnOnly %d, want %d", name, got, lastOnly)
			}

			rw := build(PhaseReward, Split{0, 1, 0})
			for _, ex := range rw.Examples {
				g := golden[ex.Row]
				if !slices.Equal(ex.IDs, tok.Encode(g.Chosen, false)) || !slices.Equal(ex.Rejected, tok.Encode(g.Rejected, false)) {
					t.Fatalf("%s row %d: step-2 sequences differ from the golden texts'", name, ex.Row)
				}
			}

			pp := build(PhasePPO, Split{0, 0, 1})
			gp := tok.Encode(genPrompt[gm.Dir], false)
			for _, ex := range pp.Examples {
				g := golden[ex.Row]
				if !slices.Equal(ex.IDs, tok.Encode(g.Prompt, false)) {
					t.Fatalf("%s row %d: step-3 prompt differs from the golden text's", name, ex.Row)
				}
				if !strings.HasSuffix(g.Prompt, genPrompt[gm.Dir]) || (strings.HasPrefix(gm.Dir, "qwen") && !slices.Equal(ex.IDs[len(ex.IDs)-len(gp):], gp)) {
					t.Errorf("%s row %d: the prompt does not end with the generation prompt", name, ex.Row)
				}
				if !reflect.DeepEqual(ex.Messages, g.Messages) {
					t.Errorf("%s row %d: messages %q, want %q", name, ex.Row, ex.Messages, g.Messages)
				}
			}
			if len(sft.Examples)+errRows != len(golden) || len(pp.Examples)+errRows != len(golden) {
				t.Errorf("%s: %d step-1 and %d step-3 examples of %d rows (%d malformed)", name, len(sft.Examples), len(pp.Examples), len(golden), errRows)
			}
		}
	}
}

// TestChatTemplateBOS: a template that writes bos_token gets exactly that
// one BOS (the rendered text is tokenized without the tokenizer's own, as
// apply_chat_template(tokenize=True) does); AddEOS appends EOS inside the
// last span; truncation clips the spans.
func TestChatTemplateBOS(t *testing.T) {
	tok, _ := loadChatModel(t, "tinyllama-tokenizer")
	bos, _ := tok.BOS()
	eos, _ := tok.EOS()
	src := "{{ bos_token }}{% for m in messages %}{{ '[' + m['role'] + '] ' + m['content'] }}{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '[assistant]' }}{% endif %}"
	tm, err := chattemplate.New(src, map[string]string{"bos_token": "<s>", "eos_token": "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := NewChatFormat(tm)
	if err != nil {
		t.Fatal(err)
	}
	if cf.Lead != " " || cf.End != "</s>\n" {
		t.Errorf("lead %q end %q", cf.Lead, cf.End)
	}
	s := Sample{Prompt: "\n\nHuman: Hi\n\nAssistant: Hello.\n\nHuman: Bye\n\nAssistant:", Chosen: " See you."}
	o := Options{MaxSeqLen: 512, Tokenizer: hfTok{tok}, Chat: cf, EOS: eos}
	ex, _, err := NewExample(s, PhaseSFT, o)
	if err != nil {
		t.Fatal(err)
	}
	text := "<s>[user] Hi\n[assistant] Hello.</s>\n[user] Bye\n[assistant] See you.</s>\n"
	if want := tok.Encode(text, false); !slices.Equal(ex.IDs, want) {
		t.Fatalf("ids %v, want %v", ex.IDs, want)
	}
	if n := countID(ex.IDs, bos); ex.IDs[0] != bos || n != 1 {
		t.Errorf("BOS at the start %v, %d BOS in all", ex.IDs[0] == bos, n)
	}
	if len(ex.Spans) != 4 || ex.PromptLen != int(ex.Spans[0]) {
		t.Fatalf("spans %v prompt len %d", ex.Spans, ex.PromptLen)
	}
	o.AddEOS = true
	ex2, _, _ := NewExample(s, PhaseSFT, o)
	if !slices.Equal(ex2.IDs, append(slices.Clone(ex.IDs), eos)) || ex2.Spans[3] != int32(len(ex2.IDs)) {
		t.Errorf("AddEOS: ids %v spans %v", ex2.IDs, ex2.Spans)
	}
	o.AddEOS, o.MaxSeqLen = false, int(ex.Spans[2])+1
	ex3, _, _ := NewExample(s, PhaseSFT, o)
	if !slices.Equal(ex3.Spans, []int32{ex.Spans[0], ex.Spans[1], ex.Spans[2], ex.Spans[2] + 1}) {
		t.Errorf("truncated: spans %v, from %v", ex3.Spans, ex.Spans)
	}
	o.MaxSeqLen = int(ex.Spans[0])
	ex4, _, _ := NewExample(s, PhaseSFT, o)
	if ex4.Spans == nil || len(ex4.Spans) != 0 || (Collator{T: 512, ResponseOnly: true}).SFTTargets(ex4) != 0 {
		t.Errorf("truncated before the first span: spans %v", ex4.Spans)
	}
	// A prompt that is no conversation is an error naming why.
	if _, _, err := NewExample(Sample{Prompt: "\n\nHuman: a\n\nHuman: b\n\nAssistant:"}, PhasePPO, Options{MaxPromptLen: 9, Tokenizer: hfTok{tok}, Chat: cf}); err == nil || !strings.Contains(err.Error(), "two Human turns") {
		t.Errorf("malformed prompt: %v", err)
	}
	// A tokenizer that cannot encode without special tokens is refused.
	if _, _, err := NewExample(s, PhaseSFT, Options{MaxSeqLen: 9, Tokenizer: &byteTok{}, Chat: cf}); err == nil || !strings.Contains(err.Error(), "PlainEncoder") {
		t.Errorf("byteTok with a template: %v", err)
	}
}

func countID(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestChatCache: templated sets round-trip through the cache (spans and
// messages included), their key names the template digest, and the key
// of a set without a template has no such line (keys of DeepSpeed-Chat
// text sets are unchanged).
func TestChatCache(t *testing.T) {
	tok, cf := loadChatModel(t, "qwen3-tokenizer")
	path := filepath.Join("testdata", "chat_rows.jsonl")
	ds := fileDataset(rmStatic(t), []string{path})
	dir := t.TempDir()
	for _, p := range []Phase{PhaseSFT, PhaseReward, PhasePPO} {
		o := Options{Split: Split{1, 1, 1}, Seed: 1, MaxSeqLen: 4096, MaxPromptLen: 4096, Tokenizer: hfTok{tok}, Chat: cf,
			TokenizerID: "qwen3", CacheDir: dir, SkipMalformed: true}
		a, err := Build(ds, Train, p, o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Build(ds, Train, p, o)
		if err != nil {
			t.Fatal(err)
		}
		if !b.Stats[0].Cached || a.Stats[0].Cached {
			t.Fatalf("phase %d: cached %v then %v", p, a.Stats[0].Cached, b.Stats[0].Cached)
		}
		b.Stats[0].Cached = false
		if !reflect.DeepEqual(a, b) {
			t.Errorf("phase %d: the cache gives\n%+v\nbuilt\n%+v", p, b, a)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.arrow"))
		key, err := cacheKey(ds, Train, p, []string{path}, &o)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(key, "chat_template "+cf.Digest()+"\n") {
			t.Errorf("key lacks the template digest:\n%s", key)
		}
		o.Chat = nil
		plain, _ := cacheKey(ds, Train, p, []string{path}, &o)
		if strings.Contains(plain, "chat_template") || plain == key {
			t.Errorf("key without a template:\n%s", plain)
		}
		if len(files) != int(p) {
			t.Errorf("%d cache files after phase %d", len(files), p)
		}
	}
}
