package tokenizer

import (
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
)

// splitter is one splitting step of a pre-tokenizer (a Split, Digits or
// Metaspace with split in tokenizer.json): it appends the pieces of s to
// dst, in order. Pieces are non-empty substrings of s. Implementations are
// read-only and safe for concurrent use.
type splitter interface {
	split(dst []string, s string) []string
}

// scanSplit splits with a scanner: next(s, i) is the end of the piece that
// starts at s[i], and the pieces cover s (GPT-2's, Llama-3's and Qwen2's
// patterns, all of whose matches are contiguous).
type scanSplit struct {
	name string
	next func(s string, i int) int
}

func (p scanSplit) split(dst []string, s string) []string {
	for i := 0; i < len(s); {
		j := p.next(s, i)
		dst = append(dst, s[i:j])
		i = j
	}
	return dst
}

// knownSplit returns the scanner for a Split pattern that has one.
func knownSplit(pattern string) (scanSplit, bool) {
	switch pattern {
	case patternGPT2:
		return scanSplit{"gpt2", gpt2Next}, true
	case patternLlama3:
		return scanSplit{"llama3", func(s string, i int) int { return llamaNext(s, i, 3) }}, true
	case patternQwen2:
		return scanSplit{"qwen2", func(s string, i int) int { return llamaNext(s, i, 1) }}, true
	}
	return scanSplit{}, false
}

// digitsSplit is the Digits pre-tokenizer: numbers (Rust's
// char::is_numeric, Unicode N: Nd, Nl, No) are split from the rest, each
// on its own with individual_digits, else in runs. (The JavaScript port
// takes \d, ASCII digits only.)
type digitsSplit struct{ individual bool }

func (p digitsSplit) split(dst []string, s string) []string {
	for i := 0; i < len(s); {
		cls, n := classAt(s, i)
		num := cls == clsNumber
		j := i + n
		if !num || !p.individual {
			for j < len(s) {
				c, m := classAt(s, j)
				if (c == clsNumber) != num {
					break
				}
				j += m
			}
		}
		dst = append(dst, s[i:j])
		i = j
	}
	return dst
}

// metaspaceSplit is the splitting part of the Metaspace pre-tokenizer with
// split true: every replacement character starts a new piece ("▁a▁▁b" is
// "▁a", "▁", "▁b"; Hugging Face's MergedWithNext).
type metaspaceSplit struct{ rep string }

func (p metaspaceSplit) split(dst []string, s string) []string {
	start := 0
	for i := 0; i < len(s); {
		k := strings.Index(s[i:], p.rep)
		if k < 0 {
			break
		}
		if i+k > start {
			dst = append(dst, s[start:i+k])
			start = i + k
		}
		i += k + len(p.rep)
	}
	if start < len(s) {
		dst = append(dst, s[start:])
	}
	return dst
}

// regexSplit is a Split pre-tokenizer with a pattern that has no scanner,
// run by github.com/dlclark/regexp2 (a backtracking engine with lookaround,
// .NET syntax, which for the patterns of tokenizer files is Oniguruma's).
// Behaviour Isolated keeps matches and the text between them as pieces;
// Removed keeps only the text between matches (with invert, only the
// matches). Empty pieces are dropped, as in Hugging Face.
type regexSplit struct {
	re      *regexp2.Regexp
	removed bool
	invert  bool
}

func newRegexSplit(pattern, behavior string, invert bool) (*regexSplit, error) {
	switch behavior {
	case "Isolated", "Removed":
	default:
		return nil, fmt.Errorf("behavior %q is not supported (want Isolated or Removed)", behavior)
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	return &regexSplit{re: re, removed: behavior == "Removed", invert: invert}, nil
}

func (p *regexSplit) split(dst []string, s string) []string {
	runes := []rune(s)
	// off[k] is the byte offset of runes[k]; off[len(runes)] = len(s).
	off := make([]int, 0, len(runes)+1)
	for i := range s {
		off = append(off, i)
	}
	off = append(off, len(s))
	keep := func(a, b int, match bool) {
		if a == b || (p.removed && match != p.invert) {
			return
		}
		dst = append(dst, s[a:b])
	}
	prev := 0
	m, err := p.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		a, b := off[m.Index], off[m.Index+m.Length]
		keep(prev, a, false)
		keep(a, b, true)
		prev = b
		m, err = p.re.FindNextMatch(m)
	}
	// err is only a match timeout, and none is set.
	keep(prev, len(s), false)
	return dst
}

// splitAll applies the steps in order to s: each to every piece of the
// step before. buf and tmp are scratch slices; the pieces are returned in
// one of them.
func splitAll(steps []splitter, s string, buf, tmp []string) (pieces, spare []string) {
	pieces = append(buf[:0], s)
	for _, st := range steps {
		tmp = tmp[:0]
		for _, p := range pieces {
			tmp = st.split(tmp, p)
		}
		pieces, tmp = tmp, pieces
	}
	return pieces, tmp
}
