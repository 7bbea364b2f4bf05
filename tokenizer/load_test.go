package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A tiny byte-level BPE tokenizer in OPT's shape, for tests that must not
// depend on the shared data: <s> <pad> </s> <unk>, the 256 byte tokens,
// then the tokens of tinyMerges.
var tinyMerges = [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"Ġ", "a"}, {"m", "m"}, {"mm", "m"}, {"i", "n"}, {"Ġ", "in"}}

func tinyVocab() map[string]int32 {
	v := map[string]int32{"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
	for b, r := range byteLevelAlphabet() {
		v[string(r)] = int32(4 + b)
	}
	for _, m := range tinyMerges {
		if _, ok := v[m[0]+m[1]]; !ok {
			v[m[0]+m[1]] = int32(len(v))
		}
	}
	return v
}

const tinyConfig = `{"add_bos_token": true, "bos_token": "</s>", "eos_token": "</s>", "unk_token": "</s>", "pad_token": "<pad>", "tokenizer_class": "GPT2Tokenizer"}`

// tinyTokenizerJSON returns tokenizer.json for the tiny tokenizer; edit
// may change the decoded object before it is written.
func tinyTokenizerJSON(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	var merges []string
	for _, m := range tinyMerges {
		merges = append(merges, m[0]+" "+m[1])
	}
	m := map[string]any{
		"version": "1.0",
		"added_tokens": []any{
			map[string]any{"id": 1, "content": "<pad>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": true},
			map[string]any{"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": true},
		},
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"</s>": map[string]any{"id": "</s>", "ids": []int{2}, "tokens": []string{"</s>"}}}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model":   map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "vocab": tinyVocab(), "merges": merges},
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeTiny writes the tiny tokenizer's files to a new directory; files
// maps a file name to its content, replacing the default ("" removes it).
func writeTiny(t testing.TB, files map[string]string) string {
	t.Helper()
	vocab, err := json.Marshal(tinyVocab())
	if err != nil {
		t.Fatal(err)
	}
	var merges strings.Builder
	merges.WriteString("#version: 0.2\n")
	for _, m := range tinyMerges {
		merges.WriteString(m[0] + " " + m[1] + "\n")
	}
	all := map[string]string{
		fileTokenizerJSON: string(tinyTokenizerJSON(t, nil)),
		fileVocab:         string(vocab),
		fileMerges:        merges.String(),
		fileConfig:        tinyConfig,
	}
	for k, v := range files {
		all[k] = v
	}
	dir := t.TempDir()
	for name, content := range all {
		if content == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustLoad(t *testing.T, load func(string) (*Tokenizer, error), dir string) *Tokenizer {
	t.Helper()
	tk, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestTinyRoutes checks that both loading routes give the same tokenizer.
func TestTinyRoutes(t *testing.T) {
	dir := writeTiny(t, nil)
	a, b := mustLoad(t, LoadTokenizerJSON, dir), mustLoad(t, LoadVocabMerges, dir)
	if !slices.Equal(a.vocab, b.vocab) || !slices.Equal(a.special, b.special) {
		t.Fatal("vocabularies or special tokens differ")
	}
	for _, s := range []string{"the mmmm in inn", "\n\n the</s><pad>x", " a  a\t\ta ", "<|endoftext|>", "it's"} {
		ea, eb := a.Encode(s, true), b.Encode(s, true)
		if !slices.Equal(ea, eb) {
			t.Errorf("%q: tokenizer.json %v, vocab+merges %v", s, ea, eb)
		}
		if back, err := a.Decode(ea[1:], false); back != s || err != nil {
			t.Errorf("Decode(Encode(%q)) = %q, %v", s, back, err)
		}
	}
	v := tinyVocab()
	if got, want := a.Encode(" the mmmm", false), []int32{v["Ġthe"], v["Ġ"], v["mm"], v["mm"]}; !slices.Equal(got, want) {
		t.Errorf("Encode(\" the mmmm\") = %v, want %v", got, want)
	}
	// Load prefers tokenizer.json and falls back to vocab.json + merges.txt.
	noJSON := writeTiny(t, map[string]string{fileTokenizerJSON: ""})
	if got := mustLoad(t, Load, noJSON).Encode("the", true); !slices.Equal(got, a.Encode("the", true)) {
		t.Errorf("Load without tokenizer.json: %v", got)
	}
}

// TestLoadErrors checks that bad files give errors that name the file and
// what is wrong.
func TestLoadErrors(t *testing.T) {
	edit := func(f func(m map[string]any)) string { return string(tinyTokenizerJSON(t, f)) }
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	cases := []struct {
		name  string
		load  func(string) (*Tokenizer, error)
		files map[string]string
		want  []string
	}{
		{"empty dir", Load, map[string]string{fileTokenizerJSON: "", fileVocab: "", fileMerges: "", fileConfig: ""}, []string{"neither tokenizer.json nor vocab.json"}},
		{"missing merges", LoadVocabMerges, map[string]string{fileMerges: ""}, []string{"merges.txt", "no such file"}},
		{"missing vocab", LoadVocabMerges, map[string]string{fileVocab: ""}, []string{"vocab.json", "no such file"}},
		{"vocab not an object", LoadVocabMerges, map[string]string{fileVocab: "[1, 2]"}, []string{"vocab.json", "want an object"}},
		{"vocab bad JSON", LoadVocabMerges, map[string]string{fileVocab: `{"a": 1,}`}, []string{"vocab.json", "invalid JSON at byte"}},
		{"vocab negative id", LoadVocabMerges, map[string]string{fileVocab: `{"a": -1}`}, []string{"vocab.json", `token "a": id -1`}},
		{"vocab huge id", LoadVocabMerges, map[string]string{fileVocab: `{"a": 100000000}`, fileMerges: "#version: 0.2\n"}, []string{"has id 100000000"}},
		{"malformed merge", LoadVocabMerges, map[string]string{fileMerges: "#version: 0.2\nĠ t\nbad\n"}, []string{"merges.txt", "line 3", "two tokens"}},
		{"three-part merge", LoadVocabMerges, map[string]string{fileMerges: "Ġ t x\n"}, []string{"merges.txt", "line 1"}},
		{"merge token unknown", LoadVocabMerges, map[string]string{fileMerges: "#version: 0.2\nĠ t\nzz t\n"}, []string{"merges.txt: line 3", `token "zz" is not in the vocabulary`}},
		{"merged token unknown", LoadVocabMerges, map[string]string{fileMerges: "a b\n"}, []string{"merges.txt: line 1", `merged token "ab"`}},
		{"config bad JSON", LoadVocabMerges, map[string]string{fileConfig: "{"}, []string{"tokenizer_config.json", "invalid JSON"}},
		{"config bad token", LoadVocabMerges, map[string]string{fileConfig: `{"bos_token": 3}`}, []string{"tokenizer_config.json", "bos_token"}},
		{"special map bad", LoadTokenizerJSON, map[string]string{fileSpecialMap: `[]`}, []string{"special_tokens_map.json"}},
		{"added_tokens.json bad", LoadVocabMerges, map[string]string{fileAddedTokens: `{"x": "y"}`}, []string{"added_tokens.json"}},
		{"config names unknown token", LoadTokenizerJSON, map[string]string{fileConfig: `{"pad_token": "<nope>"}`}, []string{"pad_token", "<nope>"}},
		{"tokenizer.json bad JSON", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: "{\n\"model\": }"}, []string{"tokenizer.json", "invalid JSON at byte"}},
		{"no model", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: `{}`}, []string{"tokenizer.json", "model is missing"}},
		{"model type", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { model(m)["type"] = "WordPiece" })}, []string{"tokenizer.json", `model type "WordPiece"`}},
		{"dropout", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { model(m)["dropout"] = 0.1 })}, []string{"dropout"}},
		{"bad merge entry", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { model(m)["merges"] = []any{"Ġ t", "nospace"} })}, []string{"model.merges[1]", "nospace"}},
		{"bad merge type", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { model(m)["merges"] = []any{7} })}, []string{"model.merges[0]"}},
		{"merge not in vocab", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { model(m)["merges"] = []any{[]string{"Ġ", "t"}, []string{"q", "q"}} })}, []string{"model.merges[1]", `merged token "qq"`}},
		{"normalizer", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "BertNormalizer"} })}, []string{`normalizer: normalizer "BertNormalizer" is not supported`}},
		{"normalizer in sequence", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " +"}, "content": " "}}}
		})}, []string{"normalizer.normalizers[1]", "Regex patterns of Replace"}},
		{"prepend without prepend", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Prepend"} })}, []string{"Prepend without prepend"}},
		{"pre-tokenizer", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Whitespace"} })}, []string{`pre-tokenizer "Whitespace" is not supported`}},
		{"metaspace replacement", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} })}, []string{"pre_tokenizer: Metaspace replacement"}},
		{"metaspace scheme", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"}
		})}, []string{`prepend_scheme "sometimes"`}},
		{"split after byte-level", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "ByteLevel"}, map[string]any{"type": "Digits"}}}
		})}, []string{"pre_tokenizer.pretokenizers[1]", "after ByteLevel"}},
		{"split bad regex", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(a"}, "behavior": "Isolated"}, map[string]any{"type": "ByteLevel"}}}
		})}, []string{"pre_tokenizer.pretokenizers[0]", `pattern "(a"`}},
		{"split behavior", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Split", "pattern": map[string]any{"String": "x"}, "behavior": "Contiguous"}, map[string]any{"type": "ByteLevel"}}}
		})}, []string{`behavior "Contiguous"`}},
		{"no pre-tokenizer", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["pre_tokenizer"] = nil })}, []string{"decoder ByteLevel needs a ByteLevel pre-tokenizer"}},
		{"decoder", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["decoder"] = nil })}, []string{"decoder is missing"}},
		{"decoder for byte-level", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["decoder"] = map[string]any{"type": "Fuse"} })}, []string{`decoder "Fuse" is not supported with a ByteLevel pre-tokenizer`}},
		{"decoder unknown", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) {
			m["pre_tokenizer"] = nil
			m["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "Fuse"}, map[string]any{"type": "CTC"}}}
		})}, []string{"decoder.decoders[1]", `decoder "CTC"`}},
		{"strip content", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) {
			m["pre_tokenizer"] = nil
			m["decoder"] = map[string]any{"type": "Strip", "content": "ab", "start": 1}
		})}, []string{"Strip content must be one character"}},
		{"llama template without bos", LoadTokenizerJSON, map[string]string{fileConfig: `{"tokenizer_class": "LlamaTokenizer", "eos_token": "</s>"}`}, []string{"add_bos_token is true but there is no bos_token"}},
		{"generation config eos", LoadTokenizerJSON, map[string]string{fileGenConfig: `{"eos_token_id": [2, 99999]}`}, []string{"generation_config.json", "eos_token_id 99999"}},
		{"generation config bad eos", LoadTokenizerJSON, map[string]string{fileGenConfig: `{"eos_token_id": "x"}`}, []string{"generation_config.json", "want an id or a list"}},
		{"post-processor", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["post_processor"] = map[string]any{"type": "Magic"} })}, []string{`post_processor "Magic"`}},
		{"template id", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) {
			m["post_processor"] = map[string]any{"type": "RobertaProcessing", "sep": []any{"</s>", 2}, "cls": []any{"<x>", 9999}}
		})}, []string{"template id 9999"}},
		{"added token without content", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { m["added_tokens"] = []any{map[string]any{"id": 5}} })}, []string{"added_tokens[0]", "content"}},
		{"unk not in vocab", LoadTokenizerJSON, map[string]string{fileTokenizerJSON: edit(func(m map[string]any) { model(m)["unk_token"] = "<nope>" })}, []string{"unk_token", "<nope>"}},
	}
	for _, c := range cases {
		_, err := c.load(writeTiny(t, c.files))
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, w)
			}
		}
	}
}

