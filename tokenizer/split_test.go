package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// scanPieces splits s with a scanner.
func scanPieces(next func(string, int) int, s string) []string {
	return scanSplit{next: next}.split(nil, s)
}

func llama3Next(s string, i int) int { return llamaNext(s, i, 3) }
func qwen2Next(s string, i int) int  { return llamaNext(s, i, 1) }

func TestLlamaSplit(t *testing.T) {
	cases := []struct {
		in           string
		llama3, qwen []string // qwen nil: as llama3
	}{
		{"Hello, world!", []string{"Hello", ",", " world", "!"}, nil},
		{"\n\n  x", []string{"\n\n", " ", " x"}, nil},
		{"\n\n\tx", []string{"\n\n", "\tx"}, nil},
		{"a  b", []string{"a", " ", " b"}, nil},
		{"a \n  b", []string{"a", " \n", " ", " b"}, nil},
		{"x \n", []string{"x", " \n"}, nil},
		{"x\n ", []string{"x", "\n", " "}, nil},
		{"x\r\n\r\n y", []string{"x", "\r\n\r\n", " y"}, nil},
		{"foo.\n\nbar", []string{"foo", ".\n\n", "bar"}, nil},
		{" ...\n x", []string{" ...\n", " x"}, nil},
		{".Net 'x", []string{".Net", " '", "x"}, nil},
		{"'sand", []string{"'s", "and"}, nil},
		{"IT'S we'Ll you'RE", []string{"IT", "'S", " we", "'Ll", " you", "'RE"}, nil},
		{"'ſa", []string{"'ſ", "a"}, nil},
		{"?'s", []string{"?'", "s"}, nil},
		{"1234567", []string{"123", "456", "7"}, []string{"1", "2", "3", "4", "5", "6", "7"}},
		{"x12 ٣٤", []string{"x", "12", " ", "٣٤"}, []string{"x", "1", "2", " ", "٣", "٤"}},
		{"\tfoo", []string{"\tfoo"}, nil},
		{"a\u3000b", []string{"a", "\u3000b"}, nil},
		{"a\u0085b", []string{"a", "\u0085b"}, nil},
		{"a \u0085b", []string{"a", " ", "\u0085b"}, nil},
		{"a\u2028\u2028b", []string{"a", "\u2028", "\u2028b"}, nil},
		{"e\u0301t", []string{"e", "\u0301t"}, nil},
		{"x  ", []string{"x", "  "}, nil},
		{" ", []string{" "}, nil},
		{"你好 🙂", []string{"你好", " 🙂"}, nil},
		{"<|im_start|>", []string{"<|", "im", "_start", "|>"}, nil},
	}
	for _, c := range cases {
		if c.qwen == nil {
			c.qwen = c.llama3
		}
		if got := scanPieces(llama3Next, c.in); !slices.Equal(got, c.llama3) {
			t.Errorf("llama3 pieces(%q) = %q, want %q", c.in, got, c.llama3)
		}
		if got := scanPieces(qwen2Next, c.in); !slices.Equal(got, c.qwen) {
			t.Errorf("qwen2 pieces(%q) = %q, want %q", c.in, got, c.qwen)
		}
	}
}

// onigCase is a line of testdata/onig_split.jsonl.gz: a text and the end
// offsets of the matches of each pattern under Oniguruma
// (scripts/tokenizer_golden/onig_golden.py).
type onigCase struct {
	Text   string `json:"text"`
	GPT2   []int  `json:"gpt2"`
	Llama3 []int  `json:"llama3"`
	Qwen2  []int  `json:"qwen2"`
}

func readOnig(t testing.TB) []onigCase {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "onig_split.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []onigCase
	dec := json.NewDecoder(bufio.NewReader(zr))
	for dec.More() {
		var c onigCase
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("onig_split.jsonl.gz: case %d: %v", len(out)+1, err)
		}
		out = append(out, c)
	}
	return out
}

func scanEnds(next func(string, int) int, s string) []int {
	var ends []int
	for i := 0; i < len(s); {
		i = next(s, i)
		ends = append(ends, i)
	}
	return ends
}

