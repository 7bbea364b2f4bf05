package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the GPT-2 pre-tokenizer: \p{L}, \p{N}, \s (Unicode
// White_Space, which is what unicode.IsSpace tests) and everything else.
const (
	clsOther uint8 = iota
	clsLetter
	clsNumber
	clsSpace
)

// asciiClass is the class of each ASCII byte; a read-only lookup table.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = clsLetter
		case unicode.IsNumber(r):
			t[c] = clsNumber
		case unicode.IsSpace(r):
			t[c] = clsSpace
		}
	}
	return t
}()

// classAt returns the class of the rune starting at s[i] and its length in
// bytes. s must be valid UTF-8 at i (a stray byte counts as clsOther).
func classAt(s string, i int) (cls uint8, size int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case 0x4E00 <= r && r <= 0x9FFF, 0xAC00 <= r && r <= 0xD7A3, 0x3041 <= r && r <= 0x3096, 0x30A1 <= r && r <= 0x30FA:
		// CJK unified ideographs, Hangul syllables, hiragana, katakana:
		// all letters; a fast path for the commonest non-Latin text.
		return clsLetter, n
	case unicode.IsLetter(r):
		return clsLetter, n
	case unicode.IsNumber(r):
		return clsNumber, n
	case unicode.IsSpace(r):
		return clsSpace, n
	}
	return clsOther, n
}

// runEnd returns the end of the run of class cls that continues at s[j].
func runEnd(s string, j int, cls uint8) int {
	for j < len(s) {
		c := s[j]
		if c < utf8.RuneSelf {
			if asciiClass[c] != cls {
				return j
			}
			j++
			continue
		}
		k, n := classAt(s, j)
		if k != cls {
			return j
		}
		j += n
	}
	return j
}

// gpt2Next returns the end of the pre-token that starts at s[i] (i <
// len(s)), splitting s exactly as GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// does under leftmost-first alternation (Oniguruma, Python's regex module,
// JavaScript). Go's regexp has no lookahead, so this is a hand-written
// scanner. The alternatives in order:
//
//  1. the seven lower-case contractions, even inside a word ("'S" is not one);
//  2. an optional U+0020 space and a run of letters, numbers, or other
//     characters (not letter, number or whitespace; "'" is one);
//  3. a whitespace run that reaches the end of s, or else the run without
//     its last character, which starts the next pre-token (so
//     "\n\nHuman" is "\n", "\n", "Human" and "a  b" is "a", " ", " b");
//  4. a single whitespace character before a non-space, when it is not a
//     U+0020 that alternative 2 takes ("\tb" is "\t", "b").
//
// The pieces cover s without gaps, so joining them gives s back.
func gpt2Next(s string, i int) int {
	c := s[i]
	if c == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	cls, n := classAt(s, i)
	j := i + n
	if cls != clsSpace {
		return runEnd(s, j, cls)
	}
	if c == ' ' && j < len(s) {
		if next, m := classAt(s, j); next != clsSpace {
			return runEnd(s, j+m, next)
		}
	}
	last := i // start of the run's last character
	for j < len(s) {
		k, m := classAt(s, j)
		if k != clsSpace {
			break
		}
		last = j
		j += m
	}
	if j == len(s) || last == i {
		return j
	}
	return last
}
