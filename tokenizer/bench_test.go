package tokenizer

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

var benchCorpusOut = flag.String("benchcorpus", "", "TestWriteBenchCorpus writes the benchmark corpus to this file as JSON lines {\"text\": ...}")

// benchCorpus returns about 2 MB of dialogue-like English in the shape of
// hh-rlhf: "\n\nHuman: ... \n\nAssistant: ..." turns. Words are drawn with
// a Zipf law from the tokenizer's whole-word tokens in id order (fairseq's
// order is by frequency), with punctuation, capitals, numbers,
// contractions, typographic quotes and rare compounds that split into
// several tokens. Deterministic.
func benchCorpus(tk *Tokenizer) []string {
	var words []string
	for id := range int32(tk.VocabSize()) {
		tok, _ := tk.IDToken(id)
		w, ok := strings.CutPrefix(tok, "Ġ")
		if ok && len(w) > 1 && strings.IndexFunc(w, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsLower(r) }) < 0 {
			words = append(words, w)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(r, 1.1, 2, uint64(len(words)-1))
	word := func() string {
		switch x := r.IntN(100); {
		case x < 2:
			return fmt.Sprint(r.IntN(10000))
		case x < 4:
			return words[zipf.Uint64()] + words[zipf.Uint64()] // a rare compound
		case x < 6:
			return words[zipf.Uint64()] + []string{"'s", "n't", "'ll", "’s", "'re"}[r.IntN(5)]
		}
		return words[zipf.Uint64()]
	}
	sentence := func(b *strings.Builder) {
		n := 4 + r.IntN(16)
		for i := range n {
			w := word()
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			} else {
				b.WriteByte(' ')
			}
			if r.IntN(30) == 0 {
				w = "“" + w + "”"
			}
			b.WriteString(w)
			if i < n-1 && r.IntN(12) == 0 {
				b.WriteByte(',')
			}
		}
		b.WriteString([]string{".", ".", ".", "?", "!", ":"}[r.IntN(6)])
	}
	var corpus []string
	size := 0
	for size < 2<<20 {
		var b strings.Builder
		for range 1 + r.IntN(3) {
			for _, who := range []string{"\n\nHuman:", "\n\nAssistant:"} {
				b.WriteString(who)
				for range 1 + r.IntN(4) {
					b.WriteByte(' ')
					sentence(&b)
				}
			}
		}
		corpus = append(corpus, b.String())
		size += b.Len()
	}
	return corpus
}

func corpusBytes(texts []string) int64 {
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	return int64(n)
}