// TestAddedTokenRules checks lstrip, rstrip, single_word and the two
// matching passes of added tokens (Hugging Face's
// AddedVocabulary::split_with_indices).
func TestAddedTokenRules(t *testing.T) {
	// tok is an added token; flags are JSON fields set to true.
	tok := func(id int, content string, flags ...string) map[string]any {
		m := map[string]any{"id": id, "content": content, "special": true, "normalized": false}
		for _, f := range flags {
			m[f] = true
		}
		return m
	}
	cases := []struct {
		name  string
		added []any
		text  string
		want  func(enc func(string) []int32) []int32
	}{
		{"lstrip", []any{tok(300, "<m>", "lstrip")}, "a <m> b", func(enc func(string) []int32) []int32 {
			return slices.Concat(enc("a"), []int32{300}, enc(" b"))
		}},
		{"rstrip", []any{tok(300, "<m>", "rstrip")}, "a <m> b", func(enc func(string) []int32) []int32 {
			return slices.Concat(enc("a "), []int32{300}, enc("b"))
		}},
		{"single_word", []any{tok(300, "ab", "single_word")}, "ab cab ab", func(enc func(string) []int32) []int32 {
			return slices.Concat([]int32{300}, enc(" cab "), []int32{300})
		}},
		{"longest at the leftmost start", []any{tok(300, "<a"), tok(301, "<ab>")}, "x<ab><a", func(enc func(string) []int32) []int32 {
			return slices.Concat(enc("x"), []int32{301, 300})
		}},
		{"non-normalized tokens first", []any{tok(300, "ab", "normalized"), tok(301, "bc")}, "abc", func(enc func(string) []int32) []int32 {
			return slices.Concat(enc("a"), []int32{301})
		}},
	}
	plain := mustLoad(t, LoadTokenizerJSON, writeTiny(t, nil))
	for _, c := range cases {
		dir := writeTiny(t, map[string]string{fileTokenizerJSON: string(tinyTokenizerJSON(t, func(m map[string]any) {
			m["added_tokens"] = c.added
		}))})
		tk := mustLoad(t, LoadTokenizerJSON, dir)
		enc := func(s string) []int32 { return plain.Encode(s, false) }
		if got, want := tk.Encode(c.text, false), c.want(enc); !slices.Equal(got, want) {
			t.Errorf("%s: Encode(%q) = %v, want %v", c.name, c.text, got, want)
		}
	}
}

