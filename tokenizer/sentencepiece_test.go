package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A tiny SentencePiece-style BPE tokenizer for tests that must not depend
// on the shared data: <unk> <s> </s>, the 256 <0xXX> byte tokens, then the
// characters of spChars and the tokens of spMerges.
const spChars = "▁helowrd"

var spMerges = [][2]string{{"h", "e"}, {"l", "l"}, {"▁", "he"}, {"ll", "o"}, {"▁he", "llo"}, {"▁", "w"}, {"o", "r"}}

func spVocab() map[string]int32 {
	v := map[string]int32{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		v[fmt.Sprintf("<0x%02X>", b)] = int32(3 + b)
	}
	for _, r := range spChars {
		v[string(r)] = int32(len(v))
	}
	for _, m := range spMerges {
		v[m[0]+m[1]] = int32(len(v))
	}
	return v
}

// spStyle is how a file marks spaces: TinyLlama's normalizer or Mistral's
// Metaspace pre-tokenizer.
type spStyle int

const (
	tinyLlamaStyle spStyle = iota
	mistralStyle
)

// writeSP writes the tiny SentencePiece tokenizer in the given style; edit
// may change tokenizer.json's object, config is tokenizer_config.json.
func writeSP(t testing.TB, style spStyle, config string, edit func(m map[string]any)) string {
	t.Helper()
	data := spTokenizerJSON(t, style, edit)
	dir := t.TempDir()
	files := map[string]string{fileTokenizerJSON: string(data), fileConfig: config}
	for name, content := range files {
		if content == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// spTokenizerJSON returns the tiny SentencePiece tokenizer's tokenizer.json.
func spTokenizerJSON(t testing.TB, style spStyle, edit func(m map[string]any)) []byte {
	t.Helper()
	var merges []string
	for _, m := range spMerges {
		merges = append(merges, m[0]+" "+m[1])
	}
	special := func(id int, content string) map[string]any {
		return map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
	}
	m := map[string]any{
		"version":      "1.0",
		"added_tokens": []any{special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{1}, "tokens": []string{"<s>"}}}},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0}}},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true, "vocab": spVocab(), "merges": merges},
	}
	switch style {
	case tinyLlamaStyle:
		m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}}
		m["pre_tokenizer"] = nil
	case mistralStyle:
		m["normalizer"] = nil
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}
	}
	if edit != nil {
		edit(m)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

const spConfig = `{"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": null}`

// ids maps tokens of the tiny SentencePiece vocabulary to their ids.
func ids(toks ...string) []int32 {
	v := spVocab()
	out := make([]int32, len(toks))
	for i, t := range toks {
		id, ok := v[t]
		if !ok {
			panic("no token " + t)
		}
		out[i] = id
	}
	return out
}

// TestSentencePiece checks the two ways files mark spaces, byte fallback,
// added tokens between pieces and the decoder chain on the tiny tokenizer.
func TestSentencePiece(t *testing.T) {
	cases := []struct {
		style spStyle
		in    string
		want  []int32 // with addSpecial
		dec   string  // Decode(want, false)
	}{
		{tinyLlamaStyle, "hello world", ids("<s>", "▁hello", "▁w", "or", "l", "d"), "<s> hello world"},
		{mistralStyle, "hello world", ids("<s>", "▁hello", "▁w", "or", "l", "d"), "<s> hello world"},
		{tinyLlamaStyle, " hello", ids("<s>", "▁", "▁hello"), "<s>  hello"},
		{mistralStyle, " hello", ids("<s>", "▁hello"), "<s> hello"},
		// After an added token TinyLlama's normalizer prepends again,
		// Mistral's Metaspace ("first") does not.
		{tinyLlamaStyle, "hello</s>hello", ids("<s>", "▁hello", "</s>", "▁hello"), "<s> hello</s> hello"},
		{mistralStyle, "hello</s>hello", ids("<s>", "▁hello", "</s>", "he", "llo"), "<s> hello</s>hello"},
		{mistralStyle, "<s>hello", ids("<s>", "<s>", "he", "llo"), "<s><s>hello"},
		// Byte fallback: "z" and "é" are not in the vocabulary.
		{mistralStyle, "zé", ids("<s>", "▁", "<0x7A>", "<0xC3>", "<0xA9>"), "<s> zé"},
		{tinyLlamaStyle, "\n", ids("<s>", "▁", "<0x0A>"), "<s> \n"},
		{tinyLlamaStyle, "hello", ids("<s>", "▁hello"), "<s> hello"},
	}
	for _, c := range cases {
		tk := mustLoad(t, Load, writeSP(t, c.style, spConfig, nil))
		got := tk.Encode(c.in, true)
		if !slices.Equal(got, c.want) {
			t.Errorf("style %d: Encode(%q) = %v, want %v", c.style, c.in, got, c.want)
			continue
		}
		if dec, err := tk.Decode(got, false); dec != c.dec || err != nil {
			t.Errorf("style %d: Decode(%v) = %q, %v; want %q", c.style, got, dec, err, c.dec)
		}
	}
}

// TestSentencePieceUnknown checks characters without a token when there is
// no byte fallback: <unk>, consecutive ones fused with fuse_unk.
func TestSentencePieceUnknown(t *testing.T) {
	for _, fuse := range []bool{true, false} {
		tk := mustLoad(t, Load, writeSP(t, mistralStyle, spConfig, func(m map[string]any) {
			model := m["model"].(map[string]any)
			model["byte_fallback"], model["fuse_unk"] = false, fuse
		}))
		want := ids("▁", "<unk>", "h", "<unk>", "e")
		if !fuse {
			want = ids("▁", "<unk>", "<unk>", "h", "<unk>", "e")
		}
		if got := tk.Encode("zzhqe", false); !slices.Equal(got, want) {
			t.Errorf("fuse_unk %v: Encode(\"zzhqe\") = %v, want %v", fuse, got, want)
		}
	}
}

// TestMetaspaceSchemes checks prepend_scheme always and never and split.
func TestMetaspaceSchemes(t *testing.T) {
	for _, c := range []struct {
		scheme string
		split  bool
		in     string
		want   []int32
	}{
		{"always", false, "hello</s>hello", ids("▁hello", "</s>", "▁hello")},
		{"never", false, "hello</s>hello", ids("he", "llo", "</s>", "he", "llo")},
		{"first", true, "hello  hello", ids("▁hello", "▁", "▁hello")},
		{"first", false, "hello  hello", ids("▁hello", "▁", "▁hello")},
		{"always", true, "wor", ids("▁w", "or")},
	} {
		tk := mustLoad(t, Load, writeSP(t, mistralStyle, spConfig, func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": c.scheme, "split": c.split}
		}))
		if got := tk.Encode(c.in, false); !slices.Equal(got, c.want) {
			t.Errorf("%s split %v: Encode(%q) = %v, want %v", c.scheme, c.split, c.in, got, c.want)
		}
	}
}

