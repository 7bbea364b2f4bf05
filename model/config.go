package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/gochat-ai/gochat/internal/atomicfile"
	"github.com/gochat-ai/gochat/kernels"
)

// Config is a decoder's architecture, read from a Hugging Face config.json.
// Field names follow OPTConfig, defaults are OPTConfig's; a LLaMA-family
// config (model_type llama, mistral, qwen2, qwen3) fills the fields its
// architecture has (intermediate_size is FFNDim, hidden_act Activation;
// WordEmbedProjDim is H) with its own class's defaults, and the LLaMA fields
// below.
type Config struct {
	ModelType                  string  // "opt", "llama", "mistral", "qwen2" or "qwen3"
	VocabSize                  int     // V (50272 for OPT)
	HiddenSize                 int     // H
	FFNDim                     int     // F (LLaMA: intermediate_size)
	NumLayers                  int     // L
	NumHeads                   int     // NH
	MaxPositions               int     // max_position_embeddings (the table has MaxPositions+2 rows)
	WordEmbedProjDim           int     // P; equals H unless project_in/project_out exist
	DoLayerNormBefore          bool    // pre-LN (true) or post-LN (false)
	RemoveFinalLayerNorm       bool    // _remove_final_layer_norm
	EnableBias                 bool    // linear layers have biases
	LayerNormElementwiseAffine bool    // LayerNorms have weight and bias
	Activation                 string  // "relu" or "gelu"
	Dropout                    float64 // residual dropout probability
	AttentionDropout           float64 // not applied by gochat (0 in every OPT release)
	BOSTokenID                 int
	EOSTokenID                 int
	PadTokenID                 int
	TieWordEmbeddings          bool
	TorchDtype                 string // informational: dtype of the original weights

	// The LLaMA family; zero for OPT.
	NumKVHeads  int                 // NKV: num_key_value_heads (NH when absent)
	HeadDim     int                 // HS: head_dim (H/NH when absent)
	RMSNormEps  float64             // rms_norm_eps
	RopeTheta   float64             // rope_theta
	RopeScaling kernels.RoPEScaling // rope_scaling (Type "" when absent)
	QKVBias     bool                // q_proj, k_proj and v_proj have biases (attention_bias; always for qwen2)
	OutBias     bool                // o_proj has a bias (attention_bias, but for qwen2)
	MLPBias     bool                // gate_proj, up_proj and down_proj have biases (llama's mlp_bias)
	QKNorm      bool                // q_norm and k_norm on each head before RoPE (qwen3)
	// EOSTokenIDs are every id that ends a sequence when eos_token_id is a
	// list (Llama-3 instruct models); EOSTokenID is the first. nil when it
	// is one id.
	EOSTokenIDs []int
	// noPad, noBOS: the file had no pad_token_id / bos_token_id (null or
	// absent). PadTokenID is then the first EOS id (what transformers users
	// set), or 0 without one; BOSTokenID is -1.
	noPad, noBOS bool

	// raw keeps every field of the file, so Save writes back what it did not
	// understand (architectures, transformers_version, ...).
	raw map[string]json.RawMessage
}

// HeadSize is HS: head_dim when set (LLaMA family), else H/NH.
func (c *Config) HeadSize() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	return c.HiddenSize / c.NumHeads
}

// KVHeads is NKV, the number of key and value heads: num_key_value_heads
// (LLaMA family), else NH.
func (c *Config) KVHeads() int {
	if c.NumKVHeads > 0 {
		return c.NumKVHeads
	}
	return c.NumHeads
}

// IsEOS reports whether tok ends a sequence: eos_token_id or one of the ids
// of its list.
func (c *Config) IsEOS(tok int32) bool {
	if int(tok) == c.EOSTokenID {
		return true
	}
	for _, e := range c.EOSTokenIDs {
		if int(tok) == e {
			return true
		}
	}
	return false
}

