package model

import "github.com/gochat-ai/gochat/kernels"

// paramSpec is one named tensor in the flat parameter buffer.
type paramSpec struct {
	name   string // Hugging Face name without the decoder prefix (family.prefix), e.g. "layers.0.fc1.weight"
	shape  []int
	offset int // in elements
}

func (s paramSpec) size() int {
	n := 1
	for _, d := range s.shape {
		n *= d
	}
	return n
}

// paramSpecs lists the parameters in buffer order (the family's order),
// offsets filled in.
func (c *Config) paramSpecs(valueHead bool) []paramSpec {
	specs := c.family().paramSpecs(c, valueHead)
	off := 0
	for i := range specs {
		specs[i].offset = off
		off += specs[i].size()
	}
	return specs
}

// LayerParams are views of one decoder layer's weights. Optional parts are
// nil. The fields name OPT's tensors; the LLaMA family's are in the same
// roles (see each field).
type LayerParams struct {
	AttnLNW, AttnLNB kernels.Buffer // [H] (LLaMA: input_layernorm, no bias)
	QKVW             kernels.Buffer // [3H,H]: q_proj, k_proj, v_proj stacked (LLaMA: [(NH+2·NKV)·HS,H])
	QKVB             kernels.Buffer // [3H] (LLaMA: [(NH+2·NKV)·HS] with q/k/v biases)
	QNormW, KNormW   kernels.Buffer // [HS]: Qwen3's q_norm and k_norm; nil otherwise
	OutW, OutB       kernels.Buffer // [H,H], [H] (LLaMA: o_proj [H,NH·HS])
	FFNLNW, FFNLNB   kernels.Buffer // [H] (the layer's final_layer_norm; LLaMA: post_attention_layernorm)
	FC1W, FC1B       kernels.Buffer // [F,H], [F] (LLaMA: gate_proj, up_proj stacked [2F,H])
	FC2W, FC2B       kernels.Buffer // [H,F], [H] (LLaMA: down_proj)
}

// Params are named views into one flat buffer. The same type holds
// gradients (a second flat buffer with the same layout).
type Params struct {
	Flat       kernels.Buffer // every parameter, in paramSpecs order
	EmbedToks  kernels.Buffer // [V,P]
	EmbedPos   kernels.Buffer // [MaxPositions+2,H] (OPT)
	ProjectIn  kernels.Buffer // [H,P] or nil
	ProjectOut kernels.Buffer // [P,H] or nil
	FinalLNW   kernels.Buffer // [H] or nil (LLaMA: norm)
	FinalLNB   kernels.Buffer // [H] or nil
	Layers     []LayerParams
	LMHead     kernels.Buffer // [V,P]: EmbedToks when tied
	VHead      kernels.Buffer // [1,P] or nil
}

// newParams lays out views over flat.
func newParams(c *Config, specs []paramSpec, flat kernels.Buffer) *Params {
	offs := make(map[string]paramSpec, len(specs))
	for _, s := range specs {
		offs[s.name] = s
	}
	// A missing tensor is a nil view, which kernels treat as absent.
	view := func(name string) kernels.Buffer {
		s, ok := offs[name]
		if !ok {
			return nil
		}
		return flat.Slice(s.offset, s.size())
	}
	span := func(first string, n int) kernels.Buffer { // n elements from first's offset
		return flat.Slice(offs[first].offset, n)
	}
	p := &Params{
		Flat:      flat,
		EmbedToks: view("embed_tokens.weight"),
		VHead:     view("v_head.weight"),
		Layers:    make([]LayerParams, c.NumLayers),
	}
	p.LMHead = p.EmbedToks
	if !c.TieWordEmbeddings {
		p.LMHead = view("lm_head.weight")
	}
	c.family().views(p, c, view, span)
	return p
}