// TestDecoders checks the decoder steps where Hugging Face's Rust code is
// the reference and the JavaScript port differs: an ill-formed byte run
// becomes one U+FFFD per byte, and the Metaspace decoder drops every "▁" of
// the first token.
func TestDecoders(t *testing.T) {
	tk := mustLoad(t, Load, writeSP(t, mistralStyle, spConfig, nil))
	for _, c := range []struct {
		ids  []int32
		want string
	}{
		{ids("<0xE2>", "<0x82>", "▁he"), "\uFFFD\uFFFD he"},
		{ids("<0xE2>", "<0x82>", "<0xAC>", "▁he"), "€ he"},
		{ids("▁", "<0xF0>", "<0x9F>", "<0x99>", "<0x82>", "<0xFF>"), "\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD"},
		{ids("▁", "▁he"), " he"},
	} {
		if got, err := tk.Decode(c.ids, false); got != c.want || err != nil {
			t.Errorf("Decode(%v) = %q, %v; want %q", c.ids, got, err, c.want)
		}
	}
	meta := mustLoad(t, Load, writeSP(t, mistralStyle, spConfig, func(m map[string]any) {
		m["decoder"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}
	}))
	if got, _ := meta.Decode(ids("▁", "▁he", "▁w"), false); got != " he w" {
		t.Errorf("Metaspace decoder: %q, want %q", got, " he w")
	}
	if got, _ := tk.Decode(ids("▁hello", "▁w"), false); got != "hello w" {
		t.Errorf("Decode without BOS: %q, want %q (Strip takes the leading space)", got, "hello w")
	}
	if got, _ := meta.Decode(ids("▁he", "▁", "▁w"), false); got != "he  w" {
		t.Errorf("Metaspace decoder: %q, want %q", got, "he  w")
	}
}

// TestLlamaTemplate checks that the LLaMA tokenizer classes take BOS/EOS
// from add_bos_token and add_eos_token (transformers v4's
// LlamaTokenizerFast.update_post_processor) and that other classes keep the
// file's post-processor.
func TestLlamaTemplate(t *testing.T) {
	for _, c := range []struct {
		config         string
		prefix, suffix []int32
	}{
		{spConfig, []int32{1}, nil},
		{`{"tokenizer_class": "LlamaTokenizerFast", "add_eos_token": true, "bos_token": "<s>", "eos_token": "</s>"}`, []int32{1}, []int32{2}},
		{`{"tokenizer_class": "LlamaTokenizer", "add_bos_token": false, "add_eos_token": true, "bos_token": "<s>", "eos_token": "</s>"}`, nil, []int32{2}},
		{`{"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": false, "add_eos_token": true, "bos_token": "<s>", "eos_token": "</s>"}`, []int32{1}, nil},
		{"", []int32{1}, nil},
	} {
		tk := mustLoad(t, Load, writeSP(t, mistralStyle, c.config, nil))
		if p, s := tk.Template(); !slices.Equal(p, c.prefix) || !slices.Equal(s, c.suffix) {
			t.Errorf("%s: Template() = %v, %v; want %v, %v", c.config, p, s, c.prefix, c.suffix)
		}
	}
}

