package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
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

// PresetNames lists the built-in architectures.
func PresetNames() []string {
	var names []string
	for k := range presets {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// PresetConfig returns the architecture of a released OPT model by name
// ("opt-125m", "facebook/opt-1.3b", ...), without weights.
func PresetConfig(name string) (*Config, error) {
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
// does: linear and embedding weights from N(0, std²) (std = 0.02 for OPT),
// biases zero, LayerNorm weights one, the padding row of embed_tokens zero.
func (m *Model) InitRandom(seed uint64, std float64) {
	rng := rand.New(rand.NewPCG(seed, 0x6F70742D))
	var host []float32
	for _, s := range m.specs {
		host = slices.Grow(host[:0], s.size())[:s.size()]
		w := host
		clear(w)
		switch {
		case strings.Contains(s.name, "layer_norm") && strings.HasSuffix(s.name, ".weight"):
			for i := range w {
				w[i] = 1
			}
		case strings.HasSuffix(s.name, ".bias"):
		default:
			for i := range w {
				w[i] = float32(rng.NormFloat64() * std)
			}
		}
		if s.name == "embed_tokens.weight" {
			P := m.Config.WordEmbedProjDim
			pad := m.Config.PadTokenID
			clear(w[pad*P : (pad+1)*P])
		}
		m.Dev.WriteF32(m.Params.Flat.Slice(s.offset, s.size()), w)
	}
}
