package model

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// paramSpec is one named tensor in the flat parameter buffer.
type paramSpec struct {
	name   string // Hugging Face name without the "model.decoder." prefix, e.g. "layers.0.fc1.weight"
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

// paramSpecs lists the parameters in buffer order: the embeddings and the
// decoder-level weights, then each layer as one contiguous block (q, k and v
// adjacent so they form one [3H,H] matrix), then lm_head when untied, then the
// value head when present. Offsets are filled in.
func (c *Config) paramSpecs(valueHead bool) []paramSpec {
	H, F, P, V := c.HiddenSize, c.FFNDim, c.WordEmbedProjDim, c.VocabSize
	var specs []paramSpec
	add := func(name string, shape ...int) { specs = append(specs, paramSpec{name: name, shape: shape}) }
	ln := func(prefix string) {
		if c.LayerNormElementwiseAffine {
			add(prefix+".weight", H)
			add(prefix+".bias", H)
		}
	}
	linear := func(prefix string, out, in int) {
		add(prefix+".weight", out, in)
	}
	bias := func(prefix string, out int) {
		if c.EnableBias {
			add(prefix+".bias", out)
		}
	}
	add("embed_tokens.weight", V, P)
	add("embed_positions.weight", c.MaxPositions+2, H)
	if c.HasProjections() {
		add("project_in.weight", H, P)
		add("project_out.weight", P, H)
	}
	if c.HasFinalLayerNorm() {
		ln("final_layer_norm")
	}
	for l := 0; l < c.NumLayers; l++ {
		p := fmt.Sprintf("layers.%d.", l)
		ln(p + "self_attn_layer_norm")
		linear(p+"self_attn.q_proj", H, H)
		linear(p+"self_attn.k_proj", H, H)
		linear(p+"self_attn.v_proj", H, H)
		bias(p+"self_attn.q_proj", H)
		bias(p+"self_attn.k_proj", H)
		bias(p+"self_attn.v_proj", H)
		linear(p+"self_attn.out_proj", H, H)
		bias(p+"self_attn.out_proj", H)
		ln(p + "final_layer_norm")
		linear(p+"fc1", F, H)
		bias(p+"fc1", F)
		linear(p+"fc2", H, F)
		bias(p+"fc2", H)
	}
	if !c.TieWordEmbeddings {
		add("lm_head.weight", V, P)
	}
	if valueHead {
		add("v_head.weight", 1, P)
	}
	off := 0
	for i := range specs {
		specs[i].offset = off
		off += specs[i].size()
	}
	return specs
}

// LayerParams are views of one decoder layer's weights. Optional parts are nil.
type LayerParams struct {
	AttnLNW, AttnLNB kernels.Buffer // [H]
	QKVW             kernels.Buffer // [3H,H]: q_proj, k_proj, v_proj stacked
	QKVB             kernels.Buffer // [3H]
	OutW, OutB       kernels.Buffer // [H,H], [H]
	FFNLNW, FFNLNB   kernels.Buffer // [H] (the layer's final_layer_norm)
	FC1W, FC1B       kernels.Buffer // [F,H], [F]
	FC2W, FC2B       kernels.Buffer // [H,F], [H]
}

// Params are named views into one flat buffer. The same type holds
// gradients (a second flat buffer with the same layout).
type Params struct {
	Flat       kernels.Buffer // every parameter, in paramSpecs order
	EmbedToks  kernels.Buffer // [V,P]
	EmbedPos   kernels.Buffer // [MaxPositions+2,H]
	ProjectIn  kernels.Buffer // [H,P] or nil
	ProjectOut kernels.Buffer // [P,H] or nil
	FinalLNW   kernels.Buffer // [H] or nil
	FinalLNB   kernels.Buffer // [H] or nil
	Layers     []LayerParams
	LMHead     kernels.Buffer // [V,P]: EmbedToks when tied
	VHead      kernels.Buffer // [1,P] or nil
}

// newParams lays out views over flat.
func newParams(c *Config, specs []paramSpec, flat kernels.Buffer) *Params {
	views := make(map[string]kernels.Buffer, len(specs))
	offs := make(map[string]int, len(specs))
	for _, s := range specs {
		views[s.name] = flat.Slice(s.offset, s.size())
		offs[s.name] = s.offset
	}
	H := c.HiddenSize
	span := func(first string, n int) kernels.Buffer { // n elements from first's offset
		return flat.Slice(offs[first], n)
	}
	p := &Params{
		Flat:       flat,
		EmbedToks:  views["embed_tokens.weight"],
		EmbedPos:   views["embed_positions.weight"],
		ProjectIn:  views["project_in.weight"],
		ProjectOut: views["project_out.weight"],
		FinalLNW:   views["final_layer_norm.weight"],
		FinalLNB:   views["final_layer_norm.bias"],
		VHead:      views["v_head.weight"],
		Layers:     make([]LayerParams, c.NumLayers),
	}
	p.LMHead = p.EmbedToks
	if !c.TieWordEmbeddings {
		p.LMHead = views["lm_head.weight"]
	}
	for l := range p.Layers {
		pre := fmt.Sprintf("layers.%d.", l)
		lp := &p.Layers[l]
		lp.AttnLNW = views[pre+"self_attn_layer_norm.weight"]
		lp.AttnLNB = views[pre+"self_attn_layer_norm.bias"]
		lp.QKVW = span(pre+"self_attn.q_proj.weight", 3*H*H)
		if c.EnableBias {
			lp.QKVB = span(pre+"self_attn.q_proj.bias", 3*H)
		}
		lp.OutW = views[pre+"self_attn.out_proj.weight"]
		lp.OutB = views[pre+"self_attn.out_proj.bias"]
		lp.FFNLNW = views[pre+"final_layer_norm.weight"]
		lp.FFNLNB = views[pre+"final_layer_norm.bias"]
		lp.FC1W = views[pre+"fc1.weight"]
		lp.FC1B = views[pre+"fc1.bias"]
		lp.FC2W = views[pre+"fc2.weight"]
		lp.FC2B = views[pre+"fc2.bias"]
	}
	// A missing map entry yields a nil interface, which kernels treat as absent.
	return p
}
