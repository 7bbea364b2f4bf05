package model

import (
	"fmt"
	"strings"

	"github.com/gochat-ai/gochat/kernels"
)

// family is a decoder architecture. Model's passes are one loop for every
// family — upload the batch, embed, run the layers (with the ParamHook
// around each), the final norm, then the shared heads (lm_head, loss,
// value head) — and a family supplies each architecture-specific step.
// opt.go and llama.go each read top to bottom as their architecture.
type family interface {
	// paramSpecs lists the parameters in buffer order with Hugging Face
	// names relative to the decoder (see Model.ParamNames); each layer is
	// one contiguous block and the fused matrices (q|k|v, gate|up) are
	// adjacent tensors. Offsets are filled in by the caller.
	paramSpecs(c *Config, valueHead bool) []paramSpec
	// views sets the family's views in p (the decoder-level ones and every
	// layer's); view returns a named tensor (nil when absent), span n
	// elements from a named tensor's offset (for fused matrices).
	views(p *Params, c *Config, view func(string) kernels.Buffer, span func(string, int) kernels.Buffer)
	// prefix is what Hugging Face puts before the decoder's weight names
	// ("model.decoder." for OPTForCausalLM, "model." for LlamaForCausalLM).
	prefix() string
	// positions are the position ids a pass over a [b,t] batch with this
	// mask uses (start[b] real tokens before this chunk; nil: none).
	positions(mask []int32, b, t int, start []int32) []int32
	// checkPositions refuses position ids beyond max_position_embeddings.
	checkPositions(c *Config, pos []int32) error

	// layoutActs lays out the activations of a [b,t] pass (see
	// Model.layoutActs).
	layoutActs(m *Model, a *Acts, b, t int, opts ActsOptions, w WeightsInfo, buf func(kernels.DType, int) kernels.Buffer)
	// embed writes the decoder input a.resid[0] from a.ids and a.pos.
	embed(m *Model, a *Acts)
	// layerForward runs layer l from a.resid[l] into a.resid[l+1],
	// saving what layerBackward reads.
	layerForward(m *Model, a *Acts, l int)
	// final writes the final hidden state a.y [N,P] from a.resid[L].
	final(m *Model, a *Acts)
	// finalBackward turns a.dy into the gradient of a.resid[L], in a.dA.
	finalBackward(m *Model, a *Acts, gr *Params)
	// layerBackward is layerForward reversed: a.dA holds the gradient of
	// the layer's output on entry and of its input on return.
	layerBackward(m *Model, a *Acts, gw *LayerParams, l int)
	// embedBackward accumulates the embeddings' gradients from a.dA.
	embedBackward(m *Model, a *Acts, gr *Params)

	// layoutCache allocates a KV cache's buffers with alloc.
	layoutCache(c *Config, kc *Cache, alloc func(kernels.DType, int) kernels.Buffer)
	// decode runs the decoder over the kc.chunk new positions already
	// uploaded (kc.ids, kc.pos, kc.mask), appending to the cache, and
	// returns the final hidden states [B·tn,P].
	decode(m *Model, kc *Cache, tn, t0 int) kernels.Buffer
}

// llamaTypes are the model_type values of the LLaMA family.
var llamaTypes = []string{"llama", "mistral", "qwen2", "qwen3"}

// SupportedModelTypes lists the config.json model_type values gochat reads.
func SupportedModelTypes() []string { return append([]string{"opt"}, llamaTypes...) }

// family returns c's architecture. An empty ModelType is OPT's (configs
// built in code).
func (c *Config) family() family {
	if c.IsLlamaFamily() {
		return llamaFamily{}
	}
	return optFamily{}
}

// IsLlamaFamily reports whether c is a LLaMA-family decoder (model_type
// llama, mistral, qwen2 or qwen3): RMSNorm, rotary embeddings, grouped-query
// attention and a SwiGLU MLP.
func (c *Config) IsLlamaFamily() bool {
	for _, t := range llamaTypes {
		if c.ModelType == t {
			return true
		}
	}
	return false
}

// unsupportedType is ParseConfig's error for a model_type it cannot read.
func unsupportedType(t string) error {
	return fmt.Errorf("field \"model_type\": unknown model_type %q (supported: %s)", t, strings.Join(SupportedModelTypes(), ", "))
}
