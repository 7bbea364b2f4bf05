package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// fuzzTokenizer is the OPT tokenizer when the shared data is there, else
// the tiny one, so that the fuzz seeds run either way; under CI (CI set) the
// shared data must be there, and loadOPT fails without it.
func fuzzTokenizer(f *testing.F) *Tokenizer {
	if _, err := os.Stat(optDir); err == nil || os.Getenv("CI") != "" {
		return loadOPT(f, routes[0])
	}
	tk, err := LoadTokenizerJSON(writeTiny(f, nil))
	if err != nil {
		f.Fatal(err)
	}
	return tk
}

// FuzzRoundTrip checks Decode(Encode(x)) == x for valid UTF-8 and the
// repaired text for ill-formed input, and that batches agree with Encode.
func FuzzRoundTrip(f *testing.F) {
	tk := fuzzTokenizer(f)
	for _, s := range []string{"", "Hello, my name is", "\n\nHuman: hi</s><pad>\n\nAssistant:", "it's IT'S we'LL", "  \t\u00a0\u3000x ", "日本語 👍🏽 e\u0301", "<|endoftext|>", "a\xffb\xe2\x82", "1234567890 3.14"} {
		f.Add(s)
	}
	if cases, err := readGoldenFile(filepath.Join("testdata", "opt_js_golden.jsonl.gz")); err == nil {
		for i := 0; i < len(cases); i += 97 {
			f.Add(cases[i].Text)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s, false)
		want := s
		if !utf8.ValidString(s) {
			want = string(appendValidUTF8(nil, []byte(s)))
		}
		got, err := tk.Decode(ids, false)
		if err != nil || got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, %v; want %q", s, got, err, want)
		}
		if !slices.Equal(tk.Encode(want, false), ids) {
			t.Fatalf("Encode(%q) differs from Encode of its repaired text", s)
		}
		if b := tk.EncodeBatch([]string{s, s}, false, 2); !slices.Equal(b[0], ids) || !slices.Equal(b[1], ids) {
			t.Fatalf("EncodeBatch(%q) = %v, want %v", s, b, ids)
		}
	})
}

// FuzzLoadTokenizerJSON checks that no tokenizer.json makes the loader
// panic, and that what loads can encode and decode.
func FuzzLoadTokenizerJSON(f *testing.F) {
	f.Add(tinyTokenizerJSON(f, nil))
	f.Add(tinyTokenizerJSON(f, func(m map[string]any) {
		m["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{map[string]any{"type": "ByteLevel"}, map[string]any{"type": "RobertaProcessing", "sep": []any{"</s>", 2}, "cls": []any{"<s>", 0}}}}
		m["model"].(map[string]any)["merges"] = []any{[]string{"Ġ", "t"}, []string{"h", "e"}}
	}))
	f.Add([]byte(`{"model": {"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}`))
	f.Add([]byte(`{"model": {"vocab": {"a": 5000}, "merges": []}}`))
	f.Add([]byte(`{"added_tokens": [{"id": 0, "content": ""}]}`))
	f.Add([]byte(`null`))
	f.Add(spTokenizerJSON(f, tinyLlamaStyle, nil))
	f.Add(spTokenizerJSON(f, mistralStyle, nil))
	f.Add(spTokenizerJSON(f, mistralStyle, func(m map[string]any) {
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}
		m["decoder"] = map[string]any{"type": "Metaspace", "replacement": "▁", "add_prefix_space": true}
		m["model"].(map[string]any)["byte_fallback"] = false
	}))
	f.Add(tinyTokenizerJSON(f, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "NFC"}
		m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternQwen2}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}}}
		m["model"].(map[string]any)["ignore_merges"] = true
	}))
	f.Add(tinyTokenizerJSON(f, func(m map[string]any) {
		m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Digits", "individual_digits": true},
			map[string]any{"type": "Split", "pattern": map[string]any{"String": "</"}, "behavior": "Removed", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": true}}}
	}))
	f.Fuzz(func(t *testing.T, data []byte) {
		sp, err := parseTokenizerJSON(data)
		if err != nil {
			return
		}
		tk, err := build(sp)
		if err != nil {
			return
		}
		exercise(t, tk)
	})
}

