package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// optConfig returns a config.json for a facebook/opt-* size.
func optConfig(h, f, l, nh, p int, pre bool) string {
	b, _ := json.Marshal(map[string]any{
		"model_type": "opt", "vocab_size": 50272, "hidden_size": h, "ffn_dim": f, "num_hidden_layers": l,
		"num_attention_heads": nh, "max_position_embeddings": 2048, "word_embed_proj_dim": p,
		"do_layer_norm_before": pre, "activation_function": "relu", "torch_dtype": "float16",
	})
	return string(b)
}

func TestNumParamsOfReleasedSizes(t *testing.T) {
	for _, c := range []struct {
		name string
		json string
		want int
	}{
		{"opt-125m", optConfig(768, 3072, 12, 12, 768, true), 125_239_296},
		{"opt-350m", optConfig(1024, 4096, 24, 16, 512, false), 331_196_416},
		{"opt-1.3b", optConfig(2048, 8192, 24, 32, 2048, true), 1_315_758_080},
	} {
		cfg, err := ParseConfig([]byte(c.json))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := cfg.NumParams(); got != c.want {
			t.Errorf("%s: %d parameters, want %d", c.name, got, c.want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := map[string]any{"model_type": "opt", "vocab_size": 100, "hidden_size": 16, "ffn_dim": 32,
		"num_hidden_layers": 2, "num_attention_heads": 4}
	with := func(k string, v any) string {
		m := map[string]any{}
		for kk, vv := range base {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct {
		name, json, want string
	}{
		{"missing hidden_size", with("hidden_size", nil), `"hidden_size" is missing`},
		{"missing model_type", with("model_type", nil), `"model_type" is missing`},
		{"string hidden_size", with("hidden_size", "16"), `"hidden_size": want an integer`},
		{"float layers", with("num_hidden_layers", 2.5), `"num_hidden_layers": want an integer`},
		{"bool as string", with("do_layer_norm_before", "true"), `"do_layer_norm_before": want true or false`},
		{"unknown model_type", with("model_type", "gpt2"), `unknown model_type "gpt2"`},
		{"heads do not divide", with("num_attention_heads", 5), "not a multiple"},
		{"negative ffn", with("ffn_dim", -1), `"ffn_dim" must be positive`},
		{"activation", with("activation_function", "swish"), `"activation_function"`},
		{"dropout", with("dropout", 1.5), `"dropout" must be in`},
		{"pad id", with("pad_token_id", 100), `"pad_token_id" = 100 is outside`},
		{"not an object", `[1,2]`, "not a JSON object"},
		{"truncated", `{"model_type": "opt"`, "not a JSON object"},
	}
	for _, c := range cases {
		_, err := ParseConfig([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	if _, err := ParseConfig([]byte(with("ffn_dim", 32))); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

func TestConfigRoundTrip(t *testing.T) {
	src := optConfig(1024, 4096, 24, 16, 512, false)
	var raw map[string]any
	json.Unmarshal([]byte(src), &raw)
	raw["transformers_version"] = "4.21.0"
	b, _ := json.Marshal(raw)
	cfg, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := cfg.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got.NumParams() != cfg.NumParams() || got.DoLayerNormBefore || got.WordEmbedProjDim != 512 {
		t.Errorf("round trip changed the config: %+v", got)
	}
	out, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	for _, want := range []string{`"transformers_version": "4.21.0"`, `"architectures": ["OPTForCausalLM"]`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("saved config lacks %s:\n%s", want, out)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	src := filepath.Join("testdata", "golden", "preln")
	cfgBytes, _ := os.ReadFile(filepath.Join(src, "config.json"))
	weights, _ := os.ReadFile(filepath.Join(src, "model.safetensors"))
	mk := func(cfg string, w []byte) string {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644)
		if w != nil {
			os.WriteFile(filepath.Join(dir, "model.safetensors"), w, 0o644)
		}
		return dir
	}
	var cfg map[string]any
	json.Unmarshal(cfgBytes, &cfg)
	cfg["ffn_dim"] = 64
	wrongShape, _ := json.Marshal(cfg)
	cfg["ffn_dim"] = 48
	cfg["num_hidden_layers"] = 3
	moreLayers, _ := json.Marshal(cfg)
	cfg["num_hidden_layers"] = 1
	fewerLayers, _ := json.Marshal(cfg)
	cases := []struct {
		name string
		dir  string
		want []string
	}{
		{"shape contradicts config", mk(string(wrongShape), weights), []string{"fc1.", "shape", "config.json"}},
		{"missing tensors", mk(string(moreLayers), weights), []string{"missing", "layers.2."}},
		{"extra tensors", mk(string(fewerLayers), weights), []string{"not part of this OPT model", "layers.1."}},
		{"no weights", mk(string(cfgBytes), nil), []string{"model.safetensors"}},
		{"truncated weights", mk(string(cfgBytes), weights[:len(weights)/2]), []string{"model.safetensors"}},
		{"bad config", mk(`{"model_type": "llama"}`, weights), []string{"config.json", "model_type"}},
	}
	for _, c := range cases {
		_, err := Load(newCPU(t, 1), c.dir, LoadOptions{})
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, w)
			}
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(optConfig(768, 3072, 12, 12, 768, true)))
	f.Add([]byte(optConfig(1024, 4096, 24, 16, 512, false)))
	b, _ := os.ReadFile(filepath.Join("testdata", "golden", "postln", "config.json"))
	f.Add(b)
	f.Add([]byte(`{"model_type":"opt","hidden_size":1e300}`))
	f.Add([]byte(`{}`))
	for _, name := range llamaCases {
		b, _ := os.ReadFile(filepath.Join("testdata", "llama", name, "config.json"))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			return
		}
		// (The LLaMA family's head_dim need not divide hidden_size.)
		if cfg.Validate() != nil || (!cfg.IsLlamaFamily() && cfg.HiddenSize%cfg.NumHeads != 0) ||
			cfg.NumHeads%cfg.KVHeads() != 0 || cfg.HeadSize() <= 0 {
			t.Fatalf("accepted an invalid config: %+v", cfg)
		}
	})
}
