package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// tokenValue is a special token in tokenizer_config.json or
// special_tokens_map.json: null, "</s>", or an AddedToken object
// {"content": "</s>", "lstrip": false, ...}.
type tokenValue struct {
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
}

func (v *tokenValue) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*v = tokenValue{}
		return nil
	case len(b) > 0 && b[0] == '"':
		*v = tokenValue{}
		return json.Unmarshal(b, &v.Content)
	}
	type plain tokenValue // without this method
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("want a token string or {\"content\": ...}: %w", err)
	}
	*v = tokenValue(p)
	return nil
}

// specialKeys are transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order.
var specialKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// hfConfig is what tokenizer_config.json and special_tokens_map.json say.
type hfConfig struct {
	AddBOS         *bool                     `json:"add_bos_token"`
	AddEOS         *bool                     `json:"add_eos_token"`
	AddPrefixSpace *bool                     `json:"add_prefix_space"`
	TokenizerClass string                    `json:"tokenizer_class"`
	Additional     []tokenValue              `json:"additional_special_tokens"`
	AddedDecoder   map[string]jsonAddedToken `json:"added_tokens_decoder"`
	names          map[string]tokenValue     // by specialKeys; absent or null: not set
	stopIDs        []int32                   // generation_config.json's eos_token_id
}

// readConfigs reads dir/tokenizer_config.json and then
// dir/special_tokens_map.json, whose tokens override the former's, as in
// transformers. Both are optional.
func readConfigs(dir string) (*hfConfig, error) {
	c := &hfConfig{names: map[string]tokenValue{}}
	for _, name := range []string{fileConfig, fileSpecialMap} {
		data, err := readOptional(dir, name)
		if err != nil {
			return nil, err
		}
		if data == nil {
			continue
		}
		if err := c.parse(data, name == fileConfig); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", filepath.Join(dir, name), err)
		}
	}
	data, err := readOptional(dir, fileGenConfig)
	if err != nil {
		return nil, err
	}
	if data != nil {
		if c.stopIDs, err = parseGenerationEOS(data); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", filepath.Join(dir, fileGenConfig), err)
		}
	}
	return c, nil
}

// parseGenerationEOS reads eos_token_id of generation_config.json: absent,
// null, one id or a list of ids.
func parseGenerationEOS(data []byte) ([]int32, error) {
	var g struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, jsonError(err)
	}
	if isNull(g.EOS) {
		return nil, nil
	}
	var one int64
	var list []int64
	if err := json.Unmarshal(g.EOS, &one); err == nil {
		list = []int64{one}
	} else if err := json.Unmarshal(g.EOS, &list); err != nil {
		return nil, fmt.Errorf("eos_token_id: want an id or a list of ids, got %.40s", g.EOS)
	}
	out := make([]int32, len(list))
	for i, id := range list {
		id32, err := checkID("eos_token_id", id)
		if err != nil {
			return nil, err
		}
		out[i] = id32
	}
	return out, nil
}

// parse reads one file into c; full is false for special_tokens_map.json,
// which only names tokens.
func (c *hfConfig) parse(data []byte, full bool) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("want a JSON object: %w", jsonError(err))
	}
	if raw == nil {
		return fmt.Errorf("want a JSON object, got null")
	}
	if full {
		var f hfConfig
		if err := json.Unmarshal(data, &f); err != nil {
			return jsonError(err)
		}
		c.AddBOS, c.AddEOS, c.AddPrefixSpace, c.TokenizerClass, c.AddedDecoder = f.AddBOS, f.AddEOS, f.AddPrefixSpace, f.TokenizerClass, f.AddedDecoder
	}
	if r, ok := raw["additional_special_tokens"]; ok {
		if err := json.Unmarshal(r, &c.Additional); err != nil {
			return fmt.Errorf("additional_special_tokens: %w", jsonError(err))
		}
	}
	for _, k := range specialKeys {
		r, ok := raw[k]
		if !ok {
			continue
		}
		var v tokenValue
		if err := json.Unmarshal(r, &v); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		if v.Content == "" {
			delete(c.names, k)
		} else {
			c.names[k] = v
		}
	}
	return nil
}

// applyNames gives a tokenizer.json spec the special-token names of the
// configuration files, generation_config.json's eos ids, and, for the
// LLaMA tokenizer classes, the template transformers (v4) builds from
// add_bos_token (default true) and add_eos_token (default false) in place
// of the file's post-processor. Other classes (Llama-3's
// PreTrainedTokenizerFast, Qwen2TokenizerFast, GPT2TokenizerFast) keep the
// file's post-processor: there add_bos_token has no effect.
func (c *hfConfig) applyNames(sp *spec) {
	sp.bos, sp.eos, sp.pad, sp.unk = c.names["bos_token"].Content, c.names["eos_token"].Content, c.names["pad_token"].Content, c.names["unk_token"].Content
	sp.names = map[string]string{}
	for k, v := range c.names {
		sp.names[k] = v.Content
	}
	sp.stopIDs = c.stopIDs
	if c.llamaClass() {
		sp.llamaTemplate = &[2]bool{c.AddBOS == nil || *c.AddBOS, c.AddEOS != nil && *c.AddEOS}
	}
}

// llamaClass reports whether tokenizer_class is one whose fast tokenizer
// rebuilds the post-processor from add_bos_token and add_eos_token
// (transformers v4: LlamaTokenizerFast, CodeLlamaTokenizerFast,
// GemmaTokenizerFast; the slow names map to them).
func (c *hfConfig) llamaClass() bool {
	switch strings.TrimSuffix(c.TokenizerClass, "Fast") {
	case "LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer":
		return true
	}
	return false
}

