// Package lora implements LoRA adapters the DeepSpeed-Chat way (REFERENCE.md
// §6): every decoder-layer linear layer whose module name contains the
// pattern gets y = x·Wᵀ + b + (x·right)·left·scaling with right [in,r]
// (Kaiming-uniform), left [r,out] (zeros), scaling = lora_scaling/r, the base
// weights frozen. Adapters plug into model.Model as a model.Adapter; Fuse
// writes W + scaling·(right·left)ᵀ into a parameter buffer, which is how a
// fused Hugging Face checkpoint and the hybrid engine's inference workspace
// are made. LoRA dropout is not implemented (DeepSpeed-Chat's default is 0).
package lora

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/model"
)

// Config selects and sizes the adapters.
type Config struct {
	// Dim is the rank r (--lora-dim); 0 disables LoRA.
	Dim int
	// Scaling is lora_scaling; the term is multiplied by Scaling/Dim.
	// 0 means DeepSpeed-Chat's default 1.
	Scaling float64
	// ModuleName selects linear layers whose Hugging Face module name
	// (e.g. "model.decoder.layers.3.self_attn.q_proj" for OPT,
	// "model.layers.3.mlp.gate_proj" for the LLaMA family) contains it
	// (--lora-module-name). "" selects every linear layer of the decoder
	// layers ("layers."): for OPT the layers DeepSpeed-Chat's default
	// "decoder.layers." selects, for the LLaMA family those its llama
	// scripts select with "layers.".
	ModuleName string
}

// DefaultModules is the pattern an empty Config.ModuleName stands for.
const DefaultModules = "layers."

// part is the adapter of one Hugging Face linear layer. Within its site's
// output it owns columns [col, col+out).
type part struct {
	name          string // e.g. "layers.3.self_attn.q_proj"
	col, in, out  int
	right, left   kernels.Buffer // [in,r], [r,out]
	dright, dleft kernels.Buffer
	u             kernels.Buffer // [N,r] saved x·right
}

// LoRA holds the adapters of one model in two flat buffers (parameters and
// gradients). It implements model.Adapter.
type LoRA struct {
	cfg          Config
	dev          kernels.Device
	scale        float32
	Params       kernels.Buffer // every right and left matrix
	Grads        kernels.Buffer
	sites        [][model.NumSites][]*part // [layer][site]
	siteOut      [model.NumSites]int       // total output columns of each site
	du           kernels.Buffer            // [N,r] scratch
	names        []string
	baseRange    map[string][2]int // part name -> offset, size of its base weight in the model buffer
	numAdapted   int
	modelBuffers int
}

var _ model.Adapter = (*LoRA)(nil)

// Model is what New reads of the model it adapts: its configuration (the
// linear layers to select), its device, and where each selected layer's
// base weight lies in the flat parameter buffer (the layout Fuse writes
// into). *model.Model implements it.
type Model interface {
	ModelConfig() *model.Config
	Device() kernels.Device
	ParamRange(name string) (offset int, shape []int, ok bool)
}

var _ Model = (*model.Model)(nil)

// New creates adapters for the linear layers of m that cfg selects,
// initialised as DeepSpeed-Chat does (right ~ U(-1/√r, 1/√r), left = 0)
// from seed. It is an error when the pattern matches nothing.
func New(m Model, cfg Config, seed uint64) (*LoRA, error) {
	if cfg.Dim <= 0 {
		return nil, fmt.Errorf("lora: dimension must be > 0, got %d", cfg.Dim)
	}
	if cfg.Scaling == 0 {
		cfg.Scaling = 1
	}
	if cfg.ModuleName == "" {
		cfg.ModuleName = DefaultModules
	}
	c, d, r := m.ModelConfig(), m.Device(), cfg.Dim
	lo := &LoRA{cfg: cfg, dev: d, scale: float32(cfg.Scaling / float64(r)), baseRange: map[string][2]int{}}
	lo.sites = make([][model.NumSites][]*part, c.NumLayers)
	for s := range model.NumSites {
		for _, lin := range c.Linears(s) {
			lo.siteOut[s] += lin.Out
		}
	}
	total := 0
	var err error
	selectLayers(c, cfg, func(l int, s model.Site, col int, short string, in, out int) {
		off, _, ok := m.ParamRange(short + ".weight")
		if !ok {
			err = fmt.Errorf("lora: model has no %s.weight", short)
			return
		}
		lo.baseRange[short] = [2]int{off, in * out}
		lo.sites[l][s] = append(lo.sites[l][s], &part{name: short, col: col, in: in, out: out})
		lo.names = append(lo.names, short)
		total += (in + out) * r
	})
	if err != nil {
		return nil, err
	}
	if total == 0 {
		return nil, noMatch(c, cfg)
	}
	if lo.Params, err = d.Alloc(kernels.F32, total); err != nil {
		return nil, fmt.Errorf("lora: %d adapter parameters: %w", total, err)
	}
	if lo.Grads, err = d.Alloc(kernels.F32, total); err != nil {
		d.Free(lo.Params)
		return nil, fmt.Errorf("lora: %d adapter gradients: %w", total, err)
	}
	host := make([]float32, total)
	rng := rand.New(rand.NewPCG(seed, 0x6C6F7261))
	bound := 1 / math.Sqrt(float64(r))
	off := 0
	for _, layer := range lo.sites {
		for _, parts := range layer {
			for _, p := range parts {
				nr, nl := p.in*r, r*p.out
				for i := range nr {
					host[off+i] = float32((rng.Float64()*2 - 1) * bound)
				}
				p.right, p.dright = lo.Params.Slice(off, nr), lo.Grads.Slice(off, nr)
				p.left, p.dleft = lo.Params.Slice(off+nr, nl), lo.Grads.Slice(off+nr, nl)
				off += nr + nl
			}
		}
	}
	d.WriteF32(lo.Params, host)
	return lo, nil
}

