package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestOPTReference checks the examples of REFERENCE.md §2 on both loading
// routes.
func TestOPTReference(t *testing.T) {
	cases := []struct {
		name       string
		text       string
		addSpecial bool
		want       []int32
	}{
		{"known OPT ids", "Hello, my name is", true, []int32{2, 31414, 6, 127, 766, 16}},
		{"BOS only with addSpecial", "Hello, my name is", false, []int32{31414, 6, 127, 766, 16}},
		{"whitespace lookahead: two Ċ, never ĊĊ", "\n\nHuman:", false, []int32{50118, 50118, 33837, 35}},
		{"whitespace lookahead after BOS", "\n\nHuman:", true, []int32{2, 50118, 50118, 33837, 35}},
		{"<|endoftext|> is 7 ordinary tokens", "<|endoftext|>", false, []int32{41552, 15483, 1397, 1116, 29015, 15483, 15698}},
		{"Ġ1000 is one token", " 1000", false, []int32{10775}},
		{"Hmmm is H, mmm (lowest rank, then leftmost)", "Hmmm", false, []int32{725, 41311}},
		{"</s> in text is kept as its id", "a</s>b", false, []int32{102, 2, 428}},
		{"<pad> in text is kept as its id", "<pad><pad>", true, []int32{2, 1, 1}},
		{"<s> is not special for OPT", "<s>", false, []int32{41552, 29, 15698}},
		{"empty text", "", true, []int32{2}},
		{"empty text without BOS", "", false, nil},
	}
	for _, route := range routes {
		tk := loadOPT(t, route)
		for _, c := range cases {
			if got := tk.Encode(c.text, c.addSpecial); !slices.Equal(got, c.want) {
				t.Errorf("%s: %s: Encode(%q, %v) = %v, want %v", route, c.name, c.text, c.addSpecial, got, c.want)
			}
		}
		if tok, _ := tk.IDToken(725); tok != "H" {
			t.Errorf("%s: IDToken(725) = %q, want H", route, tok)
		}
		if id, ok := tk.TokenID("mmm"); id != 41311 || !ok {
			t.Errorf("%s: TokenID(mmm) = %d, %v", route, id, ok)
		}
	}
}

// TestOPTSpecials checks the special token ids, the template and the
// vocabulary size, which must not depend on the loading route.
func TestOPTSpecials(t *testing.T) {
	for _, route := range routes {
		tk := loadOPT(t, route)
		for _, c := range []struct {
			name string
			fn   func() (int32, bool)
			want int32
		}{{"BOS", tk.BOS, 2}, {"EOS", tk.EOS, 2}, {"PAD", tk.PAD, 1}, {"UNK", tk.UNK, 2}} {
			if id, ok := c.fn(); id != c.want || !ok {
				t.Errorf("%s: %s = %d, %v; want %d", route, c.name, id, ok, c.want)
			}
		}
		pre, suf := tk.Template()
		if !slices.Equal(pre, []int32{2}) || len(suf) != 0 {
			t.Errorf("%s: template %v $A %v, want [2] $A []", route, pre, suf)
		}
		if tk.VocabSize() != 50265 {
			t.Errorf("%s: VocabSize %d, want 50265", route, tk.VocabSize())
		}
		for id := range int32(4) {
			if want := id == 1 || id == 2; tk.IsSpecial(id) != want {
				t.Errorf("%s: IsSpecial(%d) = %v", route, id, !want)
			}
		}
	}
	a, b := loadOPT(t, routes[0]), loadOPT(t, routes[1])
	if !slices.Equal(a.vocab, b.vocab) || !slices.Equal(a.special, b.special) {
		t.Error("the two routes give different vocabularies or special tokens")
	}
}

