package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// model is the part of a Tokenizer that differs between tokenizer families:
// how normalized text with no added token in it becomes ids
// (pre-tokenization and the subword model) and how ids become text again
// (the decoder). The Tokenizer around it handles added tokens, the
// normalizer, the post-processing template, batching and the pool of
// encode states. There are two implementations: byteLevelBPE (GPT-2, OPT,
// RoBERTa, Llama-3, Qwen2, SmolLM2) and sentencePieceBPE (Llama-2,
// TinyLlama, Mistral: characters, byte fallback to <0xXX> tokens, "▁").
type model interface {
	// encode appends the ids of text, which holds no added token, to dst.
	// atStart says whether text starts at the beginning of the input
	// (Metaspace's prepend_scheme "first").
	encode(dst []int32, text string, atStart bool, st *encodeState) []int32
	// decode appends the text of ids to dst. Every id is a valid id of the
	// vocabulary (model or added token); the result is valid UTF-8.
	decode(dst []byte, ids []int32) []byte
}

// byteLevelBPE is byte-level BPE (GPT-2): text is split by the splitting
// steps of the pre-tokenizer (Llama-3's and Qwen2's Split, Digits) and then
// by the ByteLevel step (GPT-2's pattern, unless use_regex is false), each
// piece's UTF-8 bytes become one symbol each (the vocabulary spells byte b
// as the rune byteLevelAlphabet()[b]), and merges join adjacent symbols,
// lowest rank first. Read-only after construction.
type byteLevelBPE struct {
	splits       []splitter // before the ByteLevel step
	byteID       [256]int32 // id of each single-byte token, -1 when absent
	merges       *mergeTable
	ids          map[string]int32 // vocabulary, for ignoreMerges
	alpha        [256]rune
	unk          int32 // id used for a byte with no token, or -1 to drop it
	fuseUnk      bool
	ignoreMerges bool     // a word that is in the vocabulary is one token
	prefixSpace  bool     // add_prefix_space: a piece not starting with ' ' gets one
	useRegex     bool     // split with the GPT-2 pattern; false: each piece is one word
	raw          []string // raw bytes of every id (decoder table)
}

// newByteLevelBPE builds the model from vocab (id -> token for every id,
// added tokens included, "" for unused ids; for the decoder), ids (the BPE
// model's own token -> id) and merges (pairs of tokens in rank order).
// mergeAt names the place of a merge in its file for error messages.
func newByteLevelBPE(vocab []string, ids map[string]int32, merges [][2]string, mergeAt func(rank int) string, opt bpeOptions) (*byteLevelBPE, error) {
	m := &byteLevelBPE{
		splits:       opt.splits,
		ids:          ids,
		alpha:        byteLevelAlphabet(),
		unk:          -1,
		fuseUnk:      opt.fuseUnk,
		ignoreMerges: opt.ignoreMerges,
		prefixSpace:  opt.addPrefixSpace,
		useRegex:     opt.useRegex,
	}
	if opt.unk != "" {
		id, ok := ids[opt.unk]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", opt.unk)
		}
		m.unk = id
	}
	for b := range 256 {
		m.byteID[b] = -1
		if id, ok := ids[string(m.alpha[b])]; ok {
			m.byteID[b] = id
		}
	}
	var err error
	m.merges, err = buildMerges(ids, merges, mergeAt)
	if err != nil {
		return nil, err
	}
	inv := make(map[rune]byte, 256)
	for b, r := range m.alpha {
		inv[r] = byte(b)
	}
	m.raw = make([]string, len(vocab))
	for id, tok := range vocab {
		m.raw[id] = string(byteLevelDecode(inv, tok))
	}
	return m, nil
}

// buildMerges makes the merge table of merges (pairs of tokens in rank
// order) over the vocabulary ids.
func buildMerges(ids map[string]int32, merges [][2]string, mergeAt func(rank int) string) (*mergeTable, error) {
	t := newMergeTable(len(merges))
	for rank, p := range merges {
		a, okA := ids[p[0]]
		b, okB := ids[p[1]]
		c, okC := ids[p[0]+p[1]]
		switch {
		case !okA:
			return nil, fmt.Errorf("%s: token %q is not in the vocabulary", mergeAt(rank), p[0])
		case !okB:
			return nil, fmt.Errorf("%s: token %q is not in the vocabulary", mergeAt(rank), p[1])
		case !okC:
			return nil, fmt.Errorf("%s: merged token %q is not in the vocabulary", mergeAt(rank), p[0]+p[1])
		}
		t.set(a, b, int32(rank), c)
	}
	return t, nil
}

// bpeOptions are the settings of a BPE model and its pre-tokenizer.
type bpeOptions struct {
	unk          string
	fuseUnk      bool
	ignoreMerges bool
	byteFallback bool
	// The pre-tokenizer: splitting steps, then ByteLevel (byteLevel true,
	// with its add_prefix_space and use_regex) or Metaspace (metaspace not
	// nil), or neither.
	splits         []splitter
	byteLevel      bool
	addPrefixSpace bool
	useRegex       bool
	metaspace      *metaspace
	metaspaceSplit bool
}

func (m *byteLevelBPE) encode(dst []int32, text string, _ bool, st *encodeState) []int32 {
	if text == "" {
		return dst
	}
	if len(m.splits) > 0 {
		var pieces []string
		pieces, st.spare = splitAll(m.splits, text, st.pieces, st.spare)
		for _, p := range pieces {
			dst = m.encodePiece(dst, p, st)
		}
		clear(pieces)
		st.pieces = pieces[:0]
		return dst
	}
	return m.encodePiece(dst, text, st)
}

// encodePiece is the ByteLevel step and the model on one piece.
func (m *byteLevelBPE) encodePiece(dst []int32, text string, st *encodeState) []int32 {
	if m.prefixSpace && text[0] != ' ' {
		text = " " + text
	}
	if !m.useRegex {
		return m.word(dst, text, st)
	}
	for i := 0; i < len(text); {
		j := gpt2Next(text, i)
		dst = m.word(dst, text[i:j], st)
		i = j
	}
	return dst
}

// word appends the ids of one pre-token w (raw bytes).
func (m *byteLevelBPE) word(dst []int32, w string, st *encodeState) []int32 {
	if len(w) == 1 {
		if id := m.byteID[w[0]]; id >= 0 {
			return append(dst, id)
		}
	}
	if ids, ok := st.cache.get(w); ok {
		return append(dst, ids...)
	}
	if m.ignoreMerges {
		if id, ok := m.ids[byteLevelString(&m.alpha, w)]; ok {
			st.cache.put(w, []int32{id})
			return append(dst, id)
		}
	}
	syms := st.syms[:0]
	for i := 0; i < len(w); i++ {
		id := m.byteID[w[i]]
		if id < 0 {
			if m.unk < 0 || (m.fuseUnk && len(syms) > 0 && syms[len(syms)-1] == m.unk) {
				continue
			}
			id = m.unk
		}
		syms = append(syms, id)
	}
	st.syms = syms
	merged := m.merges.merge(syms, &st.merge)
	st.cache.put(w, merged)
	return append(dst, merged...)
}

// decode is Hugging Face's ByteLevel decoder: the raw bytes of all tokens,
// joined, with ill-formed UTF-8 replaced as String::from_utf8_lossy does.
func (m *byteLevelBPE) decode(dst []byte, ids []int32) []byte {
	start := len(dst)
	for _, id := range ids {
		dst = append(dst, m.raw[id]...)
	}
	if utf8.Valid(dst[start:]) {
		return dst
	}
	fixed := appendValidUTF8(nil, dst[start:])
	return append(dst[:start], fixed...)
}
