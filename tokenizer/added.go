package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is a token that is matched in the raw text before
// pre-tokenization and kept whole: the special tokens (</s>, <pad>) and
// any other "added tokens" of a Hugging Face tokenizer.
type addedToken struct {
	content    string
	id         int32
	special    bool // skipped by Decode with skipSpecial
	singleWord bool // only matches when not inside a word
	lstrip     bool // swallows the whitespace before it
	rstrip     bool // swallows the whitespace after it
	normalized bool // matched in the normalized text (the second pass)
}

// addedMatcher finds added tokens in text: leftmost match first, and the
// longest token among those starting there (Hugging Face's aho-corasick
// with MatchKind::LeftmostLongest). Read-only after construction.
type addedMatcher struct {
	toks    []addedToken
	byFirst [256][]int // indices into toks by first byte, longest first
	first   []byte     // the distinct first bytes
}

func newAddedMatcher(toks []addedToken) *addedMatcher {
	m := &addedMatcher{toks: toks}
	for i, t := range toks {
		if t.content == "" {
			continue
		}
		c := t.content[0]
		if m.byFirst[c] == nil {
			m.first = append(m.first, c)
		}
		l := append(m.byFirst[c], i)
		for k := len(l) - 1; k > 0 && len(toks[l[k]].content) > len(toks[l[k-1]].content); k-- {
			l[k], l[k-1] = l[k-1], l[k]
		}
		m.byFirst[c] = l
	}
	return m
}

// find returns the leftmost-longest match in s at or after from, or ok false.
func (m *addedMatcher) find(s string, from int) (start, end int, tok *addedToken, ok bool) {
	for i := from; i < len(s); i++ {
		if len(m.first) == 1 {
			k := indexByteFrom(s, i, m.first[0])
			if k < 0 {
				return 0, 0, nil, false
			}
			i = k
		}
		for _, ti := range m.byFirst[s[i]] {
			t := &m.toks[ti]
			if len(s)-i >= len(t.content) && s[i:i+len(t.content)] == t.content {
				return i, i + len(t.content), t, true
			}
		}
	}
	return 0, 0, nil, false
}

func indexByteFrom(s string, i int, c byte) int {
	k := strings.IndexByte(s[i:], c)
	if k < 0 {
		return -1
	}
	return i + k
}

// split appends to segs the pieces of s: text between matches and the
// matched added tokens, with Hugging Face's single_word, lstrip and rstrip
// rules (AddedVocabulary::split_with_indices). atStart says whether s
// starts at the beginning of the input; so does the first text piece if
// nothing precedes it.
func (m *addedMatcher) split(segs []segment, s string, atStart bool) []segment {
	if len(m.first) == 0 {
		return append(segs, segment{text: s, id: -1, atStart: atStart})
	}
	textStart := 0 // start of the text not yet emitted
	for from := 0; from < len(s); {
		start, end, tok, ok := m.find(s, from)
		if !ok {
			break
		}
		from = end
		if tok.singleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
			continue
		}
		if tok.lstrip {
			for start > textStart {
				r, n := utf8.DecodeLastRuneInString(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= n
			}
		}
		if tok.rstrip {
			for end < len(s) {
				r, n := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += n
			}
			from = end
		}
		if start > textStart {
			segs = append(segs, segment{text: s[textStart:start], id: -1, atStart: atStart && textStart == 0})
		}
		segs = append(segs, segment{id: tok.id})
		textStart = end
	}
	if textStart < len(s) {
		segs = append(segs, segment{text: s[textStart:], id: -1, atStart: atStart && textStart == 0})
	}
	return segs
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}
