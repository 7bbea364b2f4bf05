package model

import "github.com/gochat-ai/gochat/kernels"

// Site names one of the linear layers of a decoder layer.
type Site int

// The linear layers of a decoder layer (see Linears). SiteQKV is q_proj,
// k_proj and v_proj fused into one matrix (output columns q, then k, then
// v); the LLaMA family's SiteFC1 is gate_proj and up_proj fused likewise.
const (
	SiteQKV Site = iota
	SiteOut
	SiteFC1
	SiteFC2
	NumSites
)

// Linear is one Hugging Face linear layer of a site.
type Linear struct {
	// Name is the module name relative to the layer, e.g.
	// "self_attn.q_proj" (HFPrefix() + "layers.N." + Name is the full one).
	Name string
	// In and Out are its input and output sizes; Col is its first output
	// column within the site's fused output (the sum of the Outs before it).
	In, Out, Col int
}

// Linears lists a site's Hugging Face linear layers in output-column order:
//
//	site     OPT                            LLaMA family
//	SiteQKV  self_attn.{q,k,v}_proj [H→H]   self_attn.{q,k,v}_proj [H→NH·HS, NKV·HS, NKV·HS]
//	SiteOut  self_attn.out_proj             self_attn.o_proj [NH·HS→H]
//	SiteFC1  fc1 [H→F]                      mlp.gate_proj, mlp.up_proj [H→F each]
//	SiteFC2  fc2 [F→H]                      mlp.down_proj [F→H]
func (c *Config) Linears(s Site) []Linear {
	H, F := c.HiddenSize, c.FFNDim
	var ls []Linear
	add := func(name string, in, out int) {
		col := 0
		if n := len(ls); n > 0 {
			col = ls[n-1].Col + ls[n-1].Out
		}
		ls = append(ls, Linear{Name: name, In: in, Out: out, Col: col})
	}
	if c.IsLlamaFamily() {
		q, kv := c.NumHeads*c.HeadSize(), c.KVHeads()*c.HeadSize()
		switch s {
		case SiteQKV:
			add("self_attn.q_proj", H, q)
			add("self_attn.k_proj", H, kv)
			add("self_attn.v_proj", H, kv)
		case SiteOut:
			add("self_attn.o_proj", q, H)
		case SiteFC1:
			add("mlp.gate_proj", H, F)
			add("mlp.up_proj", H, F)
		case SiteFC2:
			add("mlp.down_proj", F, H)
		}
		return ls
	}
	switch s {
	case SiteQKV:
		for _, n := range []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"} {
			add(n, H, H)
		}
	case SiteOut:
		add("self_attn.out_proj", H, H)
	case SiteFC1:
		add("fc1", H, F)
	case SiteFC2:
		add("fc2", F, H)
	}
	return ls
}

// HFPrefix is what Hugging Face puts before the decoder's module and weight
// names: "model.decoder." for OPT, "model." for the LLaMA family (so layer
// 3's q_proj is "model.decoder.layers.3.self_attn.q_proj" or
// "model.layers.3.self_attn.q_proj").
func (c *Config) HFPrefix() string { return c.family().prefix() }

// Adapter adds trainable terms to decoder layers' linear layers (LoRA). The
// model calls it right after each base matmul of a layer.
type Adapter interface {
	// Reserve allocates what LinearForward and LinearBackward need for
	// passes of up to n rows; Forward and Decode call it first, so an
	// allocation failure is an error there and not a panic mid-pass.
	Reserve(n int) error
	// LinearForward adds the adapter's term to out[N,OC] for input inp[N,C]
	// of layer l's site s, keeping what its backward needs.
	LinearForward(l int, s Site, out, inp kernels.Buffer, n int)
	// LinearBackward accumulates into dinp[N,C] the adapter term's input
	// gradient for upstream dout[N,OC], and accumulates its own parameter
	// gradients. It follows LinearForward for the same (l, s, inp).
	LinearBackward(l int, s Site, dinp, dout, inp kernels.Buffer, n int)
}

// SetAdapter attaches an adapter (nil detaches it).
func (m *Model) SetAdapter(a Adapter) { m.adapter = a }

// linearForward is one of layer l's linear layers: out = inp·wᵀ + b plus the
// adapter's term.
func (m *Model) linearForward(l int, s Site, out, inp, w, b kernels.Buffer, n, c, oc int) {
	m.Dev.MatmulForward(out, inp, w, b, n, c, oc)
	if m.adapter != nil {
		m.adapter.LinearForward(l, s, out, inp, n)
	}
}

// linearBackward is linearForward's backward: dinp is overwritten, the base
// weight gradients accumulate unless the base is frozen.
func (m *Model) linearBackward(l int, s Site, dinp, dw, db, dout, inp, w kernels.Buffer, n, c, oc int) {
	if m.FreezeBase {
		dw, db = nil, nil
	}
	m.Dev.MatmulBackward(dinp, dw, db, dout, inp, w, n, c, oc)
	if s == SiteQKV && db != nil && !m.Config.IsLlamaFamily() {
		// k_proj.bias adds q·b_k to every score of a query's row, which
		// softmax ignores: its gradient is exactly zero. Computed, it is
		// rounding noise that Adam would amplify into a random walk.
		// (Under RoPE the key bias is rotated differently at every
		// position, so the LLaMA family's is not zero.)
		h := oc / 3
		m.Dev.Zero(db.Slice(h, h))
	}
	if m.adapter != nil {
		m.adapter.LinearBackward(l, s, dinp, dout, inp, n)
	}
}
