// Package model holds gochat's transformer decoders: OPT and the LLaMA
// family (Llama, Mistral, Qwen2, Qwen3), chosen by config.json's model_type.
// A Model is a Config plus a flat parameter buffer with named views (Params)
// on a kernels.Device; every family has the same API, and each lives in its
// own file (opt.go, llama.go) that reads top to bottom as its architecture. Forward and Backward are straight lists of kernel calls in
// the style of llm.c: the forward reads top to bottom as the architecture, the
// backward is the same list reversed. Activations live in explicit buffers
// (Acts) so their memory is visible and reusable; decoding for generation uses
// a KV cache (Cache). The package knows nothing about optimizers, ranks or
// training stages.
package model

import (
	"fmt"
	"strings"

	"github.com/gochat-ai/gochat/kernels"
)

// IgnoreIndex marks a target position that contributes no loss.
const IgnoreIndex = -100

// Options choose optional parts of a Model.
type Options struct {
	// ValueHead adds v_head ([1,P], no bias): one scalar per position, read
	// from the final hidden state. Reward models and critics have one.
	ValueHead bool
	// DType is the element type of the parameters: F32 (the default when
	// zero) or BF16. With BF16 every matmul is a bf16 matmul (inputs
	// rounded to bf16, fp32 accumulation) and LayerNorm, softmax, losses
	// and activations stay fp32; gradients are always F32 (an optimizer
	// keeps fp32 master weights, their high half being these, see
	// optim.AdamW).
	DType kernels.DType
}

// Model is a decoder (OPTForCausalLM, LlamaForCausalLM, ..., optionally
// with a value head) on a device.
type Model struct {
	Config *Config
	Dev    kernels.Device
	Params *Params
	// Grads has the layout of Params; nil until AllocGrads. For a model
	// allocated with FreezeBase set, only the value head's gradient exists
	// (Grads.VHead, nil without a value head) and Grads.Flat is nil.
	Grads *Params
	// FreezeBase skips the gradients of the base weights in Backward (LoRA
	// with only the adapters trained); the value head still gets its
	// gradient, and input gradients still flow. Set it before AllocGrads so
	// that no base gradients are allocated; clearing it later needs
	// AllocGrads again (Backward says so).
	FreezeBase bool
	// Hook, when set, is told before a pass reads a part of the weights and
	// after it is done with it (ParamHook); nil means every weight is
	// always present.
	Hook ParamHook

	opts    Options
	specs   []paramSpec
	adapter Adapter
	ropeInv []float32 // the LLaMA family's rotary inverse frequencies [HS/2] (host; shared with WithParams views)
}

// ParamHook lets a caller keep weights in memory only while a pass reads
// them and act on gradients as soon as they are complete: ZeRO-3 gathers a
// layer's parameters from their shards just before it runs and releases
// them after; ZeRO-2 reduce-scatters a layer's gradients as soon as its
// backward is done. Part l ≥ 0 is decoder layer l (LayerRange); part −1
// is every weight outside the layers (embeddings, projections, the final
// LayerNorm, lm_head, the value head).
//
// Forward calls Acquire(−1, false), then Acquire(l, false) and Release(l,
// false) around each layer, then Release(−1, false). Backward does the same
// in reverse with backward = true: between Acquire(p, true) and Release(p,
// true) the pass reads and accumulates into part p's gradients, and writes
// them nowhere else (a hook that released gradient memory makes it
// resident again in Acquire); after Release(p, true) part p's gradients
// hold everything this pass adds to them. Every pass makes the same calls in
// the same order, whatever the batch, so ranks that shard weights call
// their collectives in step. Decode (and so Generate) calls no hook: a
// caller acquires every part first. An error from the hook ends the pass
// with it.
type ParamHook interface {
	Acquire(part int, backward bool) error
	Release(part int, backward bool) error
}

// LayerRange is where decoder layer l's weights lie in Params.Flat (and its
// gradients in Grads.Flat): n elements from off. The layers are
// consecutive; everything else is before the first or after the last.
func (m *Model) LayerRange(l int) (off, n int) {
	lo, hi := -1, -1
	prefix := fmt.Sprintf("layers.%d.", l)
	for _, s := range m.specs {
		if strings.HasPrefix(s.name, prefix) {
			if lo < 0 {
				lo = s.offset
			}
			hi = s.offset + s.size()
		}
	}
	return lo, hi - lo
}

