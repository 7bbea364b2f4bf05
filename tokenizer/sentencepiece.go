package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// sentencePieceBPE is BPE over characters, as the SentencePiece models of
// Llama-2, TinyLlama and Mistral are written in tokenizer.json: a piece's
// characters are the initial symbols (each looked up as a one-character
// token), a character that is not in the vocabulary becomes its UTF-8
// bytes as <0xXX> tokens (byte_fallback) or the unknown token, and merges
// join adjacent symbols, lowest rank first (the same merge loop as
// byteLevelBPE). Spaces are written "▁", either by a Prepend + Replace
// normalizer (TinyLlama) or by the Metaspace pre-tokenizer (Mistral).
// Read-only after construction.
type sentencePieceBPE struct {
	merges       *mergeTable
	ids          map[string]int32 // the model's vocabulary
	ascii        [utf8.RuneSelf]int32
	chars        map[rune]int32 // one-character tokens beyond ASCII
	byteFallback bool
	byteTok      [256]int32 // <0xXX> tokens, -1 when absent
	unk          int32      // -1: none
	fuseUnk      bool
	ignoreMerges bool
	meta         *metaspace // the Metaspace pre-tokenizer, or nil
	splits       []splitter // Metaspace's split, when set
	// wordSplit says that a piece may be cut before every "▁" that follows
	// another character without changing the ids: no merge builds a token
	// with "▁" after another character, "▁" is in the vocabulary (so it
	// never fuses with an unknown character) and ignore_merges is off.
	// Real Llama-2 and Mistral files qualify; it turns one long word per
	// text (TinyLlama has no pre-tokenizer) into cacheable words.
	wordSplit bool
	tokens    []string // id -> token, added tokens included (decoder)
	dec       decodeChain
}

// prependScheme says where Metaspace puts a "▁" in front of a piece.
type prependScheme uint8

const (
	prependAlways prependScheme = iota // every piece
	prependFirst                       // the piece at the start of the input only
	prependNever
)

// metaspace is the Metaspace pre-tokenizer's rewriting: spaces become rep,
// and rep is put in front of a piece that does not start with it
// according to scheme.
type metaspace struct {
	rep    string
	scheme prependScheme
}

// apply rewrites s; atStart says whether s starts at the beginning of the
// input (Hugging Face: its original offset is 0).
func (m *metaspace) apply(s string, atStart bool) string {
	s = strings.ReplaceAll(s, " ", m.rep)
	if !strings.HasPrefix(s, m.rep) && (m.scheme == prependAlways || (m.scheme == prependFirst && atStart)) {
		s = m.rep + s
	}
	return s
}

// metaspaceSettings reads replacement and prepend_scheme (or the older
// add_prefix_space) of a Metaspace pre-tokenizer or decoder, as Hugging
// Face does: prepend_scheme defaults to always, and add_prefix_space false
// requires prepend_scheme never or none.
func metaspaceSettings(rep, scheme *string, addPrefixSpace *bool, field string) (string, prependScheme, error) {
	if rep == nil || utf8.RuneCountInString(*rep) != 1 {
		return "", 0, fmt.Errorf("%s: Metaspace replacement must be one character", field)
	}
	ps := prependAlways
	if scheme != nil {
		switch *scheme {
		case "always":
		case "first":
			ps = prependFirst
		case "never":
			ps = prependNever
		default:
			return "", 0, fmt.Errorf("%s: Metaspace prepend_scheme %q is not always, first or never", field, *scheme)
		}
	}
	if addPrefixSpace != nil && !*addPrefixSpace {
		if scheme != nil && ps != prependNever {
			return "", 0, fmt.Errorf("%s: Metaspace add_prefix_space false does not match prepend_scheme %q", field, *scheme)
		}
		ps = prependNever
	}
	return *rep, ps, nil
}

