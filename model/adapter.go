package model

import "github.com/gochat-ai/gochat/kernels"

// Site names one of the linear layers of a decoder layer.
type Site int

// The linear layers of a decoder layer. SiteQKV is q_proj, k_proj and v_proj
// fused into one [3H,H] matrix (output columns q, then k, then v).
const (
	SiteQKV Site = iota
	SiteOut
	SiteFC1
	SiteFC2
	NumSites
)

// Linears lists a site's Hugging Face module names (relative to the layer,
// e.g. "self_attn.q_proj"), in output-column order, with in and out sizes.
func (c *Config) Linears(s Site) (names []string, in, out int) {
	H, F := c.HiddenSize, c.FFNDim
	switch s {
	case SiteQKV:
		return []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, H, H
	case SiteOut:
		return []string{"self_attn.out_proj"}, H, H
	case SiteFC1:
		return []string{"fc1"}, H, F
	case SiteFC2:
		return []string{"fc2"}, F, H
	}
	return nil, 0, 0
}

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
	if s == SiteQKV && db != nil {
		// k_proj.bias adds q·b_k to every score of a query's row, which
		// softmax ignores: its gradient is exactly zero. Computed, it is
		// rounding noise that Adam would amplify into a random walk.
		h := oc / 3
		m.Dev.Zero(db.Slice(h, h))
	}
	if m.adapter != nil {
		m.adapter.LinearBackward(l, s, dinp, dout, inp, n)
	}
}