// TestOPTWhitespaceRust pins the two characters on which JavaScript's \s
// and Hugging Face's (Rust, Oniguruma: Unicode White_Space) disagree, so
// the JavaScript golden file leaves them out: U+0085 is whitespace, U+FEFF
// is not. The ids must be those of the pieces the Rust pattern makes.
func TestOPTWhitespaceRust(t *testing.T) {
	tk := loadOPT(t, routes[0])
	cases := []struct {
		text   string
		pieces []string
	}{
		{"a\u0085\u0085b", []string{"a", "\u0085", "\u0085", "b"}},
		{"a \u0085", []string{"a", " \u0085"}},
		{"\u0085 b", []string{"\u0085", " b"}},
		{" \ufeffb", []string{" \ufeff", "b"}},
		{"a\ufeff\ufeff b", []string{"a", "\ufeff\ufeff", " b"}},
		{"\ufeff\n", []string{"\ufeff", "\n"}},
	}
	for _, c := range cases {
		var want []int32
		for _, p := range c.pieces {
			want = append(want, tk.Encode(p, false)...)
		}
		if got := tk.Encode(c.text, false); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v (pieces %q)", c.text, got, want, c.pieces)
		}
	}
}

// TestDecode checks Decode with and without special tokens, ill-formed
// byte sequences and bad ids.
func TestDecode(t *testing.T) {
	tk := loadOPT(t, routes[0])
	ids := tk.Encode("Hi</s> there<pad>", true)
	for _, c := range []struct {
		skip bool
		want string
	}{{false, "</s>Hi</s> there<pad>"}, {true, "Hi there"}} {
		if got, err := tk.Decode(ids, c.skip); got != c.want || err != nil {
			t.Errorf("Decode(%v, %v) = %q, %v; want %q", ids, c.skip, got, err, c.want)
		}
	}
	// "𝕏" (4 bytes) is several byte tokens; a part alone is ill-formed
	// UTF-8, one maximal subpart.
	x := tk.Encode("\U0001D54F", false)
	if len(x) < 2 {
		t.Fatalf("𝕏 is %v, want several byte tokens", x)
	}
	if got, _ := tk.Decode(x[:1], false); got != "\uFFFD" {
		t.Errorf("the first token of 𝕏 decodes to %q, want U+FFFD", got)
	}
	if got, _ := tk.Decode(slices.Concat(x[:1], []int32{725}, x[1:]), false); !strings.HasPrefix(got, "\uFFFDH\uFFFD") {
		t.Errorf("split 𝕏 decodes to %q", got)
	}
	for _, bad := range [][]int32{{-1}, {50265}, {31414, 1 << 30}} {
		if _, err := tk.Decode(bad, false); err == nil || !strings.Contains(err.Error(), "not in the vocabulary") {
			t.Errorf("Decode(%v): error %v", bad, err)
		}
	}
}

// TestInvalidUTF8 checks that ill-formed input is encoded as its repaired
// text.
func TestInvalidUTF8(t *testing.T) {
	tk := loadOPT(t, routes[0])
	for _, s := range []string{"a\xffb", "\xe2\x82A", "\xed\xa0\x80x", "ok\xf0\x9f\x98", "\x80\x80"} {
		fixed := string(appendValidUTF8(nil, []byte(s)))
		got := tk.Encode(s, false)
		if want := tk.Encode(fixed, false); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v (the ids of %q)", s, got, want, fixed)
		}
		if text, _ := tk.Decode(got, false); text != fixed || !utf8.ValidString(text) {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", s, text, fixed)
		}
	}
}

// TestEncodeBatch checks that batches give the ids of Encode, in order, for
// any number of workers.
func TestEncodeBatch(t *testing.T) {
	tk := loadOPT(t, routes[0])
	texts := []string{"", "a", "Hello, my name is", "\n\nHuman: hi\n\nAssistant:", "</s>", strings.Repeat("long ", 500)}
	for len(texts) < 100 {
		texts = append(texts, texts[len(texts)%6]+texts[len(texts)%5])
	}
	for _, workers := range []int{0, 1, 2, 3, 64} {
		got := tk.EncodeBatch(texts, true, workers)
		for i, s := range texts {
			if want := tk.Encode(s, true); !slices.Equal(got[i], want) {
				t.Fatalf("workers %d: text %d: %v, want %v", workers, i, got[i], want)
			}
		}
	}
	if got := tk.EncodeBatch(nil, true, 4); len(got) != 0 {
		t.Errorf("EncodeBatch(nil) = %v", got)
	}
}
