package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dlclark/regexp2"
)

// File names in a Hugging Face model directory.
const (
	fileTokenizerJSON = "tokenizer.json"
	fileVocab         = "vocab.json"
	fileMerges        = "merges.txt"
	fileConfig        = "tokenizer_config.json"
	fileSpecialMap    = "special_tokens_map.json"
	fileAddedTokens   = "added_tokens.json"
	fileGenConfig     = "generation_config.json"
)

// Load reads the tokenizer of a Hugging Face model directory: tokenizer.json
// when it is there, else vocab.json + merges.txt (what the facebook/opt-*
// repositories ship). tokenizer_config.json and special_tokens_map.json are
// read when present, for the names of the BOS/EOS/PAD/UNK tokens and, with
// vocab.json + merges.txt, for the special tokens and add_bos_token.
func Load(dir string) (*Tokenizer, error) {
	if _, err := os.Stat(filepath.Join(dir, fileTokenizerJSON)); err == nil {
		return LoadTokenizerJSON(dir)
	}
	if _, err := os.Stat(filepath.Join(dir, fileVocab)); err != nil {
		return nil, fmt.Errorf("tokenizer: %s has neither %s nor %s (with %s)", dir, fileTokenizerJSON, fileVocab, fileMerges)
	}
	return LoadVocabMerges(dir)
}

// LoadTokenizerJSON reads dir/tokenizer.json (the "tokenizers" library's
// format), and tokenizer_config.json / special_tokens_map.json when present.
func LoadTokenizerJSON(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, fileTokenizerJSON)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	sp, err := parseTokenizerJSON(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	cfg, err := readConfigs(dir)
	if err != nil {
		return nil, err
	}
	cfg.applyNames(sp)
	t, err := build(sp)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", dir, err)
	}
	return t, nil
}

// LoadVocabMerges reads dir/vocab.json and dir/merges.txt as
// transformers' GPT2Tokenizer does (its tokenizer_class may also name
// RoBERTa or BART, which add <s> ... </s>), with the special tokens and
// add_bos_token / add_eos_token / add_prefix_space of
// tokenizer_config.json, special_tokens_map.json and added_tokens.json
// when present.
func LoadVocabMerges(dir string) (*Tokenizer, error) {
	vocabPath, mergesPath := filepath.Join(dir, fileVocab), filepath.Join(dir, fileMerges)
	data, err := os.ReadFile(vocabPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	vocab, err := parseVocab(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", vocabPath, err)
	}
	data, err = os.ReadFile(mergesPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	merges, lines, err := parseMerges(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", mergesPath, err)
	}
	cfg, err := readConfigs(dir)
	if err != nil {
		return nil, err
	}
	var added map[string]int64
	if data, err := readOptional(dir, fileAddedTokens); err != nil {
		return nil, err
	} else if data != nil {
		if err := json.Unmarshal(data, &added); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: want an object of token: id: %w", filepath.Join(dir, fileAddedTokens), err)
		}
	}
	sp, err := cfg.vocabMergesSpec(vocab, merges, added)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", dir, err)
	}
	sp.mergeAt = func(rank int) string { return fmt.Sprintf("%s: line %d", mergesPath, lines[rank]) }
	t, err := build(sp)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", dir, err)
	}
	return t, nil
}

// spec is what both loading routes produce and build turns into a
// Tokenizer.
type spec struct {
	vocab   map[string]int32 // the BPE model's vocabulary
	merges  [][2]string      // in rank order
	mergeAt func(rank int) string
	bpe     bpeOptions
	norm    normalizer
	// The decoder: ByteLevel (byte-level models) or a chain of others.
	dec    decodeChain
	added  []addedToken
	prefix []int32 // template ids around the text
	suffix []int32
	// Names of the BOS/EOS/PAD/UNK tokens ("" unknown). When a name is not
	// given, BOS is the template's first id, EOS its last, PAD the padding
	// id of tokenizer.json and UNK the model's unk_token.
	bos, eos, pad, unk string
	padID              int32 // -1 when none
	// names are all special tokens the configuration files name, by
	// transformers attribute ("sep_token": "</s>").
	names map[string]string
	// llamaTemplate, when set, replaces the post-processor's template by
	// [bos] $A [eos] from add_bos_token and add_eos_token, as transformers'
	// LlamaTokenizerFast does.
	llamaTemplate *[2]bool
	// stopIDs are generation_config.json's eos_token_id.
	stopIDs []int32
}