// TestOnigSplit checks the scanners against Oniguruma, the regex engine of
// Hugging Face's Rust tokenizers, on the texts of the qwen family and the
// case-folding corner U+017F (which the JavaScript port gets wrong).
func TestOnigSplit(t *testing.T) {
	cases := readOnig(t)
	if len(cases) < 5000 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, p := range []struct {
		name string
		next func(string, int) int
		want func(c onigCase) []int
	}{
		{"gpt2", gpt2Next, func(c onigCase) []int { return c.GPT2 }},
		{"llama3", llama3Next, func(c onigCase) []int { return c.Llama3 }},
		{"qwen2", qwen2Next, func(c onigCase) []int { return c.Qwen2 }},
	} {
		bad := 0
		for _, c := range cases {
			if got := scanEnds(p.next, c.Text); !slices.Equal(got, p.want(c)) {
				if bad++; bad <= 5 {
					t.Errorf("%s: %q: piece ends %v, Oniguruma %v", p.name, c.Text, got, p.want(c))
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d texts differ", p.name, bad, len(cases))
		}
	}
}

// regexp2Differs reports whether s holds the one construct on which
// regexp2 and Oniguruma differ for these patterns: "'ſ", which Oniguruma's
// case folding matches as the contraction 's.
func regexp2Differs(s string) bool { return strings.Contains(s, "'\u017f") }

// TestRegexp2Agrees checks that regexp2 (the engine for Split patterns
// without a scanner) splits the Oniguruma texts as the scanners do.
func TestRegexp2Agrees(t *testing.T) {
	cases := readOnig(t)
	for _, p := range []struct {
		pattern string
		next    func(string, int) int
	}{{patternGPT2, gpt2Next}, {patternLlama3, llama3Next}, {patternQwen2, qwen2Next}} {
		re, err := newRegexSplit(p.pattern, "Isolated", false)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for _, c := range cases {
			if regexp2Differs(c.Text) {
				continue
			}
			if got, want := re.split(nil, c.Text), scanPieces(p.next, c.Text); !slices.Equal(got, want) {
				if bad++; bad <= 5 {
					t.Errorf("%.20s: %q: regexp2 %q, scanner %q", p.pattern, c.Text, got, want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%.20s: %d texts differ", p.pattern, bad)
		}
	}
}

// FuzzLlamaSplit checks the Llama-3 and Qwen2 scanners against regexp2 on
// any text, and that the pieces cover it.
func FuzzLlamaSplit(f *testing.F) {
	for _, s := range []string{"", "Hello, world! 你好 🙂\n\n  x", "it's IT'S 'Ll", "1234567 ٣٤", " \n \r\n\t x", "a\u0085\u2028b", ".Net\n\n", "'ſ"} {
		f.Add(s)
	}
	res := map[string]*regexSplit{}
	for _, p := range []string{patternLlama3, patternQwen2} {
		re, err := newRegexSplit(p, "Isolated", false)
		if err != nil {
			f.Fatal(err)
		}
		res[p] = re
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			s = string(appendValidUTF8(nil, []byte(s)))
		}
		for p, next := range map[string]func(string, int) int{patternLlama3: llama3Next, patternQwen2: qwen2Next} {
			got := scanPieces(next, s)
			if strings.Join(got, "") != s || slices.Contains(got, "") {
				t.Fatalf("pieces %q do not cover %q", got, s)
			}
			if regexp2Differs(s) {
				continue
			}
			if want := res[p].split(nil, s); !slices.Equal(got, want) {
				t.Fatalf("%.20s: %q: scanner %q, regexp2 %q", p, s, got, want)
			}
		}
	})
}

func TestSplitters(t *testing.T) {
	cases := []struct {
		name string
		sp   splitter
		in   string
		want []string
	}{
		{"digits individual", digitsSplit{true}, "ab12 3٣x", []string{"ab", "1", "2", " ", "3", "٣", "x"}},
		{"digits runs", digitsSplit{false}, "ab12 3٣x", []string{"ab", "12", " ", "3٣", "x"}},
		{"digits only", digitsSplit{true}, "42", []string{"4", "2"}},
		{"metaspace", metaspaceSplit{"▁"}, "▁Hey▁▁friend!", []string{"▁Hey", "▁", "▁friend!"}},
		{"metaspace no lead", metaspaceSplit{"▁"}, "Hey▁you▁", []string{"Hey", "▁you", "▁"}},
		{"regex isolated", mustRegexSplit(t, `\d+`, "Isolated", false), "a12b3", []string{"a", "12", "b", "3"}},
		{"regex removed", mustRegexSplit(t, ` `, "Removed", false), " a  b ", []string{"a", "b"}},
		{"regex removed invert", mustRegexSplit(t, `\d+`, "Removed", true), "a12b3", []string{"12", "3"}},
		{"regex lookahead", mustRegexSplit(t, `\s+(?!\S)|\s+`, "Isolated", false), "a  b", []string{"a", " ", " ", "b"}},
		{"regex runes", mustRegexSplit(t, `\p{L}+`, "Isolated", false), "é1日本", []string{"é", "1", "日本"}},
	}
	for _, c := range cases {
		if got := c.sp.split(nil, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s: split(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

func mustRegexSplit(t *testing.T, pattern, behavior string, invert bool) *regexSplit {
	t.Helper()
	re, err := newRegexSplit(pattern, behavior, invert)
	if err != nil {
		t.Fatal(err)
	}
	return re
}