// HasFinalLayerNorm reports whether the decoder ends in a LayerNorm.
func (c *Config) HasFinalLayerNorm() bool { return c.DoLayerNormBefore && !c.RemoveFinalLayerNorm }

// HasProjections reports whether project_in/project_out exist (P != H).
func (c *Config) HasProjections() bool { return c.WordEmbedProjDim != c.HiddenSize }

// putFields writes each field's current value into out under its key.
func putFields(out map[string]any, fs []field) {
	for _, f := range fs {
		switch d := f.dst.(type) {
		case *int:
			out[f.key] = *d
		case *bool:
			out[f.key] = *d
		case *float64:
			out[f.key] = *d
		case *string:
			out[f.key] = *d
		}
	}
}

// field describes one config.json key.
type field struct {
	key      string
	required bool
	dst      any // *int, *bool, *float64, *string
}

func (c *Config) fields() []field {
	return []field{
		{"model_type", true, &c.ModelType},
		{"vocab_size", true, &c.VocabSize},
		{"hidden_size", true, &c.HiddenSize},
		{"ffn_dim", true, &c.FFNDim},
		{"num_hidden_layers", true, &c.NumLayers},
		{"num_attention_heads", true, &c.NumHeads},
		{"max_position_embeddings", false, &c.MaxPositions},
		{"word_embed_proj_dim", false, &c.WordEmbedProjDim},
		{"do_layer_norm_before", false, &c.DoLayerNormBefore},
		{"_remove_final_layer_norm", false, &c.RemoveFinalLayerNorm},
		{"enable_bias", false, &c.EnableBias},
		{"layer_norm_elementwise_affine", false, &c.LayerNormElementwiseAffine},
		{"activation_function", false, &c.Activation},
		{"dropout", false, &c.Dropout},
		{"attention_dropout", false, &c.AttentionDropout},
		{"bos_token_id", false, &c.BOSTokenID},
		{"eos_token_id", false, &c.EOSTokenID},
		{"pad_token_id", false, &c.PadTokenID},
		{"tie_word_embeddings", false, &c.TieWordEmbeddings},
		{"torch_dtype", false, &c.TorchDtype},
	}
}

// defaultConfig is OPTConfig's defaults for the optional fields.
func defaultConfig() Config {
	return Config{
		MaxPositions: 2048, DoLayerNormBefore: true, EnableBias: true,
		LayerNormElementwiseAffine: true, Activation: "relu", Dropout: 0.1,
		BOSTokenID: 2, EOSTokenID: 2, PadTokenID: 1, TieWordEmbeddings: true,
	}
}

// LoadConfig reads and validates a config.json.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read model config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses and validates the bytes of a config.json. Errors name
// the offending field.
func ParseConfig(b []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("config is not a JSON object: %w", err)
	}
	if raw == nil {
		return nil, fmt.Errorf("config is not a JSON object")
	}
	c := defaultConfig()
	c.WordEmbedProjDim = -1
	if v, ok := raw["model_type"]; ok {
		if err := decodeField(v, &c.ModelType); err != nil {
			return nil, fmt.Errorf("field \"model_type\": %w", err)
		}
		switch {
		case c.IsLlamaFamily():
			return parseLlamaConfig(raw, c.ModelType)
		case c.ModelType != "opt":
			return nil, unsupportedType(c.ModelType)
		}
	}
	for _, f := range c.fields() {
		v, ok := raw[f.key]
		if !ok || string(v) == "null" {
			if f.required {
				return nil, fmt.Errorf("field %q is missing", f.key)
			}
			continue
		}
		if err := decodeField(v, f.dst); err != nil {
			return nil, fmt.Errorf("field %q: %w", f.key, err)
		}
	}
	if c.WordEmbedProjDim == -1 {
		c.WordEmbedProjDim = c.HiddenSize
	}
	c.raw = raw
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// decodeField decodes v into dst with a readable type error.
func decodeField(v json.RawMessage, dst any) error {
	switch d := dst.(type) {
	case *int:
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return fmt.Errorf("want an integer, got %s", v)
		}
		if f != math.Trunc(f) || math.Abs(f) > 1<<40 {
			return fmt.Errorf("want an integer, got %s", v)
		}
		*d = int(f)
	case *bool:
		if err := json.Unmarshal(v, d); err != nil {
			return fmt.Errorf("want true or false, got %s", v)
		}
	case *float64:
		if err := json.Unmarshal(v, d); err != nil {
			return fmt.Errorf("want a number, got %s", v)
		}
	case *string:
		if err := json.Unmarshal(v, d); err != nil {
			return fmt.Errorf("want a string, got %s", v)
		}
	default:
		panic(fmt.Sprintf("decodeField: %T", dst))
	}
	return nil
}