// FuzzLoadVocabMerges does the same for vocab.json + merges.txt +
// tokenizer_config.json.
func FuzzLoadVocabMerges(f *testing.F) {
	vocab := []byte(`{"<s>": 0, "</s>": 1, "a": 2, "b": 3, "ab": 4, "Ġ": 5}`)
	f.Add(vocab, []byte("#version: 0.2\na b\n"), []byte(tinyConfig))
	f.Add(vocab, []byte("a b\r\n\r\n"), []byte(`{"tokenizer_class": "RobertaTokenizer", "added_tokens_decoder": {"9": {"content": "<x>"}}}`))
	f.Add(vocab, []byte("a b\nab ab\n"), []byte(`{"add_eos_token": true}`))
	f.Add([]byte(`{"a": 2147483647}`), []byte(""), []byte(`{"bos_token": {"content": "q", "lstrip": true}, "add_bos_token": true}`))
	f.Fuzz(func(t *testing.T, vocabData, mergesData, configData []byte) {
		v, err := parseVocab(vocabData)
		if err != nil {
			return
		}
		merges, _, err := parseMerges(mergesData)
		if err != nil {
			return
		}
		cfg := &hfConfig{names: map[string]tokenValue{}}
		if err := cfg.parse(configData, true); err != nil {
			return
		}
		sp, err := cfg.vocabMergesSpec(v, merges, nil)
		if err != nil {
			return
		}
		tk, err := build(sp)
		if err != nil {
			return
		}
		exercise(t, tk)
	})
}

// exercise encodes and decodes a few texts with a fuzzed tokenizer.
func exercise(t *testing.T, tk *Tokenizer) {
	for _, s := range []string{"", "ab ab a b</s>", "\n\n x", "\xff"} {
		ids := tk.Encode(s, true)
		if _, err := tk.Decode(ids, false); err != nil {
			t.Fatalf("Decode(Encode(%q)) = %v", s, err)
		}
		if _, err := tk.Decode(ids, true); err != nil {
			t.Fatalf("Decode(Encode(%q), skip) = %v", s, err)
		}
	}
	for id := range int32(tk.VocabSize()) {
		if tok, ok := tk.IDToken(id); ok {
			if _, ok := tk.TokenID(tok); !ok {
				t.Fatalf("token %q of id %d has no id", tok, id)
			}
		}
	}
}

// FuzzFamilies encodes and decodes any text with the LLaMA-family
// tokenizers of the shared data (the tiny SentencePiece one when it is
// absent) and SmolLM2's (testdata/smollm2): batches agree with Encode,
// decoding succeeds, and for Qwen3 Decode(Encode(x)) is NFC(x), as its
// normalizer is NFC and byte-level BPE loses nothing else.
func FuzzFamilies(f *testing.F) {
	var toks []*Tokenizer
	var qwen *Tokenizer
	if _, err := os.Stat(sharedData); err == nil || os.Getenv("CI") != "" {
		for _, fam := range families[:3] {
			toks = append(toks, loadFamily(f, fam))
		}
		qwen = toks[2]
	} else {
		toks = append(toks, mustLoadF(f, writeSP(f, tinyLlamaStyle, spConfig, nil)), mustLoadF(f, writeSP(f, mistralStyle, spConfig, nil)))
	}
	toks = append(toks, loadFamily(f, familySmolLM2))
	for _, s := range []string{"", "Hello, world! 你好 🙂\n\n  x", "<s>[INST] Hello</s>", "<|im_start|>user\nHi!<|im_end|>\n", "e\u0301\u0085\u2028", "1234567", " \xff\xfe", "x \u0663\u0664 \u00b2\x14'<repo_name>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range toks {
			ids := tk.Encode(s, true)
			if b := tk.EncodeBatch([]string{s, s}, true, 2); !slices.Equal(b[0], ids) || !slices.Equal(b[1], ids) {
				t.Fatalf("EncodeBatch(%q) = %v, want %v", s, b, ids)
			}
			for _, skip := range []bool{false, true} {
				text, err := tk.Decode(ids, skip)
				if err != nil || !utf8.ValidString(text) {
					t.Fatalf("Decode(Encode(%q), %v) = %q, %v", s, skip, text, err)
				}
			}
		}
		if qwen != nil {
			want := norm.NFC.String(string(appendValidUTF8(nil, []byte(s))))
			if got, err := qwen.Decode(qwen.Encode(s, false), false); got != want || err != nil {
				t.Fatalf("qwen3: Decode(Encode(%q)) = %q, %v; want %q", s, got, err, want)
			}
		}
	})
}

func mustLoadF(f *testing.F, dir string) *Tokenizer {
	tk, err := Load(dir)
	if err != nil {
		f.Fatal(err)
	}
	return tk
}
