package tokenizer

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestValidUTF8 checks the maximal-subpart replacement against Python's
// bytes.decode("utf-8", "replace"), which implements the same rule.
func TestValidUTF8(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain ascii", "plain ascii"},
		{"a\xffb", "a\uFFFDb"},
		{"\xe2\x82A", "\uFFFDA"},
		{"\xe2\x82", "\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate is not a subpart
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98\x80", "😀"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xf8\x88\x80\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\x80\xbf", "\uFFFD\uFFFD"},
		{"\xc2", "\uFFFD"},
		{"\xe1\x80\xe2\x82\xac", "\uFFFD€"},
		{"\xf1\x80\x80", "\uFFFD"},
		{"\uFFFD", "\uFFFD"},
	} {
		if got := string(appendValidUTF8(nil, []byte(c.in))); got != c.want {
			t.Errorf("appendValidUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// collapse turns every run of U+FFFD into one.
func collapse(s string) string { return fffdRuns.ReplaceAllString(s, "\uFFFD") }

var fffdRuns = regexp.MustCompile("\uFFFD+")

// FuzzValidUTF8 checks that the result is valid, that valid input is kept,
// and that the bytes replaced are those strings.ToValidUTF8 (one
// replacement per run of ill-formed bytes) replaces.
func FuzzValidUTF8(f *testing.F) {
	for _, s := range []string{"a\xffb", "\xe2\x82A", "\xed\xa0\x80", "héllo", "\xf4\x90\x80\x80"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := string(appendValidUTF8(nil, b))
		if !utf8.ValidString(got) {
			t.Fatalf("appendValidUTF8(%q) = %q is not valid UTF-8", b, got)
		}
		if utf8.Valid(b) && got != string(b) {
			t.Fatalf("appendValidUTF8 changed valid %q to %q", b, got)
		}
		if collapse(got) != collapse(strings.ToValidUTF8(string(b), "\uFFFD")) {
			t.Fatalf("appendValidUTF8(%q) = %q disagrees with strings.ToValidUTF8 on which bytes are ill-formed", b, got)
		}
	})
}