// Validate checks the sizes and options for consistency.
func (c *Config) Validate() error {
	if c.IsLlamaFamily() {
		return c.validateLlama()
	}
	pos := []struct {
		key string
		v   int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"ffn_dim", c.FFNDim},
		{"num_hidden_layers", c.NumLayers}, {"num_attention_heads", c.NumHeads},
		{"max_position_embeddings", c.MaxPositions}, {"word_embed_proj_dim", c.WordEmbedProjDim},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("field %q must be positive, got %d", p.key, p.v)
		}
	}
	if c.HiddenSize%c.NumHeads != 0 {
		return fmt.Errorf("field \"hidden_size\" (%d) is not a multiple of num_attention_heads (%d)", c.HiddenSize, c.NumHeads)
	}
	switch c.Activation {
	case "relu", "gelu":
	default:
		return fmt.Errorf("field \"activation_function\": %q is not supported (want relu or gelu)", c.Activation)
	}
	for _, p := range []struct {
		key string
		v   float64
	}{{"dropout", c.Dropout}, {"attention_dropout", c.AttentionDropout}} {
		if p.v < 0 || p.v >= 1 {
			return fmt.Errorf("field %q must be in [0, 1), got %v", p.key, p.v)
		}
	}
	for _, p := range []struct {
		key string
		v   int
	}{{"bos_token_id", c.BOSTokenID}, {"eos_token_id", c.EOSTokenID}, {"pad_token_id", c.PadTokenID}} {
		if p.v < 0 || p.v >= c.VocabSize {
			return fmt.Errorf("field %q = %d is outside the vocabulary [0, %d)", p.key, p.v, c.VocabSize)
		}
	}
	return nil
}

// NumParams counts the parameters, the tied lm_head once.
func (c *Config) NumParams() int {
	n := 0
	for _, s := range c.paramSpecs(false) {
		n += s.size()
	}
	return n
}

// MarshalJSON writes a Hugging Face config.json: the fields gochat knows,
// over any others the loaded file had.
func (c *Config) MarshalJSON() ([]byte, error) {
	out := map[string]any{}
	for k, v := range c.raw {
		out[k] = v
	}
	if c.IsLlamaFamily() {
		c.llamaJSON(out)
		return marshalSorted(out)
	}
	cc := *c
	putFields(out, cc.fields())
	if _, ok := out["architectures"]; !ok {
		out["architectures"] = []string{"OPTForCausalLM"}
	}
	return marshalSorted(out)
}

// marshalSorted writes out as JSON with one key per line, sorted.
func marshalSorted(out map[string]any) ([]byte, error) {
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.WriteString("{\n")
	for i, k := range keys {
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(out[k])
		if err != nil {
			return nil, fmt.Errorf("config field %q: %w", k, err)
		}
		fmt.Fprintf(&buf, "  %s: %s", kb, vb)
		if i < len(keys)-1 {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}

// SaveConfig writes c as dir/config.json (atomically).
func (c *Config) Save(dir string) error {
	b, err := c.MarshalJSON()
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "config.json"), b)
}
