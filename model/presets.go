package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/gochat-ai/gochat/kernels"
)

// presets are the released facebook/opt-* architectures (config.json values).
var presets = map[string]struct {
	h, f, l, nh, p int
	pre            bool
}{
	"opt-125m": {768, 3072, 12, 12, 768, true},
	"opt-350m": {1024, 4096, 24, 16, 512, false},
	"opt-1.3b": {2048, 8192, 24, 32, 2048, true},
	"opt-2.7b": {2560, 10240, 32, 32, 2560, true},
	"opt-6.7b": {4096, 16384, 32, 32, 4096, true},
	"opt-13b":  {5120, 20480, 40, 40, 5120, true},
	"opt-30b":  {7168, 28672, 48, 56, 7168, true},
	"opt-66b":  {9216, 36864, 64, 72, 9216, true},
}

// llamaPresets are LLaMA-family architectures: tiny ones for tests and
// demos, a ~125M-parameter Llama-shaped one to set beside opt-125m, and the
// shapes of released models (config.json values) for benchmarks.
var llamaPresets = map[string]func() Config{
	// llama-tiny: GQA (4 heads, 2 KV heads) with the Llama-2/TinyLlama
	// vocabulary (32000), 2 layers.
	"llama-tiny": func() Config {
		c := llamaDefaults("llama")
		c.VocabSize, c.HiddenSize, c.FFNDim, c.NumLayers, c.NumHeads, c.NumKVHeads = 32000, 64, 176, 2, 4, 2
		c.RMSNormEps, c.noBOS = 1e-5, false
		return c
	},
	// qwen2-tiny: Qwen2.5's vocabulary, q/k/v biases, tied embeddings; ids
	// as Qwen2.5-Instruct's (eos <|im_end|>, pad <|endoftext|>).
	"qwen2-tiny": func() Config {
		c := llamaDefaults("qwen2")
		c.VocabSize, c.HiddenSize, c.FFNDim, c.NumLayers, c.NumHeads, c.NumKVHeads = 151936, 64, 176, 2, 4, 2
		c.QKVBias, c.TieWordEmbeddings, c.RopeTheta = true, true, 1e6
		c.BOSTokenID, c.EOSTokenID, c.PadTokenID, c.noBOS, c.noPad = 151643, 151645, 151643, false, false
		return c
	},
	// llama-125m: opt-125m's width and depth (768, 12 layers, 12 heads) in
	// the Llama shape: 4 KV heads, SwiGLU of 2048, 32000 untied: 124.7M.
	"llama-125m": func() Config {
		c := llamaDefaults("llama")
		c.VocabSize, c.HiddenSize, c.FFNDim, c.NumLayers, c.NumHeads, c.NumKVHeads = 32000, 768, 2048, 12, 12, 4
		c.RMSNormEps, c.noBOS = 1e-5, false
		return c
	},
	// llama-1b: meta-llama/Llama-3.2-1B (llama3 rope scaling, tied).
	"llama-1b": func() Config {
		c := llamaDefaults("llama")
		c.VocabSize, c.HiddenSize, c.FFNDim, c.NumLayers, c.NumHeads, c.NumKVHeads = 128256, 2048, 8192, 16, 32, 8
		c.MaxPositions, c.RMSNormEps, c.RopeTheta, c.TieWordEmbeddings = 131072, 1e-5, 500000, true
		c.RopeScaling = kernels.RoPEScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}
		c.BOSTokenID, c.EOSTokenID, c.noBOS = 128000, 128001, false
		c.PadTokenID = c.EOSTokenID
		return c
	},
	// qwen2.5-0.5b: Qwen/Qwen2.5-0.5B.
	"qwen2.5-0.5b": func() Config {
		c := llamaDefaults("qwen2")
		c.VocabSize, c.HiddenSize, c.FFNDim, c.NumLayers, c.NumHeads, c.NumKVHeads = 151936, 896, 4864, 24, 14, 2
		c.QKVBias, c.TieWordEmbeddings, c.RopeTheta = true, true, 1e6
		c.BOSTokenID, c.EOSTokenID, c.PadTokenID, c.noBOS = 151643, 151643, 151643, false
		return c
	},
	// qwen3-0.6b: Qwen/Qwen3-0.6B (q/k norm, head_dim 128 ≠ H/NH).
	"qwen3-0.6b": func() Config {
		c := llamaDefaults("qwen3")
		c.VocabSize, c.HiddenSize, c.FFNDim, c.NumLayers, c.NumHeads, c.NumKVHeads = 151936, 1024, 3072, 28, 16, 8
		c.MaxPositions, c.TieWordEmbeddings, c.RopeTheta, c.QKNorm = 40960, true, 1e6, true
		c.BOSTokenID, c.EOSTokenID, c.PadTokenID, c.noBOS = 151643, 151645, 151643, false
		return c
	},
}

// PresetNames lists the built-in architectures.
func PresetNames() []string {
	var names []string
	for k := range presets {
		names = append(names, k)
	}
	for k := range llamaPresets {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// PresetConfig returns a built-in architecture by name, without weights: a
// released OPT model ("opt-125m", "facebook/opt-1.3b", ...) or a
// LLaMA-family shape ("llama-tiny", "qwen2-tiny", "llama-125m", "llama-1b",
// "qwen2.5-0.5b", "qwen3-0.6b").
func PresetConfig(name string) (*Config, error) {
	if f, ok := llamaPresets[name]; ok {
		c := f()
		c.TorchDtype = "bfloat16"
		if c.HeadDim == 0 {
			c.HeadDim = c.HiddenSize / c.NumHeads
		}
		c.WordEmbedProjDim = c.HiddenSize
		if c.noPad {
			c.PadTokenID = max(c.EOSTokenID, 0)
		}
		return &c, c.Validate()
	}
	p, ok := presets[strings.TrimPrefix(name, "facebook/")]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (built in: %s)", name, strings.Join(PresetNames(), ", "))
	}
	c := defaultConfig()
	c.ModelType, c.VocabSize, c.TorchDtype = "opt", 50272, "float16"
	c.HiddenSize, c.FFNDim, c.NumLayers, c.NumHeads, c.WordEmbedProjDim, c.DoLayerNormBefore = p.h, p.f, p.l, p.nh, p.p, p.pre
	return &c, c.Validate()
}

// InitRandom initialises the weights as transformers' OPTPreTrainedModel
// and LlamaPreTrainedModel do: linear and embedding weights from N(0, std²)
// (initializer_range, 0.02), biases zero, LayerNorm and RMSNorm weights one,
// the padding row of embed_tokens zero (when the config has a pad token).
func (m *Model) InitRandom(seed uint64, std float64) {
	rng := rand.New(rand.NewPCG(seed, 0x6F70742D))
	var host []float32
	for _, s := range m.specs {
		host = slices.Grow(host[:0], s.size())[:s.size()]
		w := host
		clear(w)
		switch {
		case strings.HasSuffix(s.name, "norm.weight"):
			for i := range w {
				w[i] = 1
			}
		case strings.HasSuffix(s.name, ".bias"):
		default:
			for i := range w {
				w[i] = float32(rng.NormFloat64() * std)
			}
		}
		if s.name == "embed_tokens.weight" && !m.Config.noPad {
			P := m.Config.WordEmbedProjDim
			pad := m.Config.PadTokenID
			clear(w[pad*P : (pad+1)*P])
		}
		m.Dev.WriteF32(m.Params.Flat.Slice(s.offset, s.size()), w)
	}
}