// TestSpecialTokenAPI checks SpecialToken, EOSIDs (with
// generation_config.json's list) and PadOrEOS.
func TestSpecialTokenAPI(t *testing.T) {
	dir := writeSP(t, mistralStyle, `{"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "h"}`, nil)
	if err := os.WriteFile(filepath.Join(dir, fileGenConfig), []byte(`{"bos_token_id": 1, "eos_token_id": [2, 5, 2]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tk := mustLoad(t, Load, dir)
	for _, c := range []struct {
		name    string
		content string
		id      int32
		ok      bool
	}{{"bos_token", "<s>", 1, true}, {"eos_token", "</s>", 2, true}, {"unk_token", "<unk>", 0, true}, {"pad_token", "", -1, false}, {"mask_token", "h", ids("h")[0], true}, {"sep_token", "", -1, false}, {"nonsense", "", -1, false}} {
		content, id, ok := tk.SpecialToken(c.name)
		if content != c.content || id != c.id || ok != c.ok {
			t.Errorf("SpecialToken(%q) = %q, %d, %v; want %q, %d, %v", c.name, content, id, ok, c.content, c.id, c.ok)
		}
	}
	if got := tk.EOSIDs(); !slices.Equal(got, []int32{2, 5}) {
		t.Errorf("EOSIDs() = %v, want [2 5]", got)
	}
	if id, ok := tk.PadOrEOS(); id != 2 || !ok {
		t.Errorf("PadOrEOS() = %d, %v; want 2 (EOS: no pad token)", id, ok)
	}
	if _, ok := tk.PAD(); ok {
		t.Error("PAD() reports a pad token the files do not name")
	}
	withPad := mustLoad(t, Load, writeSP(t, mistralStyle, `{"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>"}`, nil))
	if id, ok := withPad.PadOrEOS(); id != 0 || !ok {
		t.Errorf("PadOrEOS() = %d, %v; want the pad token 0", id, ok)
	}
}

// TestIgnoreMerges checks that with ignore_merges a pre-token that is in
// the vocabulary is one token, even when the merges would not build it.
func TestIgnoreMerges(t *testing.T) {
	v := tinyVocab()
	v["mmmm"] = int32(len(v))
	for _, ignore := range []bool{false, true} {
		tk, err := LoadTokenizerJSON(writeTiny(t, map[string]string{fileTokenizerJSON: string(tinyTokenizerJSON(t, func(m map[string]any) {
			model := m["model"].(map[string]any)
			model["vocab"], model["ignore_merges"] = v, ignore
		}))}))
		if err != nil {
			t.Fatal(err)
		}
		want := []int32{v["mm"], v["mm"]}
		if ignore {
			want = []int32{v["mmmm"]}
		}
		if got := tk.Encode("mmmm", false); !slices.Equal(got, want) {
			t.Errorf("ignore_merges %v: Encode(\"mmmm\") = %v, want %v", ignore, got, want)
		}
	}
}

// TestNormalizedAddedToken checks that an added token with normalized true
// is matched in the normalized text by its normalized content.
func TestNormalizedAddedToken(t *testing.T) {
	tk, err := LoadTokenizerJSON(writeTiny(t, map[string]string{fileTokenizerJSON: string(tinyTokenizerJSON(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "NFC"}
		m["added_tokens"] = append(m["added_tokens"].([]any), map[string]any{"id": 400, "content": "ne\u0301", "normalized": true, "special": false})
	}))}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ne\u0301", "n\u00e9"} {
		if got := tk.Encode(s, false); !slices.Equal(got, []int32{400}) {
			t.Errorf("Encode(%q) = %v, want [400]", s, got)
		}
	}
}

// TestLlama3Template checks a post-processor in Llama-3's current shape,
// Sequence[ByteLevel, TemplateProcessing("<|begin_of_text|> $A")], with
// tokenizer_class PreTrainedTokenizerFast: the file's template adds BOS and
// add_bos_token does not matter.
func TestLlama3Template(t *testing.T) {
	tk, err := LoadTokenizerJSON(writeTiny(t, map[string]string{
		fileConfig: `{"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": false, "bos_token": "<pad>", "eos_token": "</s>"}`,
		fileTokenizerJSON: string(tinyTokenizerJSON(t, func(m map[string]any) {
			m["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
				map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
				map[string]any{"type": "TemplateProcessing",
					"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<pad>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
					"special_tokens": map[string]any{"<pad>": map[string]any{"id": "<pad>", "ids": []int{1}, "tokens": []string{"<pad>"}}}}}}
		})),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Encode("the", true); len(got) < 2 || got[0] != 1 {
		t.Errorf("Encode(\"the\", true) = %v, want BOS 1 first", got)
	}
	if p, s := tk.Template(); !slices.Equal(p, []int32{1}) || len(s) != 0 {
		t.Errorf("Template() = %v, %v; want [1], []", p, s)
	}
}