// TestWriteBenchCorpus writes the benchmark corpus for
// scripts/tokenizer_golden/bench.mjs when -benchcorpus is given.
func TestWriteBenchCorpus(t *testing.T) {
	if *benchCorpusOut == "" {
		t.Skip("no -benchcorpus file given")
	}
	var b strings.Builder
	for _, s := range benchCorpus(loadOPT(t, routes[0])) {
		line, _ := json.Marshal(map[string]string{"text": s})
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(*benchCorpusOut, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkEncode encodes the corpus text by text on one goroutine, with
// the word cache warm (as when tokenizing a dataset) or emptied before
// every pass.
func BenchmarkEncode(b *testing.B) {
	tk := loadOPT(b, routes[0])
	corpus := benchCorpus(tk)
	b.Run("warm", func(b *testing.B) {
		st := &encodeState{}
		var ids []int32
		b.SetBytes(corpusBytes(corpus))
		for b.Loop() {
			for _, s := range corpus {
				ids = tk.appendEncode(ids[:0], s, true, st)
			}
		}
	})
	b.Run("cold", func(b *testing.B) {
		var ids []int32
		b.SetBytes(corpusBytes(corpus))
		for b.Loop() {
			st := &encodeState{}
			for _, s := range corpus {
				ids = tk.appendEncode(ids[:0], s, true, st)
			}
		}
	})
}

// BenchmarkEncodeBatch encodes the corpus with EncodeBatch on 1, 2, 4 and
// 8 workers; MB/s over workers=1 is the speed-up.
func BenchmarkEncodeBatch(b *testing.B) {
	tk := loadOPT(b, routes[0])
	corpus := benchCorpus(tk)
	for _, w := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			b.SetBytes(corpusBytes(corpus))
			for b.Loop() {
				tk.EncodeBatch(corpus, true, w)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	tk := loadOPT(b, routes[0])
	corpus := benchCorpus(tk)
	ids := tk.EncodeBatch(corpus, false, 0)
	b.SetBytes(corpusBytes(corpus))
	for b.Loop() {
		for _, x := range ids {
			if _, err := tk.Decode(x, false); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkLoad(b *testing.B) {
	loadOPT(b, routes[0])
	for _, c := range []struct {
		name string
		load func(string) (*Tokenizer, error)
	}{{"tokenizer.json", LoadTokenizerJSON}, {"vocab+merges", LoadVocabMerges}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.load(optDir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFamilyEncode encodes the same texts with OPT's tokenizer and the
// LLaMA-family ones, text by text on one goroutine with a warm word cache,
// and reports tokens/s (ids produced, BOS included) beside MB/s. The
// corpora are the dialogue corpus of BenchmarkEncode and "mixed", the texts
// of the qwen golden file (code, CJK, emoji, whitespace runs, numbers,
// special tokens). smollm2 (Digits + ByteLevel) is the one family whose
// tokenizer is in this repository. qwen3-regexp2 is Qwen3 with its Split pattern run by
// regexp2 instead of the hand-written scanner.
func BenchmarkFamilyEncode(b *testing.B) {
	opt := loadOPT(b, routes[0])
	corpora := map[string][]string{"dialogue": benchCorpus(opt)}
	cases, err := readGoldenFile(filepath.Join("testdata", "qwen3_js_golden.jsonl.gz"))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		corpora["mixed"] = append(corpora["mixed"], c.Text)
	}
	toks := []struct {
		name string
		tk   func(b *testing.B) *Tokenizer
	}{
		{"opt", func(*testing.B) *Tokenizer { return opt }},
		{"tinyllama", func(b *testing.B) *Tokenizer { return loadFamily(b, families[0]) }},
		{"mistral", func(b *testing.B) *Tokenizer { return loadFamily(b, families[1]) }},
		{"qwen3", func(b *testing.B) *Tokenizer { return loadFamily(b, families[2]) }},
		{"llama3-pattern", func(b *testing.B) *Tokenizer { return loadFamily(b, families[3]) }},
		{"smollm2", func(b *testing.B) *Tokenizer { return loadFamily(b, familySmolLM2) }},
		{"qwen3-regexp2", qwenRegexp2},
	}
	for _, corpus := range []string{"dialogue", "mixed"} {
		texts := corpora[corpus]
		for _, c := range toks {
			b.Run(corpus+"/"+c.name, func(b *testing.B) {
				tk := c.tk(b)
				st := &encodeState{}
				var ids []int32
				n := 0
				b.SetBytes(corpusBytes(texts))
				for b.Loop() {
					for _, s := range texts {
						ids = tk.appendEncode(ids[:0], s, true, st)
						n += len(ids)
					}
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// qwenRegexp2 loads Qwen3 with its Split pattern wrapped in a group, which
// is the same pattern but not one with a scanner, so regexp2 runs it.
func qwenRegexp2(b *testing.B) *Tokenizer {
	dir := needShared(b, "qwen3-tokenizer")
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	old := []byte(`"Regex": "(?i:'s|`)
	if bytes.Count(data, old) != 1 {
		b.Fatal("Qwen3's Split pattern not found")
	}
	data = bytes.Replace(data, old, []byte(`"Regex": "(?:(?i:'s|`), 1)
	data = bytes.Replace(data, []byte(`|\\s+(?!\\S)|\\s+"`), []byte(`|\\s+(?!\\S)|\\s+)"`), 1)
	out := b.TempDir()
	if err := os.WriteFile(filepath.Join(out, "tokenizer.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	tk, err := Load(out)
	if err != nil {
		b.Fatal(err)
	}
	if _, ok := tk.model.(*byteLevelBPE).splits[0].(*regexSplit); !ok {
		b.Fatal("the wrapped pattern did not go to regexp2")
	}
	return tk
}