// TestVocabMergesConfig checks what the vocab.json + merges.txt route takes
// from the configuration files.
func TestVocabMergesConfig(t *testing.T) {
	v := tinyVocab()
	t.Run("special_tokens_map overrides tokenizer_config", func(t *testing.T) {
		tk := mustLoad(t, LoadVocabMerges, writeTiny(t, map[string]string{fileSpecialMap: `{"bos_token": {"content": "<s>", "lstrip": false}, "pad_token": "<unk>"}`}))
		if bos, _ := tk.BOS(); bos != 0 {
			t.Errorf("BOS %d, want 0", bos)
		}
		if pad, _ := tk.PAD(); pad != 3 {
			t.Errorf("PAD %d, want 3", pad)
		}
		if got := tk.Encode("a", true); !slices.Equal(got, []int32{0, v["a"]}) {
			t.Errorf("Encode = %v", got)
		}
	})
	t.Run("no add_bos_token", func(t *testing.T) {
		tk := mustLoad(t, LoadVocabMerges, writeTiny(t, map[string]string{fileConfig: `{"bos_token": "</s>"}`}))
		if got := tk.Encode("a", true); !slices.Equal(got, []int32{v["a"]}) {
			t.Errorf("Encode = %v", got)
		}
	})
	t.Run("new special token and added tokens", func(t *testing.T) {
		tk := mustLoad(t, LoadVocabMerges, writeTiny(t, map[string]string{
			fileConfig:      `{"add_bos_token": true, "bos_token": "<new>", "additional_special_tokens": ["<x>"], "added_tokens_decoder": {"268": {"content": "<dec>", "special": false}}}`,
			fileAddedTokens: `{"<added>": 269}`,
		}))
		if len(v) != 268 {
			t.Fatalf("tiny vocabulary has %d tokens; the test assumes 268", len(v))
		}
		if got, want := tk.Encode("<x>a<dec><added>", true), []int32{270, 271, v["a"], 268, 269}; !slices.Equal(got, want) {
			t.Errorf("Encode = %v, want %v", got, want)
		}
		if text, _ := tk.Decode(tk.Encode("<x>a<dec>", true), true); text != "a<dec>" {
			t.Errorf("Decode skipping special = %q", text)
		}
	})
	t.Run("RoBERTa template", func(t *testing.T) {
		tk := mustLoad(t, LoadVocabMerges, writeTiny(t, map[string]string{fileConfig: `{"tokenizer_class": "RobertaTokenizer"}`}))
		if got := tk.Encode("a", true); !slices.Equal(got, []int32{0, v["a"], 2}) {
			t.Errorf("Encode = %v", got)
		}
		if eos, _ := tk.EOS(); eos != 2 {
			t.Errorf("EOS %d", eos)
		}
	})
	t.Run("add_prefix_space", func(t *testing.T) {
		tk := mustLoad(t, LoadVocabMerges, writeTiny(t, map[string]string{fileConfig: `{"add_prefix_space": true, "eos_token": "</s>"}`}))
		if got := tk.Encode("the</s>the", false); !slices.Equal(got, []int32{v["Ġthe"], 2, v["Ġthe"]}) {
			t.Errorf("Encode = %v", got)
		}
	})
	t.Run("GPT-2 defaults without a config", func(t *testing.T) {
		vocab := tinyVocab()
		vocab["<|endoftext|>"] = int32(len(vocab))
		b, _ := json.Marshal(vocab)
		tk := mustLoad(t, LoadVocabMerges, writeTiny(t, map[string]string{fileConfig: "", fileVocab: string(b)}))
		if eos, ok := tk.EOS(); !ok || eos != vocab["<|endoftext|>"] {
			t.Errorf("EOS %d, %v", eos, ok)
		}
		if got := tk.Encode("a<|endoftext|>", true); !slices.Equal(got, []int32{v["a"], vocab["<|endoftext|>"]}) {
			t.Errorf("Encode = %v", got)
		}
	})
}