// selectLayers calls visit for every linear layer of a decoder with config
// c whose Hugging Face module name (c.HFPrefix() + short) contains
// cfg.ModuleName, in layer, site, output-column order: the layer index, its
// site, its first output column within the site, its short name (e.g.
// "layers.3.self_attn.q_proj") and its in and out sizes.
func selectLayers(c *model.Config, cfg Config, visit func(l int, s model.Site, col int, short string, in, out int)) {
	for l := range c.NumLayers {
		for s := range model.NumSites {
			for _, lin := range c.Linears(s) {
				short := fmt.Sprintf("layers.%d.%s", l, lin.Name)
				if strings.Contains(c.HFPrefix()+short, cfg.ModuleName) {
					visit(l, s, lin.Col, short, lin.In, lin.Out)
				}
			}
		}
	}
}

func noMatch(c *model.Config, cfg Config) error {
	var names []string
	for s := range model.NumSites {
		for _, lin := range c.Linears(s) {
			names = append(names, c.HFPrefix()+"layers.0."+lin.Name)
		}
	}
	return fmt.Errorf("lora: --lora-module-name %q matches no linear layer (names look like %s)", cfg.ModuleName, strings.Join(names, ", "))
}

// Size is what New allocates for a model with config c, without a model:
// the number of adapter parameters (Params and Grads hold that many F32
// elements each) and the number of adapted linear layers. Errors are New's.
func Size(c *model.Config, cfg Config) (params, layers int, err error) {
	if cfg.Dim <= 0 {
		return 0, 0, fmt.Errorf("lora: dimension must be > 0, got %d", cfg.Dim)
	}
	if cfg.ModuleName == "" {
		cfg.ModuleName = DefaultModules
	}
	selectLayers(c, cfg, func(_ int, _ model.Site, _ int, _ string, in, out int) {
		params += (in + out) * cfg.Dim
		layers++
	})
	if layers == 0 {
		return 0, 0, noMatch(c, cfg)
	}
	return params, layers, nil
}

// ActsBytes is the device memory Reserve(n) holds for adapters of rank dim
// on layers adapted layers: every layer's [n,r] buffer for x·right and the
// shared [n,r] scratch of the backward.
func ActsBytes(layers, dim, n int) int {
	return (layers + 1) * n * dim * kernels.F32.Size()
}

// FuseBytes is the scratch Fuse allocates (and frees before it returns) to
// fuse adapters selected by cfg into parameters of type dt: the largest
// adapted weight in fp32 when dt is not F32, else nothing.
func FuseBytes(c *model.Config, cfg Config, dt kernels.DType) int {
	if dt == kernels.F32 {
		return 0
	}
	if cfg.ModuleName == "" {
		cfg.ModuleName = DefaultModules
	}
	most := 0
	selectLayers(c, cfg, func(_ int, _ model.Site, _ int, _ string, in, out int) { most = max(most, in*out) })
	return most * kernels.F32.Size()
}

// Adapted lists the adapted layers' names (e.g. "layers.0.self_attn.q_proj").
func (lo *LoRA) Adapted() []string { return lo.names }

// NumParams is the number of adapter parameters.
func (lo *LoRA) NumParams() int { return lo.Params.Len() }

// ZeroGrads zeroes the adapter gradients.
func (lo *LoRA) ZeroGrads() { lo.dev.Zero(lo.Grads) }

