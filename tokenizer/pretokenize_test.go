package tokenizer

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// pieces splits s with gpt2Next.
func pieces(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := gpt2Next(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}

func TestPreTokenize(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello, my name is", []string{"Hello", ",", " my", " name", " is"}},
		{"\n\nHuman:", []string{"\n", "\n", "Human", ":"}},
		{"\n\n Human", []string{"\n\n", " Human"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   ", []string{"a", "   "}},
		{"a \tb", []string{"a", " ", "\t", "b"}},
		{"a\t b", []string{"a", "\t", " b"}},
		{" \nx", []string{" ", "\n", "x"}},
		{"a\u00a0b", []string{"a", "\u00a0", "b"}},
		{"a \u3000b", []string{"a", " ", "\u3000", "b"}},
		{"x \u00a0 y", []string{"x", " \u00a0", " y"}},
		{" 1000", []string{" 1000"}},
		{"12ab34", []string{"12", "ab", "34"}},
		{"it's", []string{"it", "'s"}},
		{"IT'S", []string{"IT", "'", "S"}},
		{"we'll've", []string{"we", "'ll", "'ve"}},
		{"'sand", []string{"'s", "and"}},
		{" 's", []string{" '", "s"}},
		{"?'s", []string{"?'", "s"}},
		{"''s", []string{"''", "s"}},
		{"'re'", []string{"'re", "'"}},
		{"x'", []string{"x", "'"}},
		{"hi!!! ...", []string{"hi", "!!!", " ..."}},
		{"e\u0301t\u00e9", []string{"e", "\u0301", "t\u00e9"}},
		{"日本語 テキスト", []string{"日本語", " テキスト"}},
		{"x²³", []string{"x", "²³"}},
		{"👍🏽 ok", []string{"👍🏽", " ok"}},
		{"a\u0085\u0085b", []string{"a", "\u0085", "\u0085", "b"}},
		{" \ufeffb", []string{" \ufeff", "b"}},
		{"\t", []string{"\t"}},
		{" ", []string{" "}},
		{"  x", []string{" ", " x"}},
		{"\r\n\r\nx", []string{"\r\n\r", "\n", "x"}},
	}
	for _, c := range cases {
		if got := pieces(c.in); !slices.Equal(got, c.want) {
			t.Errorf("pieces(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := refPieces(c.in); !slices.Equal(got, c.want) {
			t.Errorf("reference pieces(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestClassFastPath checks the ranges classAt treats as letters without
// asking the unicode package.
func TestClassFastPath(t *testing.T) {
	for _, r := range [][2]rune{{0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x3041, 0x3096}, {0x30A1, 0x30FA}} {
		for c := r[0]; c <= r[1]; c++ {
			if !unicode.IsLetter(c) {
				t.Fatalf("U+%04X is in the letter fast path but is not a letter", c)
			}
		}
	}
	for c := range rune(utf8.RuneSelf) {
		s := string(c)
		cls, _ := classAt(s, 0)
		want := clsOther
		switch {
		case unicode.IsLetter(c):
			want = clsLetter
		case unicode.IsNumber(c):
			want = clsNumber
		case unicode.IsSpace(c):
			want = clsSpace
		}
		if cls != want {
			t.Errorf("class of %q = %d, want %d", s, cls, want)
		}
	}
}

// whiteSpace is the character class of Unicode White_Space, which is what
// \s means in Oniguruma (Hugging Face) and what unicode.IsSpace tests. Go's
// regexp \s is ASCII only.
var whiteSpace = func() string {
	var b strings.Builder
	for _, r := range unicode.White_Space.R16 {
		for c := r.Lo; c <= r.Hi; c += r.Stride {
			fmt.Fprintf(&b, `\x{%x}`, c)
		}
	}
	for _, r := range unicode.White_Space.R32 {
		for c := r.Lo; c <= r.Hi; c += r.Stride {
			fmt.Fprintf(&b, `\x{%x}`, c)
		}
	}
	return b.String()
}()

// The GPT-2 pattern without its two whitespace alternatives, which need
// lookahead; Go's regexp is leftmost-first like Oniguruma.
var (
	refHead = regexp.MustCompile(`^(?:'s|'t|'re|'ve|'m|'ll|'d| ?\pL+| ?\pN+| ?[^` + whiteSpace + `\pL\pN]+)`)
	refWS   = regexp.MustCompile(`^[` + whiteSpace + `]+`)
)

// refPieces is a slow, independent reference for the GPT-2 split: the
// regexp for the first alternatives, and \s+(?!\S)|\s+ by trying every
// length of the whitespace run, longest first.
func refPieces(s string) []string {
	var out []string
	for len(s) > 0 {
		m := refHead.FindString(s)
		if m == "" {
			run := refWS.FindString(s)
			if run == "" {
				panic(fmt.Sprintf("nothing matches at %q", s))
			}
			m = run // \s+ when \s+(?!\S) fails
			for k := len(run); k > 0; {
				rest := s[k:]
				if r, _ := utf8.DecodeRuneInString(rest); rest == "" || unicode.IsSpace(r) {
					m = run[:k]
					break
				}
				_, n := utf8.DecodeLastRuneInString(run[:k])
				k -= n
			}
		}
		out = append(out, m)
		s = s[len(m):]
	}
	return out
}

// FuzzPreTokenize compares the hand-written scanner with the regexp
// reference.
func FuzzPreTokenize(f *testing.F) {
	for _, s := range []string{"Hello, my name is", "\n\nHuman: hi", "a  \t\u00a0 b", "it's IT'S 's", "x²³ 日本 👍🏽", "\u0085\ufeff \u3000x", "'''s", "12 345\n\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, want := pieces(s), refPieces(s)
		if !slices.Equal(got, want) {
			t.Fatalf("pieces(%q) = %q, reference %q", s, got, want)
		}
	})
}
