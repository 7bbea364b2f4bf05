package model

import (
	"encoding/json"
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// llamaDefaults are the configuration classes' defaults for the keys a
// config.json may leave out: LlamaConfig, MistralConfig, Qwen2Config and
// Qwen3Config (transformers 4.48–4.56). Qwen2Config and Qwen3Config default
// num_key_value_heads to 32, not to num_attention_heads; Qwen3Config
// defaults head_dim to 128.
func llamaDefaults(modelType string) Config {
	c := Config{
		ModelType: modelType, Activation: "silu", RMSNormEps: 1e-6, RopeTheta: 10000,
		MaxPositions: 2048, BOSTokenID: 1, EOSTokenID: 2,
	}
	switch modelType {
	case "mistral":
		c.MaxPositions, c.NumKVHeads = 4096*32, 8
	case "qwen2", "qwen3":
		c.MaxPositions, c.NumKVHeads = 32768, 32
		c.noBOS, c.BOSTokenID, c.EOSTokenID = true, -1, -1
		if modelType == "qwen3" {
			c.HeadDim = 128
		}
	}
	c.noPad = true
	return c
}

// llamaFields are the plain config.json keys of a LLaMA-family config.
func (c *Config) llamaFields() []field {
	f := []field{
		{"vocab_size", true, &c.VocabSize},
		{"hidden_size", true, &c.HiddenSize},
		{"intermediate_size", true, &c.FFNDim},
		{"num_hidden_layers", true, &c.NumLayers},
		{"num_attention_heads", true, &c.NumHeads},
		{"num_key_value_heads", false, &c.NumKVHeads},
		{"head_dim", false, &c.HeadDim},
		{"max_position_embeddings", false, &c.MaxPositions},
		{"rms_norm_eps", false, &c.RMSNormEps},
		{"rope_theta", false, &c.RopeTheta},
		{"hidden_act", false, &c.Activation},
		{"attention_dropout", false, &c.AttentionDropout},
		{"tie_word_embeddings", false, &c.TieWordEmbeddings},
		{"torch_dtype", false, &c.TorchDtype},
	}
	switch c.ModelType {
	case "llama":
		f = append(f, field{"attention_bias", false, &c.QKVBias}, field{"mlp_bias", false, &c.MLPBias})
	case "qwen3":
		f = append(f, field{"attention_bias", false, &c.QKVBias})
	}
	return f
}

// parseLlamaConfig reads a LLaMA-family config.json (raw, already split
// into keys). Errors name the model type and the field.
func parseLlamaConfig(raw map[string]json.RawMessage, modelType string) (*Config, error) {
	c := llamaDefaults(modelType)
	wrap := func(err error) error { return fmt.Errorf("model_type %q: %w", modelType, err) }
	for _, f := range c.llamaFields() {
		v, ok := raw[f.key]
		if !ok || string(v) == "null" {
			if f.required {
				return nil, wrap(fmt.Errorf("field %q is missing", f.key))
			}
			continue
		}
		if err := decodeField(v, f.dst); err != nil {
			return nil, wrap(fmt.Errorf("field %q: %w", f.key, err))
		}
	}
	switch modelType {
	case "llama", "qwen3":
		c.OutBias = c.QKVBias // attention_bias applies to o_proj too
	case "qwen2":
		c.QKVBias = true // Qwen2Attention: q/k/v bias=True, o_proj bias=False
	}
	c.QKNorm = modelType == "qwen3"
	if c.NumKVHeads == 0 {
		c.NumKVHeads = c.NumHeads
	}
	if c.HeadDim == 0 && c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	c.WordEmbedProjDim = c.HiddenSize

	// Special tokens: bos and pad may be null or absent, eos one id or a list.
	for _, t := range []struct {
		key  string
		dst  *int
		none *bool
	}{{"bos_token_id", &c.BOSTokenID, &c.noBOS}, {"pad_token_id", &c.PadTokenID, &c.noPad}} {
		if v, ok := raw[t.key]; ok {
			if string(v) == "null" {
				*t.none, *t.dst = true, -1
				continue
			}
			if err := decodeField(v, t.dst); err != nil {
				return nil, wrap(fmt.Errorf("field %q: %w", t.key, err))
			}
			*t.none = false
		}
	}
	if v, ok := raw["eos_token_id"]; ok {
		var list []int
		switch {
		case string(v) == "null":
			c.EOSTokenID = -1
		case json.Unmarshal(v, &list) == nil:
			if len(list) == 0 {
				return nil, wrap(fmt.Errorf("field \"eos_token_id\" is an empty list"))
			}
			c.EOSTokenID = list[0]
			if len(list) > 1 {
				c.EOSTokenIDs = list
			}
		default:
			if err := decodeField(v, &c.EOSTokenID); err != nil {
				return nil, wrap(fmt.Errorf("field \"eos_token_id\": want an integer or a list of integers, got %s", v))
			}
		}
	}
	if c.noPad {
		c.PadTokenID = max(c.EOSTokenID, 0)
	}
	if c.noBOS {
		c.BOSTokenID = -1
	}

	if v, ok := raw["rope_scaling"]; ok && string(v) != "null" {
		s, err := parseRopeScaling(v)
		if err != nil {
			return nil, wrap(fmt.Errorf("field \"rope_scaling\": %w", err))
		}
		c.RopeScaling = s
	}
	if v, ok := raw["partial_rotary_factor"]; ok && string(v) != "null" {
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || f != 1 {
			return nil, wrap(fmt.Errorf("field \"partial_rotary_factor\": %s is not supported (rotary embeddings over the whole head only)", v))
		}
	}
	if err := checkSlidingWindow(raw, &c); err != nil {
		return nil, wrap(err)
	}
	c.raw = raw
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// parseRopeScaling reads rope_scaling: its type from "rope_type" or the
// legacy "type", and the parameters of linear and llama3 scaling. Which
// types are supported is kernels.RoPEInvFreq's to say (Validate asks it).
func parseRopeScaling(v json.RawMessage) (kernels.RoPEScaling, error) {
	var r struct {
		RopeType   *string  `json:"rope_type"`
		Type       *string  `json:"type"`
		Factor     *float64 `json:"factor"`
		Low        *float64 `json:"low_freq_factor"`
		High       *float64 `json:"high_freq_factor"`
		OrigMaxPos *float64 `json:"original_max_position_embeddings"`
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return kernels.RoPEScaling{}, fmt.Errorf("want an object with rope_type and its parameters, got %s", v)
	}
	var s kernels.RoPEScaling
	switch {
	case r.RopeType != nil:
		s.Type = *r.RopeType
	case r.Type != nil:
		s.Type = *r.Type
	default:
		return s, fmt.Errorf("no rope_type (or type) in %s", v)
	}
	if r.Factor != nil {
		s.Factor = *r.Factor
	}
	if r.Low != nil {
		s.LowFreqFactor = *r.Low
	}
	if r.High != nil {
		s.HighFreqFactor = *r.High
	}
	if r.OrigMaxPos != nil {
		s.OriginalMaxPositions = int(*r.OrigMaxPos)
	}
	return s, nil
}

// checkSlidingWindow refuses a config whose attention uses a sliding window
// shorter than max_position_embeddings (gochat's attention is full): a
// Mistral sliding_window (MistralConfig's default is 4096; null means none),
// or Qwen2/Qwen3's when use_sliding_window is true and some layer (index ≥
// max_window_layers) slides.
func checkSlidingWindow(raw map[string]json.RawMessage, c *Config) error {
	window := -1
	switch c.ModelType {
	case "mistral":
		window = 4096
	case "qwen2", "qwen3":
		use := false
		if v, ok := raw["use_sliding_window"]; ok && string(v) != "null" {
			if err := decodeField(v, &use); err != nil {
				return fmt.Errorf("field \"use_sliding_window\": %w", err)
			}
		}
		if !use {
			return nil
		}
		window = 4096
		mwl := 28
		if v, ok := raw["max_window_layers"]; ok && string(v) != "null" {
			if err := decodeField(v, &mwl); err != nil {
				return fmt.Errorf("field \"max_window_layers\": %w", err)
			}
		}
		if mwl >= c.NumLayers {
			return nil // no layer slides
		}
	default:
		return nil
	}
	if v, ok := raw["sliding_window"]; ok {
		if string(v) == "null" {
			return nil
		}
		if err := decodeField(v, &window); err != nil {
			return fmt.Errorf("field \"sliding_window\": %w", err)
		}
	}
	if window < c.MaxPositions {
		return fmt.Errorf("field \"sliding_window\": sliding-window attention (window %d < max_position_embeddings %d) is not supported; set it to null (or use_sliding_window to false) if your sequences are shorter than the window", window, c.MaxPositions)
	}
	return nil
}

// validateLlama is Validate for the LLaMA family.
func (c *Config) validateLlama() error {
	wrap := func(err error) error { return fmt.Errorf("model_type %q: %w", c.ModelType, err) }
	for _, p := range []struct {
		key string
		v   func() int // after the fields before it are checked (head_dim divides by the heads)
	}{
		{"vocab_size", func() int { return c.VocabSize }}, {"hidden_size", func() int { return c.HiddenSize }},
		{"intermediate_size", func() int { return c.FFNDim }}, {"num_hidden_layers", func() int { return c.NumLayers }},
		{"num_attention_heads", func() int { return c.NumHeads }}, {"num_key_value_heads", c.KVHeads},
		{"head_dim", c.HeadSize}, {"max_position_embeddings", func() int { return c.MaxPositions }},
	} {
		if v := p.v(); v <= 0 {
			return wrap(fmt.Errorf("field %q must be positive, got %d", p.key, v))
		}
	}
	if c.NumHeads%c.KVHeads() != 0 {
		return wrap(fmt.Errorf("field \"num_attention_heads\" (%d) is not a multiple of num_key_value_heads (%d)", c.NumHeads, c.KVHeads()))
	}
	if c.WordEmbedProjDim != c.HiddenSize {
		return wrap(fmt.Errorf("word_embed_proj_dim %d: the LLaMA family has no projections (want hidden_size %d)", c.WordEmbedProjDim, c.HiddenSize))
	}
	if c.Activation != "silu" {
		return wrap(fmt.Errorf("field \"hidden_act\": %q is not supported (want silu)", c.Activation))
	}
	if !(c.RMSNormEps > 0) {
		return wrap(fmt.Errorf("field \"rms_norm_eps\" must be positive, got %v", c.RMSNormEps))
	}
	if c.AttentionDropout != 0 {
		return wrap(fmt.Errorf("field \"attention_dropout\" %v: attention dropout is not supported (0 in every release)", c.AttentionDropout))
	}
	if c.Dropout != 0 {
		return wrap(fmt.Errorf("dropout %v: the LLaMA family has none", c.Dropout))
	}
	if _, err := kernels.RoPEInvFreq(c.HeadSize(), c.RopeTheta, c.RopeScaling); err != nil {
		return wrap(fmt.Errorf("fields \"rope_theta\", \"rope_scaling\", \"head_dim\": %w", err))
	}
	for _, p := range []struct {
		key string
		v   int
	}{{"bos_token_id", c.BOSTokenID}, {"eos_token_id", c.EOSTokenID}, {"pad_token_id", c.PadTokenID}} {
		if p.v < -1 || p.v >= c.VocabSize {
			return wrap(fmt.Errorf("field %q = %d is outside the vocabulary [0, %d)", p.key, p.v, c.VocabSize))
		}
	}
	if c.PadTokenID < 0 {
		return wrap(fmt.Errorf("field \"pad_token_id\" = %d is outside the vocabulary [0, %d)", c.PadTokenID, c.VocabSize))
	}
	for _, e := range c.EOSTokenIDs {
		if e < 0 || e >= c.VocabSize {
			return wrap(fmt.Errorf("field \"eos_token_id\": %d is outside the vocabulary [0, %d)", e, c.VocabSize))
		}
	}
	return nil
}

// llamaArchitectures are the transformers classes of each model type.
var llamaArchitectures = map[string]string{"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}

// llamaJSON writes the fields gochat knows into out (over the loaded
// file's): what transformers' config class reads back as this
// architecture. architectures is XForCausalLM unless the file said
// otherwise (Save sets XForSequenceClassification for a value head).
func (c *Config) llamaJSON(out map[string]any) {
	out["model_type"] = c.ModelType
	putFields(out, c.llamaFields())
	if c.TorchDtype == "" {
		delete(out, "torch_dtype")
	}
	if !c.noBOS {
		out["bos_token_id"] = c.BOSTokenID
	}
	if !c.noPad {
		out["pad_token_id"] = c.PadTokenID
	}
	switch {
	case c.EOSTokenIDs != nil:
		out["eos_token_id"] = c.EOSTokenIDs
	case c.EOSTokenID >= 0:
		out["eos_token_id"] = c.EOSTokenID
	}
	if s := c.RopeScaling; s.Type != "" && s.Type != "default" {
		if _, ok := c.raw["rope_scaling"]; !ok {
			r := map[string]any{"rope_type": s.Type, "factor": s.Factor}
			if s.Type == "llama3" {
				r["low_freq_factor"], r["high_freq_factor"] = s.LowFreqFactor, s.HighFreqFactor
				r["original_max_position_embeddings"] = s.OriginalMaxPositions
			}
			out["rope_scaling"] = r
		}
	} else {
		out["rope_scaling"] = nil
	}
	switch c.ModelType {
	case "mistral", "qwen2", "qwen3":
		if _, ok := c.raw["sliding_window"]; !ok && c.ModelType == "mistral" {
			out["sliding_window"] = nil // MistralConfig's default (4096) is not what gochat computes
		}
	}
	if _, ok := out["architectures"]; !ok {
		out["architectures"] = []string{llamaArchitectures[c.ModelType] + "ForCausalLM"}
	}
}