// Reserve implements model.Adapter: every part's [n,r] buffer for x·right
// and the shared [n,r] scratch of the backward, grown as needed.
func (lo *LoRA) Reserve(n int) error {
	need := n * lo.cfg.Dim
	grow := func(b *kernels.Buffer) error {
		if *b != nil && (*b).Len() >= need {
			return nil
		}
		nb, err := lo.dev.Alloc(kernels.F32, need)
		if err != nil {
			return fmt.Errorf("lora: activations for %d rows: %w", n, err)
		}
		lo.dev.Free(*b)
		*b = nb
		return nil
	}
	if err := grow(&lo.du); err != nil {
		return err
	}
	for _, layer := range lo.sites {
		for _, parts := range layer {
			for _, p := range parts {
				if err := grow(&p.u); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// saved returns p's [n,r] buffer for x·right (Reserve made it).
func (lo *LoRA) saved(p *part, n int) kernels.Buffer {
	return p.u.Slice(0, n*lo.cfg.Dim)
}

// LinearForward implements model.Adapter: for each adapted part,
// u = x·right and out[:, col:col+out] += scaling·u·left.
func (lo *LoRA) LinearForward(l int, s model.Site, out, inp kernels.Buffer, n int) {
	r, oc := lo.cfg.Dim, lo.siteOut[s]
	for _, p := range lo.sites[l][s] {
		u := lo.saved(p, n)
		lo.dev.Gemm(false, false, n, r, p.in, 1, inp, p.in, p.right, r, 0, u, r)
		lo.dev.Gemm(false, false, n, p.out, r, lo.scale, u, r, p.left, p.out, 1, out.Slice(p.col, out.Len()-p.col), oc)
	}
}

// LinearBackward implements model.Adapter:
//
//	dleft += scaling·uᵀ·dout_p, du = scaling·dout_p·leftᵀ,
//	dright += xᵀ·du, dinp += du·rightᵀ.
func (lo *LoRA) LinearBackward(l int, s model.Site, dinp, dout, inp kernels.Buffer, n int) {
	r, oc := lo.cfg.Dim, lo.siteOut[s]
	du := lo.du.Slice(0, n*r)
	for _, p := range lo.sites[l][s] {
		u := lo.saved(p, n)
		dp := dout.Slice(p.col, dout.Len()-p.col)
		lo.dev.Gemm(true, false, r, p.out, n, lo.scale, u, r, dp, oc, 1, p.dleft, p.out)
		lo.dev.Gemm(false, true, n, r, p.out, lo.scale, dp, oc, p.left, p.out, 0, du, r)
		lo.dev.Gemm(true, false, p.in, r, n, 1, inp, p.in, du, r, 1, p.dright, r)
		lo.dev.Gemm(false, true, n, p.in, r, 1, du, r, p.right, r, 1, dinp, p.in)
	}
}

// Fuse adds every adapter's term to its base weight in dst, a buffer with
// the model's parameter layout (a copy of the base parameters):
// W += scaling·leftᵀ·rightᵀ ([out,in]). A BF16 dst gets the sum computed
// in fp32 and rounded once (through a scratch matrix of the largest
// adapted layer).
func (lo *LoRA) Fuse(dst kernels.Buffer) error {
	r := lo.cfg.Dim
	var tmp kernels.Buffer
	if dst.DType() != kernels.F32 {
		most := 0
		for _, br := range lo.baseRange {
			most = max(most, br[1])
		}
		var err error
		if tmp, err = lo.dev.Alloc(kernels.F32, most); err != nil {
			return fmt.Errorf("lora: fusing into %v weights: %w", dst.DType(), err)
		}
		defer lo.dev.Free(tmp)
	}
	for _, layer := range lo.sites {
		for _, parts := range layer {
			for _, p := range parts {
				br := lo.baseRange[p.name]
				w := dst.Slice(br[0], br[1])
				acc := w
				if tmp != nil {
					acc = tmp.Slice(0, br[1])
					lo.dev.Copy(acc, w)
				}
				lo.dev.Gemm(true, true, p.out, p.in, r, lo.scale, p.left, p.out, p.right, r, 1, acc, p.in)
				if tmp != nil {
					lo.dev.Copy(w, acc)
				}
			}
		}
	}
	return nil
}

// Tensor is one adapter matrix with its DeepSpeed-Chat name.
type Tensor struct {
	Name  string // e.g. "layers.0.self_attn.q_proj.lora_right_weight"
	Shape []int  // right: [in, r]; left: [r, out]
	Buf   kernels.Buffer
}

// Tensors lists the adapter matrices in buffer order, named as
// DeepSpeed-Chat's LinearLayer_LoRA names them (relative to the decoder).
func (lo *LoRA) Tensors() []Tensor {
	r := lo.cfg.Dim
	var out []Tensor
	for _, layer := range lo.sites {
		for _, parts := range layer {
			for _, p := range parts {
				out = append(out,
					Tensor{p.name + ".lora_right_weight", []int{p.in, r}, p.right},
					Tensor{p.name + ".lora_left_weight", []int{r, p.out}, p.left})
			}
		}
	}
	return out
}