// newSentencePieceBPE builds the model from vocab (id -> token for every id,
// added tokens included), ids (the BPE model's own token -> id), merges in
// rank order, the options and the decoder.
func newSentencePieceBPE(vocab []string, ids map[string]int32, merges [][2]string, mergeAt func(rank int) string, opt bpeOptions, dec decodeChain) (*sentencePieceBPE, error) {
	m := &sentencePieceBPE{
		ids:          ids,
		chars:        map[rune]int32{},
		byteFallback: opt.byteFallback,
		unk:          -1,
		fuseUnk:      opt.fuseUnk,
		ignoreMerges: opt.ignoreMerges,
		meta:         opt.metaspace,
		tokens:       vocab,
		dec:          dec,
	}
	if m.meta != nil && opt.metaspaceSplit {
		m.splits = []splitter{metaspaceSplit{m.meta.rep}}
	}
	if opt.unk != "" {
		id, ok := ids[opt.unk]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", opt.unk)
		}
		m.unk = id
	}
	for i := range m.ascii {
		m.ascii[i] = -1
	}
	for tok, id := range ids {
		r, n := utf8.DecodeRuneInString(tok)
		if n != len(tok) || (r == utf8.RuneError && n == 1) {
			continue
		}
		if r < utf8.RuneSelf {
			m.ascii[r] = id
		} else {
			m.chars[r] = id
		}
	}
	for b := range 256 {
		m.byteTok[b] = -1
		if id, ok := ids[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTok[b] = id
		}
	}
	var err error
	m.merges, err = buildMerges(ids, merges, mergeAt)
	if err != nil {
		return nil, err
	}
	m.wordSplit = !m.ignoreMerges && m.charID('\u2581') >= 0
	for _, p := range merges {
		if t := p[0] + p[1]; strings.Contains(strings.TrimLeft(t, spaceMark), spaceMark) {
			m.wordSplit = false
			break
		}
	}
	return m, nil
}

// spaceMark is SentencePiece's space, U+2581 LOWER ONE EIGHTH BLOCK.
const spaceMark = "\u2581"

// cutWords appends the pieces of s cut before every spaceMark that follows
// another character.
func cutWords(dst []string, s string) []string {
	start := 0
	for i := 0; i < len(s); {
		k := strings.Index(s[i:], spaceMark)
		if k < 0 {
			break
		}
		at := i + k
		if at > start && !strings.HasSuffix(s[:at], spaceMark) {
			dst = append(dst, s[start:at])
			start = at
		}
		i = at + len(spaceMark)
	}
	return append(dst, s[start:])
}

func (m *sentencePieceBPE) encode(dst []int32, text string, atStart bool, st *encodeState) []int32 {
	if text == "" {
		return dst
	}
	if m.meta != nil {
		text = m.meta.apply(text, atStart)
	}
	if len(m.splits) == 0 && !m.wordSplit {
		return m.word(dst, text, st)
	}
	var pieces []string
	pieces, st.spare = splitAll(m.splits, text, st.pieces, st.spare)
	if m.wordSplit {
		words := st.spare[:0]
		for _, p := range pieces {
			words = cutWords(words, p)
		}
		clear(pieces)
		pieces, st.spare = words, pieces[:0]
	}
	for _, p := range pieces {
		dst = m.word(dst, p, st)
	}
	clear(pieces)
	st.pieces = pieces[:0]
	return dst
}

// charID returns the id of the one-character token r, or -1.
func (m *sentencePieceBPE) charID(r rune) int32 {
	if r < utf8.RuneSelf {
		return m.ascii[r]
	}
	if id, ok := m.chars[r]; ok {
		return id
	}
	return -1
}

// word appends the ids of one piece, as Hugging Face's BPE::merge_word
// builds and merges it (including its order for an unknown character
// pending before a byte-fallback one).
func (m *sentencePieceBPE) word(dst []int32, w string, st *encodeState) []int32 {
	if ids, ok := st.cache.get(w); ok {
		return append(dst, ids...)
	}
	if m.ignoreMerges {
		if id, ok := m.ids[w]; ok {
			st.cache.put(w, []int32{id})
			return append(dst, id)
		}
	}
	syms := st.syms[:0]
	pendingUnk := false
	for i, r := range w {
		if id := m.charID(r); id >= 0 {
			if pendingUnk {
				syms = append(syms, m.unk)
				pendingUnk = false
			}
			syms = append(syms, id)
			continue
		}
		size := utf8.RuneLen(r) // w is valid UTF-8
		if m.byteFallback && m.hasBytes(w[i:i+size]) {
			for k := i; k < i+size; k++ {
				syms = append(syms, m.byteTok[w[k]])
			}
			continue
		}
		if m.unk >= 0 {
			if pendingUnk && !m.fuseUnk {
				syms = append(syms, m.unk)
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		syms = append(syms, m.unk)
	}
	st.syms = syms
	merged := m.merges.merge(syms, &st.merge)
	st.cache.put(w, merged)
	return append(dst, merged...)
}

// hasBytes reports whether every byte of s has a <0xXX> token.
func (m *sentencePieceBPE) hasBytes(s string) bool {
	for k := 0; k < len(s); k++ {
		if m.byteTok[s[k]] < 0 {
			return false
		}
	}
	return true
}

// decode runs the decoder chain on the tokens of ids.
func (m *sentencePieceBPE) decode(dst []byte, ids []int32) []byte {
	toks := make([]string, len(ids))
	for i, id := range ids {
		toks[i] = m.tokens[id]
	}
	text := m.dec.decode(toks)
	if utf8.ValidString(text) {
		return append(dst, text...)
	}
	return appendValidUTF8(dst, []byte(text))
}
