package tokenizer

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Tokenizer turns text into token ids and back, exactly as the Hugging Face
// tokenizer it was loaded from. Its vocabulary and rules do not change
// after loading, and it is safe for concurrent use. Use it by pointer.
type Tokenizer struct {
	model   model
	norm    normalizer       // nil: none
	vocab   []string         // id -> token; "" for ids that have none
	ids     map[string]int32 // token -> id: the model vocabulary, then added tokens
	special []bool           // by id: a special token (skipped by Decode with skipSpecial)
	// Added tokens are found in the text in two passes, as in Hugging Face:
	// first the tokens with normalized false, then, within the remaining
	// text, those with normalized true.
	rawAdded, normAdded *addedMatcher
	prefix, suffix      []int32          // post-processing template around the text
	bos, eos, pad, unk  int32            // -1 when the tokenizer has none
	eosIDs              []int32          // eos, then generation_config.json's eos_token_id
	names               map[string]int32 // special tokens by transformers attribute name
	states              statePool
}

// Encode returns the token ids of text. With addSpecial it adds the special
// tokens of the tokenizer's post-processing template around them (for OPT:
// BOS </s> in front, nothing after), as Hugging Face's encode(text,
// add_special_tokens=True). Added tokens that occur in text ("</s>",
// "<pad>") are kept as their ids either way.
//
// Ill-formed UTF-8 in text is first replaced by U+FFFD, one per maximal
// subpart (as Rust's from_utf8_lossy, Python's bytes.decode(errors=
// "replace") and JavaScript's TextDecoder do), so the ids are those of the
// text a Hugging Face tokenizer would have been given; decoding them gives
// that repaired text.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	return t.AppendEncode(nil, text, addSpecial)
}

// AppendEncode is Encode appending the ids to dst.
func (t *Tokenizer) AppendEncode(dst []int32, text string, addSpecial bool) []int32 {
	st := t.states.get()
	dst = t.appendEncode(dst, text, addSpecial, st)
	t.states.put(st)
	return dst
}

func (t *Tokenizer) appendEncode(dst []int32, text string, addSpecial bool, st *encodeState) []int32 {
	if !utf8.ValidString(text) {
		text = string(appendValidUTF8(nil, []byte(text)))
	}
	if addSpecial {
		dst = append(dst, t.prefix...)
	}
	segs := t.rawAdded.split(st.segs[:0], text, true)
	if t.norm != nil || len(t.normAdded.first) > 0 {
		// Hugging Face normalizes each piece the first pass leaves, then
		// finds the tokens with normalized true in the normalized piece.
		n := len(segs)
		for i := range n {
			s := segs[i]
			if s.id >= 0 {
				segs = append(segs, s)
				continue
			}
			if t.norm != nil {
				s.text = t.norm.normalize(s.text)
			}
			segs = t.normAdded.split(segs, s.text, s.atStart)
		}
		segs = append(segs[:0], segs[n:]...)
	}
	for _, s := range segs {
		if s.id >= 0 {
			dst = append(dst, s.id)
		} else {
			dst = t.model.encode(dst, s.text, s.atStart, st)
		}
	}
	clear(segs) // drop references to text
	st.segs = segs[:0]
	if addSpecial {
		dst = append(dst, t.suffix...)
	}
	return dst
}

// EncodeBatch encodes texts on workers goroutines (0: GOMAXPROCS) and
// returns their ids in order. Each worker has its own word cache, so the
// speed-up is close to linear in the number of cores.
func (t *Tokenizer) EncodeBatch(texts []string, addSpecial bool, workers int) [][]int32 {
	out := make([][]int32, len(texts))
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	const chunk = 8 // texts a worker takes at a time
	workers = min(workers, (len(texts)+chunk-1)/chunk)
	var next atomic.Int64
	work := func() {
		st := t.states.get()
		defer t.states.put(st)
		var buf, arena []int32
		for {
			lo := int(next.Add(chunk)) - chunk
			if lo >= len(texts) {
				return
			}
			for i := lo; i < min(lo+chunk, len(texts)); i++ {
				buf = t.appendEncode(buf[:0], texts[i], addSpecial, st)
				// Results are carved out of shared blocks: one allocation
				// per many texts instead of one per text.
				if len(buf) > cap(arena)-len(arena) {
					arena = make([]int32, 0, max(len(buf), 1<<14))
				}
				k := len(arena)
				arena = append(arena, buf...)
				out[i] = arena[k:len(arena):len(arena)]
			}
		}
	}
	if workers <= 1 {
		work()
		return out
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(work)
	}
	wg.Wait()
	return out
}