// maxIDSlack bounds the ids a file may use: every id must be below
// 2*(number of tokens)+maxIDSlack, so a corrupt id cannot make the id table
// huge.
const maxIDSlack = 1024

func build(sp *spec) (*Tokenizer, error) {
	n := len(sp.vocab) + len(sp.added)
	limit := int64(2*n + maxIDSlack)
	size := 0
	for tok, id := range sp.vocab {
		if id < 0 || int64(id) >= limit {
			return nil, fmt.Errorf("token %q has id %d, outside 0..%d", tok, id, limit-1)
		}
		size = max(size, int(id)+1)
	}
	for _, a := range sp.added {
		if a.id < 0 || int64(a.id) >= limit {
			return nil, fmt.Errorf("added token %q has id %d, outside 0..%d", a.content, a.id, limit-1)
		}
		if a.content == "" {
			return nil, fmt.Errorf("added token %d is empty", a.id)
		}
		size = max(size, int(a.id)+1)
	}
	t := &Tokenizer{
		vocab:   make([]string, size),
		ids:     make(map[string]int32, n),
		special: make([]bool, size),
		prefix:  sp.prefix,
		suffix:  sp.suffix,
		bos:     -1, eos: -1, pad: sp.padID, unk: -1,
	}
	for tok, id := range sp.vocab {
		// An id given to two tokens keeps the first in byte order, so that
		// loading is deterministic.
		if prev := t.vocab[id]; prev == "" || tok < prev {
			t.vocab[id] = tok
		}
		t.ids[tok] = id
	}
	var raw, norm []addedToken
	for _, a := range sp.added {
		t.vocab[a.id] = a.content
		t.ids[a.content] = a.id
		t.special[a.id] = a.special
		if a.normalized {
			// Matched in normalized text, so by its normalized content
			// (Hugging Face's AddedVocabulary normalizes it too).
			if sp.norm != nil {
				a.content = sp.norm.normalize(a.content)
			}
			norm = append(norm, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.norm = sp.norm
	t.rawAdded, t.normAdded = newAddedMatcher(raw), newAddedMatcher(norm)
	for _, id := range slices.Concat(sp.prefix, sp.suffix) {
		if id < 0 || int(id) >= size || t.vocab[id] == "" {
			return nil, fmt.Errorf("post_processor: template id %d is not in the vocabulary", id)
		}
	}
	mergeAt := sp.mergeAt
	if mergeAt == nil {
		mergeAt = func(rank int) string { return fmt.Sprintf("merge %d", rank) }
	}
	if sp.bpe.byteLevel {
		m, err := newByteLevelBPE(t.vocab, sp.vocab, sp.merges, mergeAt, sp.bpe)
		if err != nil {
			return nil, err
		}
		t.model, t.unk = m, m.unk
	} else {
		m, err := newSentencePieceBPE(t.vocab, sp.vocab, sp.merges, mergeAt, sp.bpe, sp.dec)
		if err != nil {
			return nil, err
		}
		t.model, t.unk = m, m.unk
	}
	for _, s := range []struct {
		name string
		dst  *int32
		what string
	}{{sp.bos, &t.bos, "bos_token"}, {sp.eos, &t.eos, "eos_token"}, {sp.pad, &t.pad, "pad_token"}, {sp.unk, &t.unk, "unk_token"}} {
		if s.name == "" {
			continue
		}
		id, ok := t.ids[s.name]
		if !ok {
			return nil, fmt.Errorf("%s %q (named in %s or %s) is not in the vocabulary", s.what, s.name, fileConfig, fileSpecialMap)
		}
		*s.dst = id
	}
	if sp.llamaTemplate != nil {
		t.prefix, t.suffix = nil, nil
		if sp.llamaTemplate[0] {
			if t.bos < 0 {
				return nil, fmt.Errorf("%s: add_bos_token is true but there is no bos_token", fileConfig)
			}
			t.prefix = []int32{t.bos}
		}
		if sp.llamaTemplate[1] {
			if t.eos < 0 {
				return nil, fmt.Errorf("%s: add_eos_token is true but there is no eos_token", fileConfig)
			}
			t.suffix = []int32{t.eos}
		}
	}
	t.names = map[string]int32{}
	for name, content := range sp.names {
		id, ok := t.ids[content]
		if !ok {
			return nil, fmt.Errorf("%s %q (named in %s or %s) is not in the vocabulary", name, content, fileConfig, fileSpecialMap)
		}
		t.names[name] = id
	}
	for _, id := range sp.stopIDs {
		if int(id) >= size || t.vocab[id] == "" {
			return nil, fmt.Errorf("%s: eos_token_id %d is not in the vocabulary", fileGenConfig, id)
		}
	}
	if sp.bos == "" && len(sp.prefix) > 0 {
		t.bos = sp.prefix[0]
	}
	if sp.eos == "" && len(sp.suffix) > 0 {
		t.eos = sp.suffix[len(sp.suffix)-1]
	}
	if t.eos >= 0 {
		t.eosIDs = append(t.eosIDs, t.eos)
	}
	for _, id := range sp.stopIDs {
		if !slices.Contains(t.eosIDs, id) {
			t.eosIDs = append(t.eosIDs, id)
		}
	}
	return t, nil
}

// parseTokenizerJSON reads the tokenizers library's JSON. Supported: a BPE
// model without dropout or subword prefixes (with or without byte
// fallback); the normalizers of normalize.go; pre-tokenizers made of Split,
// Digits and a final ByteLevel (byte-level BPE), or Metaspace or none
// (character BPE); the ByteLevel decoder for byte-level BPE and the chains
// of decoder.go for character BPE; TemplateProcessing, RobertaProcessing,
// BertProcessing, ByteLevel or no post-processor.
func parseTokenizerJSON(data []byte) (*spec, error) {
	var f struct {
		AddedTokens   []jsonAddedToken `json:"added_tokens"`
		Normalizer    *jsonNormalizer  `json:"normalizer"`
		PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
		PostProcessor json.RawMessage  `json:"post_processor"`
		Decoder       *jsonDecoder     `json:"decoder"`
		Model         json.RawMessage  `json:"model"`
		Padding       *struct {
			PadID *int64 `json:"pad_id"`
		} `json:"padding"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, jsonError(err)
	}
	sp := &spec{padID: -1}
	if f.Padding != nil && f.Padding.PadID != nil {
		id, err := checkID("padding.pad_id", *f.Padding.PadID)
		if err != nil {
			return nil, err
		}
		sp.padID = id
	}
	if err := parseModel(f.Model, sp); err != nil {
		return nil, err
	}
	for i, a := range f.AddedTokens {
		tok, err := a.token(fmt.Sprintf("added_tokens[%d]", i))
		if err != nil {
			return nil, err
		}
		sp.added = append(sp.added, tok)
	}
	var err error
	if sp.norm, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if err := parsePreTokenizer(f.PreTokenizer, &sp.bpe); err != nil {
		return nil, err
	}
	switch {
	case f.Decoder == nil:
		return nil, errors.New("decoder is missing")
	case f.Decoder.Type == "ByteLevel" && !sp.bpe.byteLevel:
		return nil, errors.New("decoder ByteLevel needs a ByteLevel pre-tokenizer")
	case f.Decoder.Type == "ByteLevel":
	case sp.bpe.byteLevel:
		return nil, fmt.Errorf("decoder %q is not supported with a ByteLevel pre-tokenizer (want ByteLevel)", f.Decoder.Type)
	default:
		if sp.dec, err = parseDecodeChain(f.Decoder, "decoder"); err != nil {
			return nil, err
		}
	}
	sp.prefix, sp.suffix, err = parsePostProcessor(f.PostProcessor, sp)
	return sp, err
}

func parseModel(raw json.RawMessage, sp *spec) error {
	if isNull(raw) {
		return errors.New("model is missing")
	}
	var m struct {
		Type                    *string           `json:"type"`
		Dropout                 *float64          `json:"dropout"`
		UnkToken                *string           `json:"unk_token"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		FuseUnk                 bool              `json:"fuse_unk"`
		ByteFallback            bool              `json:"byte_fallback"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Vocab                   json.RawMessage   `json:"vocab"`
		Merges                  []json.RawMessage `json:"merges"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("model: %w", jsonError(err))
	}
	switch {
	case m.Type != nil && *m.Type != "BPE":
		return fmt.Errorf("model type %q is not supported (want BPE)", *m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("model.dropout %v is not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	case m.Vocab == nil:
		return errors.New("model.vocab is missing")
	}
	vocab, err := parseVocab(m.Vocab)
	if err != nil {
		return fmt.Errorf("model.vocab: %w", err)
	}
	sp.vocab = vocab
	sp.merges = make([][2]string, len(m.Merges))
	for i, r := range m.Merges {
		// Older files write a merge as "a b", newer ones as ["a", "b"].
		var s string
		var pair []string
		switch {
		case json.Unmarshal(r, &s) == nil:
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return fmt.Errorf("model.merges[%d]: %q is not two tokens separated by a space", i, s)
			}
			sp.merges[i] = [2]string{a, b}
		case json.Unmarshal(r, &pair) == nil && len(pair) == 2:
			sp.merges[i] = [2]string{pair[0], pair[1]}
		default:
			return fmt.Errorf("model.merges[%d]: want \"a b\" or [\"a\", \"b\"], got %.40s", i, r)
		}
	}
	sp.mergeAt = func(rank int) string { return fmt.Sprintf("model.merges[%d]", rank) }
	sp.bpe.fuseUnk, sp.bpe.ignoreMerges, sp.bpe.byteFallback = m.FuseUnk, m.IgnoreMerges, m.ByteFallback
	if m.UnkToken != nil {
		sp.bpe.unk = *m.UnkToken
	}
	return nil
}

// jsonPreTokenizer is the union of the pre-tokenizer objects' fields.
type jsonPreTokenizer struct {
	Type             string             `json:"type"`
	Pretokenizers    []jsonPreTokenizer `json:"pretokenizers"`
	AddPrefixSpace   *bool              `json:"add_prefix_space"`
	UseRegex         *bool              `json:"use_regex"`
	Pattern          *jsonPattern       `json:"pattern"`
	Behavior         string             `json:"behavior"`
	Invert           bool               `json:"invert"`
	IndividualDigits bool               `json:"individual_digits"`
	Replacement      *string            `json:"replacement"`
	PrependScheme    *string            `json:"prepend_scheme"`
	Split            *bool              `json:"split"`
}

// parsePreTokenizer reads the pre_tokenizer section into opt: splitting
// steps (Split, Digits) followed by ByteLevel, or Metaspace alone, or
// none (null), in a Sequence or alone.
func parsePreTokenizer(raw json.RawMessage, opt *bpeOptions) error {
	if isNull(raw) {
		return nil
	}
	var p jsonPreTokenizer
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", jsonError(err))
	}
	type step struct {
		field string
		p     *jsonPreTokenizer
	}
	var steps []step
	var flatten func(p *jsonPreTokenizer, field string)
	flatten = func(p *jsonPreTokenizer, field string) {
		if p.Type != "Sequence" {
			steps = append(steps, step{field, p})
			return
		}
		for i := range p.Pretokenizers {
			flatten(&p.Pretokenizers[i], fmt.Sprintf("%s.pretokenizers[%d]", field, i))
		}
	}
	flatten(&p, "pre_tokenizer")
	for i, st := range steps {
		p, field := st.p, st.field
		if opt.byteLevel || opt.metaspace != nil {
			return fmt.Errorf("%s: %q after ByteLevel or Metaspace is not supported", field, p.Type)
		}
		switch p.Type {
		case "ByteLevel":
			opt.byteLevel = true
			opt.addPrefixSpace = p.AddPrefixSpace != nil && *p.AddPrefixSpace
			opt.useRegex = p.UseRegex == nil || *p.UseRegex
		case "Metaspace":
			if i > 0 {
				return fmt.Errorf("%s: Metaspace after other pre-tokenizers is not supported", field)
			}
			rep, scheme, err := metaspaceSettings(p.Replacement, p.PrependScheme, p.AddPrefixSpace, field)
			if err != nil {
				return err
			}
			opt.metaspace = &metaspace{rep: rep, scheme: scheme}
			opt.metaspaceSplit = p.Split == nil || *p.Split
		case "Digits":
			opt.splits = append(opt.splits, digitsSplit{individual: p.IndividualDigits})
		case "Split":
			sp, err := parseSplit(p, field)
			if err != nil {
				return err
			}
			opt.splits = append(opt.splits, sp)
		case "":
			return fmt.Errorf("%s: no type", field)
		default:
			return fmt.Errorf("%s: pre-tokenizer %q is not supported (supported: Sequence, Split, Digits, ByteLevel, Metaspace)", field, p.Type)
		}
	}
	if len(opt.splits) > 0 && !opt.byteLevel {
		return errors.New("pre_tokenizer: Split and Digits are supported only before ByteLevel")
	}
	return nil
}

// parseSplit reads a Split pre-tokenizer: the known patterns with behavior
// Isolated get their hand-written scanner, other patterns run on regexp2.
func parseSplit(p *jsonPreTokenizer, field string) (splitter, error) {
	switch {
	case p.Pattern == nil:
		return nil, fmt.Errorf("%s: Split without pattern", field)
	case p.Pattern.Regex != nil:
		if sc, ok := knownSplit(*p.Pattern.Regex); ok && p.Behavior == "Isolated" {
			return sc, nil // invert changes nothing when every piece is kept
		}
		sp, err := newRegexSplit(*p.Pattern.Regex, p.Behavior, p.Invert)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		return sp, nil
	case p.Pattern.String != nil && *p.Pattern.String != "":
		sp, err := newRegexSplit(regexp2.Escape(*p.Pattern.String), p.Behavior, p.Invert)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		return sp, nil
	}
	return nil, fmt.Errorf("%s: Split pattern is neither a non-empty String nor a Regex", field)
}

// parsePostProcessor returns the ids the post-processor puts around a
// single sequence.
func parsePostProcessor(raw json.RawMessage, sp *spec) (prefix, suffix []int32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var p struct {
		Type          string                           `json:"type"`
		Processors    []json.RawMessage                `json:"processors"`
		Single        []json.RawMessage                `json:"single"`
		SpecialTokens map[string]struct{ IDs []int64 } `json:"special_tokens"`
		Sep           []json.RawMessage                `json:"sep"`
		Cls           []json.RawMessage                `json:"cls"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, fmt.Errorf("post_processor: %w", jsonError(err))
	}
	switch p.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for i, r := range p.Processors {
			pre, suf, err := parsePostProcessor(r, sp)
			if err != nil {
				return nil, nil, fmt.Errorf("post_processor.processors[%d]: %w", i, err)
			}
			prefix, suffix = slices.Concat(prefix, pre), slices.Concat(suf, suffix)
		}
		return prefix, suffix, nil
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenIDPair("post_processor.cls", p.Cls)
		if err != nil {
			return nil, nil, err
		}
		sep, err := tokenIDPair("post_processor.sep", p.Sep)
		if err != nil {
			return nil, nil, err
		}
		return []int32{cls}, []int32{sep}, nil
	case "TemplateProcessing":
		seen := false
		for i, r := range p.Single {
			var item struct {
				SpecialToken *struct{ ID string } `json:"SpecialToken"`
				Sequence     *struct{ ID string } `json:"Sequence"`
			}
			if err := json.Unmarshal(r, &item); err != nil {
				return nil, nil, fmt.Errorf("post_processor.single[%d]: %w", i, jsonError(err))
			}
			switch {
			case item.Sequence != nil:
				if item.Sequence.ID != "A" || seen {
					return nil, nil, fmt.Errorf("post_processor.single[%d]: want one sequence $A, got $%s", i, item.Sequence.ID)
				}
				seen = true
			case item.SpecialToken != nil:
				st, ok := p.SpecialTokens[item.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("post_processor.single[%d]: special token %q is not in special_tokens", i, item.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					id32, err := checkID("post_processor.special_tokens", id)
					if err != nil {
						return nil, nil, err
					}
					if seen {
						suffix = append(suffix, id32)
					} else {
						prefix = append(prefix, id32)
					}
				}
			default:
				return nil, nil, fmt.Errorf("post_processor.single[%d]: want SpecialToken or Sequence", i)
			}
		}
		if !seen {
			return nil, nil, errors.New("post_processor.single has no sequence $A")
		}
		return prefix, suffix, nil
	}
	return nil, nil, fmt.Errorf("post_processor %s is not supported", typeOf(raw))
}

// tokenIDPair reads ["</s>", 2].
func tokenIDPair(field string, raw []json.RawMessage) (int32, error) {
	var id int64
	if len(raw) != 2 || json.Unmarshal(raw[1], &id) != nil {
		return 0, fmt.Errorf("%s: want [token, id]", field)
	}
	return checkID(field, id)
}

// parseVocab reads a JSON object of token: id.
func parseVocab(data []byte) (map[string]int32, error) {
	var v map[string]int64
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("want an object of token: id: %w", jsonError(err))
	}
	if v == nil {
		return nil, errors.New("want an object of token: id, got null")
	}
	out := make(map[string]int32, len(v))
	for tok, id := range v {
		if tok == "" {
			continue // never produced by BPE; "" marks unused ids
		}
		id32, err := checkID(fmt.Sprintf("token %q", tok), id)
		if err != nil {
			return nil, err
		}
		out[tok] = id32
	}
	return out, nil
}

// parseMerges reads merges.txt: an optional "#version" line, then one merge
// "a b" per line; empty lines are skipped. lines[rank] is the 1-based line
// of each merge.
func parseMerges(data []byte) (merges [][2]string, lines []int, err error) {
	n := 0
	for len(data) > 0 {
		n++
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 || (n == 1 && bytes.HasPrefix(line, []byte("#version"))) {
			continue
		}
		a, b, ok := bytes.Cut(line, []byte{' '})
		if !ok || len(a) == 0 || len(b) == 0 || bytes.IndexByte(b, ' ') >= 0 {
			return nil, nil, fmt.Errorf("line %d: want two tokens separated by one space, got %.60q", n, line)
		}
		merges = append(merges, [2]string{string(a), string(b)})
		lines = append(lines, n)
	}
	return merges, lines, nil
}

func checkID(field string, id int64) (int32, error) {
	if id < 0 || id > 1<<31-1 {
		return 0, fmt.Errorf("%s: id %d is out of range", field, id)
	}
	return int32(id), nil
}

type jsonAddedToken struct {
	ID         *int64  `json:"id"`
	Content    *string `json:"content"`
	SingleWord bool    `json:"single_word"`
	Lstrip     bool    `json:"lstrip"`
	Rstrip     bool    `json:"rstrip"`
	Normalized *bool   `json:"normalized"`
	Special    bool    `json:"special"`
}

func (a jsonAddedToken) token(field string) (addedToken, error) {
	if a.ID == nil || a.Content == nil {
		return addedToken{}, fmt.Errorf("%s: want id and content", field)
	}
	id, err := checkID(field, *a.ID)
	if err != nil {
		return addedToken{}, err
	}
	if *a.Content == "" {
		return addedToken{}, fmt.Errorf("%s: content is empty", field)
	}
	norm := !a.Special // the tokenizers library's default
	if a.Normalized != nil {
		norm = *a.Normalized
	}
	return addedToken{content: *a.Content, id: id, special: a.Special, singleWord: a.SingleWord, lstrip: a.Lstrip, rstrip: a.Rstrip, normalized: norm}, nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// typeOf returns the "type" of a component for error messages.
func typeOf(raw json.RawMessage) string {
	if isNull(raw) {
		return "null"
	}
	var t struct{ Type string }
	if json.Unmarshal(raw, &t) != nil || t.Type == "" {
		return fmt.Sprintf("%.40s", raw)
	}
	return strconv.Quote(t.Type)
}

// jsonError adds the byte offset to a JSON syntax error.
func jsonError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, err)
	}
	return err
}

func readOptional(dir, name string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return data, nil
}