// New returns a model with zeroed weights on dev.
func New(dev kernels.Device, cfg *Config, opts Options) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch opts.DType {
	case 0:
		opts.DType = kernels.F32
	case kernels.F32, kernels.BF16:
	default:
		return nil, fmt.Errorf("model: parameters in %v are not supported (f32 or bf16)", opts.DType)
	}
	specs := cfg.paramSpecs(opts.ValueHead)
	n := 0
	for _, s := range specs {
		n += s.size()
	}
	flat, err := dev.Alloc(opts.DType, n)
	if err != nil {
		return nil, fmt.Errorf("model: %d parameters in %v: %w", n, opts.DType, err)
	}
	m := &Model{Config: cfg, Dev: dev, Params: newParams(cfg, specs, flat), opts: opts, specs: specs}
	if cfg.IsLlamaFamily() {
		if m.ropeInv, err = kernels.RoPEInvFreq(cfg.HeadSize(), cfg.RopeTheta, cfg.RopeScaling); err != nil {
			dev.Free(flat)
			return nil, fmt.Errorf("model: %w", err)
		}
	}
	return m, nil
}

// DType is the element type of the parameters (F32 or BF16).
func (m *Model) DType() kernels.DType { return m.opts.DType }

// Free releases the parameters and gradients; m must not be used
// afterwards.
func (m *Model) Free() {
	m.Dev.Free(m.Params.Flat)
	m.freeGrads()
}

func (m *Model) freeGrads() {
	if m.Grads != nil {
		if m.Grads.Flat != nil {
			m.Dev.Free(m.Grads.Flat)
		} else {
			m.Dev.Free(m.Grads.VHead)
		}
		m.Grads = nil
	}
}

// HasValueHead reports whether the model has v_head.
func (m *Model) HasValueHead() bool { return m.opts.ValueHead }

// NumParams is the number of parameters (the tied lm_head counted once).
func (m *Model) NumParams() int { return m.Params.Flat.Len() }

// AllocGrads allocates zeroed gradient buffers with the parameters' layout:
// every parameter's, or, with FreezeBase set, only the value head's (the one
// gradient Backward then writes; a frozen model without a value head gets
// none). Gradients that exist already are kept when they cover what is
// trained: full gradients also serve a model frozen later (Backward then
// leaves the base part alone), while value-head-only gradients are replaced
// by full ones once FreezeBase is cleared.
// Gradients are F32 whatever the parameters' DType.
func (m *Model) AllocGrads() error {
	switch {
	case m.Grads != nil && (m.Grads.Flat != nil || m.FreezeBase):
		// Already covers what Backward writes.
	case m.FreezeBase:
		g := &Params{Layers: make([]LayerParams, m.Config.NumLayers)}
		if _, shape, ok := m.ParamRange("v_head.weight"); ok {
			b, err := m.Dev.Alloc(kernels.F32, shape[0]*shape[1])
			if err != nil {
				return fmt.Errorf("model: value-head gradient: %w", err)
			}
			g.VHead = b
		}
		m.freeGrads()
		m.Grads = g
	default:
		b, err := m.Dev.Alloc(kernels.F32, m.NumParams())
		if err != nil {
			return fmt.Errorf("model: gradients of %d parameters: %w", m.NumParams(), err)
		}
		m.freeGrads()
		m.Grads = newParams(m.Config, m.specs, b)
	}
	return nil
}

// GradElems is the number of gradient elements allocated (0 before
// AllocGrads): NumParams, or only the value head's with FreezeBase.
func (m *Model) GradElems() int {
	switch {
	case m.Grads == nil:
		return 0
	case m.Grads.Flat != nil:
		return m.Grads.Flat.Len()
	case m.Grads.VHead != nil:
		return m.Grads.VHead.Len()
	}
	return 0
}

// ZeroGrads sets every gradient to zero.
func (m *Model) ZeroGrads() {
	switch {
	case m.Grads == nil:
	case m.Grads.Flat != nil:
		m.Dev.Zero(m.Grads.Flat)
	case m.Grads.VHead != nil:
		m.Dev.Zero(m.Grads.VHead)
	}
}

// ParamNames lists the parameters' short names (Hugging Face names without
// the decoder prefix, "model.decoder." for OPT and "model." for the LLaMA
// family; "lm_head.weight" and "v_head.weight" as is) in buffer order.
func (m *Model) ParamNames() []string {
	names := make([]string, len(m.specs))
	for i, s := range m.specs {
		names[i] = s.name
	}
	return names
}

// ParamRange returns the offset and shape of a named parameter in the flat
// buffer (see ParamNames).
func (m *Model) ParamRange(name string) (offset int, shape []int, ok bool) {
	for _, s := range m.specs {
		if s.name == name {
			return s.offset, s.shape, true
		}
	}
	return 0, nil, false
}

// ParamView returns the view of a named parameter in p (Params or Grads).
// Gradients allocated for a frozen base (see AllocGrads) have only
// "v_head.weight".
func (m *Model) ParamView(p *Params, name string) (kernels.Buffer, error) {
	off, shape, ok := m.ParamRange(name)
	if !ok {
		return nil, fmt.Errorf("model: no parameter %q", name)
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if p.Flat == nil {
		if name == "v_head.weight" && p.VHead != nil {
			return p.VHead, nil
		}
		return nil, fmt.Errorf("model: %q has no buffer here (gradients allocated for a frozen base)", name)
	}
	return p.Flat.Slice(off, n), nil
}