// Decode returns the text of ids, as Hugging Face's decode(ids,
// skip_special_tokens=skipSpecial) does (with no clean-up of spaces): for
// byte-level BPE the tokens' bytes joined, ill-formed UTF-8 replaced by
// U+FFFD, so Decode(Encode(x, false), false) == x for valid UTF-8 x when
// there is no normalizer (OPT); for SentencePiece-style BPE the decoder
// chain of tokenizer.json ("▁" to space, <0xXX> bytes joined, the first
// leading space stripped). An id outside the vocabulary is an error
// (Hugging Face drops it silently).
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) (string, error) {
	for i, id := range ids {
		if id < 0 || int(id) >= len(t.vocab) || t.vocab[id] == "" {
			return "", fmt.Errorf("decode: id %d at position %d is not in the vocabulary (%d ids)", id, i, len(t.vocab))
		}
	}
	keep := ids
	if skipSpecial {
		keep = make([]int32, 0, len(ids))
		for _, id := range ids {
			if !t.special[id] {
				keep = append(keep, id)
			}
		}
	}
	return string(t.model.decode(nil, keep)), nil
}

// VocabSize is the number of ids, model vocabulary and added tokens
// (OPT: 50265; the model's embedding is padded to 50272).
func (t *Tokenizer) VocabSize() int { return len(t.vocab) }

// TokenID returns the id of a token (in its vocabulary spelling: "Ġthe"
// for " the").
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	id, ok := t.ids[token]
	return id, ok
}

// IDToken returns the token of an id, in its vocabulary spelling.
func (t *Tokenizer) IDToken(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.vocab) || t.vocab[id] == "" {
		return "", false
	}
	return t.vocab[id], true
}

// IsSpecial reports whether id is a special token (skipped by Decode with
// skipSpecial).
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// BOS returns the beginning-of-sequence id (OPT: </s> = 2).
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// EOS returns the end-of-sequence id (OPT: </s> = 2).
func (t *Tokenizer) EOS() (int32, bool) { return t.eos, t.eos >= 0 }

// PAD returns the padding id (OPT: <pad> = 1).
func (t *Tokenizer) PAD() (int32, bool) { return t.pad, t.pad >= 0 }

// UNK returns the unknown-token id (OPT: </s> = 2).
func (t *Tokenizer) UNK() (int32, bool) { return t.unk, t.unk >= 0 }

// Template returns the ids Encode with addSpecial puts before and after the
// text (OPT: [2] and []). The slices must not be modified.
func (t *Tokenizer) Template() (prefix, suffix []int32) { return t.prefix, t.suffix }

// SpecialToken returns the content and id of a special token by its
// transformers attribute name: "bos_token", "eos_token", "unk_token",
// "pad_token", "sep_token", "cls_token" or "mask_token" (what chat
// templates read as bos_token and eos_token). ok is false when the
// tokenizer has no such token (Qwen2 has no bos_token; Mistral no
// pad_token).
func (t *Tokenizer) SpecialToken(name string) (content string, id int32, ok bool) {
	switch name {
	case "bos_token":
		id = t.bos
	case "eos_token":
		id = t.eos
	case "pad_token":
		id = t.pad
	case "unk_token":
		id = t.unk
	default:
		var found bool
		if id, found = t.names[name]; !found {
			return "", -1, false
		}
	}
	if id < 0 {
		return "", -1, false
	}
	return t.vocab[id], id, true
}

// EOSIDs returns the ids that end a generated sequence: EOS (when the
// tokenizer has one) and then the other ids of generation_config.json's
// eos_token_id (one id or a list, as Llama-3-Instruct's [128001, 128008,
// 128009]) when the directory has that file. The slice must not be
// modified.
func (t *Tokenizer) EOSIDs() []int32 { return t.eosIDs }

// PadOrEOS returns the padding id, or, when the tokenizer has no pad token
// (Llama-2, Mistral, Llama-3), EOS, as transformers users set
// tokenizer.pad_token = tokenizer.eos_token. ok is false when there is
// neither.
func (t *Tokenizer) PadOrEOS() (id int32, ok bool) {
	if t.pad >= 0 {
		return t.pad, true
	}
	return t.eos, t.eos >= 0
}
