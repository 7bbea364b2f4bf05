package tokenizer

import (
	"strings"
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

// The Split patterns of real tokenizer.json files that have hand-written
// scanners; any other pattern goes to regexSplit.
const (
	// patternGPT2 is GPT-2's pattern, which some files spell out in a Split.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// patternLlama3 is Llama-3's (tiktoken's cl100k_base) pattern.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternQwen2 is Qwen2's (Qwen2, Qwen2.5, Qwen3): Llama-3's with one
	// digit per piece.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// llamaNext returns the end of the pre-token that starts at s[i] (i <
// len(s)) under Llama-3's pattern (maxDigits 3) or Qwen2's (maxDigits 1),
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// as Oniguruma (Hugging Face's engine) matches it, leftmost-first. Every
// character is matched by some alternative, so the matches cover s. The
// alternatives in order:
//
//  1. a contraction, in any case ("'S", "'Ll"); Oniguruma's case folding
//     also takes U+017F (ſ) for s, which the JavaScript port does not;
//  2. a run of letters, with one character before it that is not \r, \n,
//     a letter or a number (" word", "\tword", ".Net", "'x");
//  3. up to maxDigits numbers;
//  4. an optional U+0020 space, a run of characters that are not
//     whitespace, letters or numbers, and the \r and \n after it;
//  5. a whitespace run up to and including its last \r or \n;
//  6. a whitespace run that reaches the end of s, or else the run without
//     its last character (which starts the next pre-token);
//  7. a single whitespace character.
func llamaNext(s string, i, maxDigits int) int {
	c := s[i]
	if c == '\'' && i+1 < len(s) {
		if n := foldContraction(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	cls, n := classAt(s, i)
	j := i + n
	switch cls {
	case clsLetter:
		return runEnd(s, j, clsLetter)
	case clsNumber:
		for k := 1; k < maxDigits && j < len(s); k++ {
			next, m := classAt(s, j)
			if next != clsNumber {
				break
			}
			j += m
		}
		return j
	}
	if c != '\r' && c != '\n' && j < len(s) {
		if next, m := classAt(s, j); next == clsLetter {
			return runEnd(s, j+m, clsLetter)
		}
	}
	if cls == clsOther {
		return newlinesEnd(s, runEnd(s, j, clsOther))
	}
	if c == ' ' && j < len(s) {
		if next, m := classAt(s, j); next == clsOther {
			return newlinesEnd(s, runEnd(s, j+m, clsOther))
		}
	}
	end, lastNL, last := j, -1, i
	if c == '\r' || c == '\n' {
		lastNL = i
	}
	for end < len(s) {
		k, m := classAt(s, end)
		if k != clsSpace {
			break
		}
		if s[end] == '\r' || s[end] == '\n' {
			lastNL = end
		}
		last = end
		end += m
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case end == len(s) || last == i:
		return end
	}
	return last
}

// foldContraction returns the length of the contraction suffix (what
// follows the apostrophe) at the start of s under Oniguruma's case-
// insensitive match of s|t|re|ve|m|ll|d, or 0.
func foldContraction(s string) int {
	if len(s) == 0 {
		return 0
	}
	switch s[0] | 0x20 {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(s) > 1 && s[1]|0x20 == 'e' {
			return 2
		}
	case 'l':
		if len(s) > 1 && s[1]|0x20 == 'l' {
			return 2
		}
	}
	if strings.HasPrefix(s, "\u017f") { // ſ, LATIN SMALL LETTER LONG S, folds to s
		return len("\u017f")
	}
	return 0
}

// newlinesEnd returns the end of the run of \r and \n at s[j].
func newlinesEnd(s string, j int) int {
	for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
		j++
	}
	return j
}