// robertaLike reports whether the tokenizer class wraps text in <s> ... </s>.
func (c *hfConfig) robertaLike() bool {
	for _, p := range []string{"Roberta", "Bart", "Longformer"} {
		if strings.HasPrefix(c.TokenizerClass, p) {
			return true
		}
	}
	return false
}

// vocabMergesSpec builds the spec of the vocab.json + merges.txt route as
// transformers' GPT2Tokenizer (or RobertaTokenizer) and its conversion to
// a fast tokenizer do: the special tokens become special added tokens
// (with the ids vocab.json gives them, or new ids after it), the tokens of
// added_tokens.json and added_tokens_decoder are added too, and the
// template is [bos] when add_bos_token is true ([cls] ... [sep] for
// RoBERTa-like classes). Unset special tokens take the class's defaults
// when the vocabulary has them (GPT-2: <|endoftext|>).
func (c *hfConfig) vocabMergesSpec(vocab map[string]int32, merges [][2]string, added map[string]int64) (*spec, error) {
	sp := &spec{vocab: vocab, merges: merges, padID: -1}
	sp.bpe = bpeOptions{byteLevel: true, useRegex: true, addPrefixSpace: c.AddPrefixSpace != nil && *c.AddPrefixSpace}
	defaults := map[string]tokenValue{"bos_token": {Content: "<|endoftext|>"}, "eos_token": {Content: "<|endoftext|>"}, "unk_token": {Content: "<|endoftext|>"}}
	if c.robertaLike() {
		defaults = map[string]tokenValue{
			"bos_token": {Content: "<s>"}, "eos_token": {Content: "</s>"}, "unk_token": {Content: "<unk>"}, "sep_token": {Content: "</s>"},
			"pad_token": {Content: "<pad>"}, "cls_token": {Content: "<s>"}, "mask_token": {Content: "<mask>", Lstrip: true},
		}
	}
	names := map[string]string{}
	var specials []tokenValue
	for _, k := range specialKeys {
		v, ok := c.names[k]
		if !ok {
			d, ok := defaults[k]
			if _, inVocab := vocab[d.Content]; !ok || !inVocab {
				continue
			}
			v = d
		}
		names[k] = v.Content
		specials = append(specials, v)
	}
	specials = append(specials, c.Additional...)

	next := int64(0) // the next new id
	for _, id := range vocab {
		next = max(next, int64(id)+1)
	}
	for _, id := range added {
		next = max(next, id+1)
	}
	var decoderIDs []int64
	for k := range c.AddedDecoder {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: added_tokens_decoder key %q is not an id", fileConfig, k)
		}
		decoderIDs = append(decoderIDs, id)
	}
	slices.Sort(decoderIDs)
	byContent := map[string]int{} // index in sp.added
	add := func(tok addedToken) {
		if i, ok := byContent[tok.content]; ok {
			sp.added[i] = tok
			return
		}
		byContent[tok.content] = len(sp.added)
		sp.added = append(sp.added, tok)
	}
	idOf := func(content string) int32 {
		if i, ok := byContent[content]; ok {
			return sp.added[i].id
		}
		if id, ok := vocab[content]; ok {
			return id
		}
		if id, ok := added[content]; ok && id >= 0 && id < 1<<31 {
			return int32(id)
		}
		next++
		return int32(next - 1)
	}
	for _, id := range decoderIDs {
		a := c.AddedDecoder[strconv.FormatInt(id, 10)]
		a.ID = &id
		tok, err := a.token(fmt.Sprintf("%s: added_tokens_decoder[%d]", fileConfig, id))
		if err != nil {
			return nil, err
		}
		add(tok)
	}
	for _, v := range specials {
		if v.Content == "" {
			continue
		}
		if i, ok := byContent[v.Content]; ok {
			sp.added[i].special = true
			continue
		}
		add(addedToken{content: v.Content, id: idOf(v.Content), special: true, singleWord: v.SingleWord, lstrip: v.Lstrip, rstrip: v.Rstrip})
	}
	for _, content := range slices.Sorted(maps.Keys(added)) {
		if _, ok := byContent[content]; ok {
			continue
		}
		id, err := checkID(fmt.Sprintf("%s: token %q", fileAddedTokens, content), added[content])
		if err != nil {
			return nil, err
		}
		if content == "" {
			return nil, fmt.Errorf("%s: empty token", fileAddedTokens)
		}
		add(addedToken{content: content, id: id, normalized: true})
	}

	tmpl := func(key string) ([]int32, error) {
		name, ok := names[key]
		if !ok {
			return nil, fmt.Errorf("the template needs %s, which is not set", key)
		}
		return []int32{idOf(name)}, nil
	}
	var err error
	switch {
	case c.robertaLike():
		if sp.prefix, err = tmpl("cls_token"); err != nil {
			return nil, err
		}
		if sp.suffix, err = tmpl("sep_token"); err != nil {
			return nil, err
		}
	default:
		if c.AddBOS != nil && *c.AddBOS {
			if sp.prefix, err = tmpl("bos_token"); err != nil {
				return nil, fmt.Errorf("%s: add_bos_token: %w", fileConfig, err)
			}
		}
		if c.AddEOS != nil && *c.AddEOS {
			if sp.suffix, err = tmpl("eos_token"); err != nil {
				return nil, fmt.Errorf("%s: add_eos_token: %w", fileConfig, err)
			}
		}
	}
	sp.bos, sp.eos, sp.pad, sp.unk = names["bos_token"], names["eos_token"], names["pad_token"], names["unk_token"]
	sp.names, sp.stopIDs = names, c.stopIDs
	return sp, nil
}
