package model

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// OPT (OPTForCausalLM), as transformers' modeling_opt.py computes it:
//
//	x = embed_tokens(ids)·project_inᵀ + embed_positions(pos + 2)
//	layer (pre-LN):  x = x + drop(attn(LN1(x))); x = x + drop(fc2(act(fc1(LN2(x)))))
//	layer (post-LN): x = LN1(x + drop(attn(x))); x = LN2(x + drop(fc2(act(fc1(x)))))
//	y = final_layer_norm(x)·project_outᵀ
//
// then lm_head (tied to embed_tokens) and the value head (Model).

// lnEps is OPT's LayerNorm epsilon.
const lnEps = 1e-5

// optFamily is OPT's architecture.
type optFamily struct{}

func (optFamily) prefix() string { return "model.decoder." }

// paramSpecs: the embeddings and the decoder-level weights, then each layer
// as one contiguous block (q, k and v adjacent so they form one [3H,H]
// matrix), then lm_head when untied, then the value head when present.
func (optFamily) paramSpecs(c *Config, valueHead bool) []paramSpec {
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
	return specs
}

func (optFamily) views(p *Params, c *Config, view func(string) kernels.Buffer, span func(string, int) kernels.Buffer) {
	H := c.HiddenSize
	p.EmbedPos = view("embed_positions.weight")
	p.ProjectIn = view("project_in.weight")
	p.ProjectOut = view("project_out.weight")
	p.FinalLNW = view("final_layer_norm.weight")
	p.FinalLNB = view("final_layer_norm.bias")
	for l := range p.Layers {
		pre := fmt.Sprintf("layers.%d.", l)
		lp := &p.Layers[l]
		lp.AttnLNW = view(pre + "self_attn_layer_norm.weight")
		lp.AttnLNB = view(pre + "self_attn_layer_norm.bias")
		lp.QKVW = span(pre+"self_attn.q_proj.weight", 3*H*H)
		if c.EnableBias {
			lp.QKVB = span(pre+"self_attn.q_proj.bias", 3*H)
		}
		lp.OutW = view(pre + "self_attn.out_proj.weight")
		lp.OutB = view(pre + "self_attn.out_proj.bias")
		lp.FFNLNW = view(pre + "final_layer_norm.weight")
		lp.FFNLNB = view(pre + "final_layer_norm.bias")
		lp.FC1W = view(pre + "fc1.weight")
		lp.FC1B = view(pre + "fc1.bias")
		lp.FC2W = view(pre + "fc2.weight")
		lp.FC2B = view(pre + "fc2.bias")
	}
}

// positions are OPT's: cumsum(mask)·mask − 1, plus the table offset of 2
// (Positions).
func (optFamily) positions(mask []int32, b, t int, start []int32) []int32 {
	return Positions(mask, b, t, start)
}

func (optFamily) checkPositions(c *Config, pos []int32) error {
	for i, p := range pos {
		if int(p) >= c.MaxPositions+2 {
			return fmt.Errorf("model: position %d at index %d exceeds max_position_embeddings %d", p-2, i, c.MaxPositions)
		}
	}
	return nil
}

// Positions computes OPT's position ids from an attention mask:
// cumsum(mask)·mask − 1, plus the table offset of 2, so padding lands on
// row 1. start[b] is the number of real tokens before this chunk (KV-cache
// decoding); nil means none.
func Positions(mask []int32, b, t int, start []int32) []int32 {
	pos := make([]int32, b*t)
	for i := 0; i < b; i++ {
		var c int32
		if start != nil {
			c = start[i]
		}
		for j := 0; j < t; j++ {
			m := int32(1)
			if mask != nil {
				m = mask[i*t+j]
			}
			c += m
			pos[i*t+j] = c*m - 1 + 2
		}
	}
	return pos
}

// layoutActs (re)sets every field of a for shape [b,t], taking each distinct
// buffer from buf in a fixed order; aliases (embIn = emb when P == H, fchAct
// = fch for relu, fin = resid[L] without a final LayerNorm, y = fin without
// project_out) are views of the same buffer, as the forward pass expects.
// startActs resets a first.
func (optFamily) layoutActs(m *Model, a *Acts, b, t int, opts ActsOptions, w WeightsInfo, buf func(kernels.DType, int) kernels.Buffer) {
	c := m.Config
	H, F, P, V, NH := c.HiddenSize, c.FFNDim, c.WordEmbedProjDim, c.VocabSize, c.NumHeads
	n := b * t
	al := startActs(c, a, b, t, opts, w, buf)
	f32, kept := al.f32, al.kept
	a.emb = f32(n * P)
	a.embIn = a.emb
	if c.HasProjections() {
		a.embIn = f32(n * H)
	}
	a.posEmb = f32(n * H)
	for i := range a.resid {
		a.resid[i] = f32(n * H)
	}
	dropout := opts.Dropout && c.Dropout > 0
	for i := range a.layers {
		la := &a.layers[i]
		la.qkv = f32(3 * n * H)
		la.att, la.lse = attnStore(w, f32, b, NH, t)
		la.atty, la.attnOut, la.s1 = kept(n*H), f32(n*H), f32(n*H)
		la.ln1, la.ln1Mean, la.ln1Rstd = kept(n*H), f32(n), f32(n)
		la.ln2Mean, la.ln2Rstd = f32(n), f32(n)
		if c.DoLayerNormBefore {
			la.ln2 = kept(n * H)
		} else {
			la.s2 = f32(n * H)
		}
		if c.Activation == "relu" {
			la.fch = kept(n * F)
			la.fchAct = la.fch
		} else {
			la.fch, la.fchAct = f32(n*F), kept(n*F) // GELU's backward reads fch
		}
		la.fc2o = f32(n * H)
		if dropout {
			la.drop1, la.drop2 = f32(n*H), f32(n*H)
		}
	}
	a.fin = a.resid[c.NumLayers]
	if c.HasFinalLayerNorm() {
		a.fin, a.finMean, a.finRstd = f32(n*H), f32(n), f32(n)
	}
	a.y = a.fin
	if c.HasProjections() {
		a.y = f32(n * P)
	}
	if !opts.NoLogits {
		a.logits, a.losses = f32(n*V), f32(n)
	}
	if m.opts.ValueHead {
		a.values = f32(n)
	}
	if opts.Train {
		a.dA, a.dB, a.dC, a.dqkv, a.dfch = f32(n*H), f32(n*H), f32(n*H), f32(3*n*H), f32(n*F)
		a.dy = f32(n * P)
		if c.HasProjections() {
			a.demb = f32(n * P)
		}
		a.dlosses, a.dvalues = f32(n), f32(n)
	}
	if a.store {
		a.wsH, a.wsF = f32(n*H), f32(n*F)
	}
}

// embed: tokens (projected to H when P != H) plus positions.
func (optFamily) embed(m *Model, a *Acts) {
	c, d, p := m.Config, m.Dev, m.Params
	N, H, P := a.B*a.T, c.HiddenSize, c.WordEmbedProjDim
	d.EmbeddingForward(a.emb, a.ids, p.EmbedToks, N, P)
	if c.HasProjections() {
		d.MatmulForward(a.embIn, a.emb, p.ProjectIn, nil, N, P, H)
	}
	d.EmbeddingForward(a.posEmb, a.pos, p.EmbedPos, N, H)
	d.Add(a.resid[0], a.embIn, a.posEmb, N*H)
}

// optBufs are the buffers one pass of a layer reads and writes: the
// layer's saved activations (Forward), or a KV cache's scratch (Decode),
// where the residual stream is updated in place (x = s1 = out), the two
// LayerNorms share one output and statistics, fc1's output is activated in
// place (fch = act) and attnOut, fc2o and s2 share one buffer.
type optBufs struct {
	b, t  int            // rows and positions of this pass (N = b·t)
	mask  kernels.Buffer // I32 attention mask: [B,T] (nil: all real), or the cache's [B,Tmax]
	cache *Cache         // decoding: attend against (and append to) this cache from position t0
	t0    int
	seed  uint64 // the pass's dropout seed (see dropoutSeed)

	x, s1, out        kernels.Buffer // [N,H]: the layer's input, after attention, its output
	ln1, mean1, rstd1 kernels.Buffer // [N,H], [N], [N]: self_attn_layer_norm
	qkv               kernels.Buffer // [N,3H]
	att               kernels.Buffer // [B,NH,T,T] attention probabilities (Forward without flash attention)
	lse               kernels.Buffer // [B,NH,T] their log-sum-exp (Forward with flash attention)
	atty              kernels.Buffer // [N,H] attention output (before out_proj)
	attnOut, drop1    kernels.Buffer // [N,H]: out_proj output (after dropout); its dropout scales (nil: none)
	ln2, mean2, rstd2 kernels.Buffer // [N,H] (pre-LN only), [N], [N]: final_layer_norm
	fch, act          kernels.Buffer // [N,F]: fc1 output, its activation (the same buffer for relu)
	fc2o, drop2       kernels.Buffer // [N,H]: fc2 output (after dropout); its dropout scales (nil: none)
	s2                kernels.Buffer // [N,H] post-LN only: ln1 + fc2o

	// With a bf16 store (Acts.store), ln1, atty, ln2 and act above (and
	// fch for relu, which act aliases) are the store's F32 working
	// buffers, and these are where the pass keeps them, rounded to BF16
	// (nil without a store).
	keptLn1, keptAtty, keptLn2, keptAct kernels.Buffer
}

// optBufs are layer l's buffers in a Forward pass.
func (a *Acts) optBufs(l int, relu bool) optBufs {
	la := a.layer(l)
	x := optBufs{
		b: a.B, t: a.T, mask: a.maskBuf(), seed: a.seed,
		x: a.resid[l], s1: la.s1, out: a.resid[l+1],
		ln1: la.ln1, mean1: la.ln1Mean, rstd1: la.ln1Rstd,
		qkv: la.qkv, att: la.att, lse: la.lse, atty: la.atty, attnOut: la.attnOut, drop1: la.drop1,
		ln2: la.ln2, mean2: la.ln2Mean, rstd2: la.ln2Rstd,
		fch: la.fch, act: la.fchAct, fc2o: la.fc2o, drop2: la.drop2, s2: la.s2,
	}
	if a.store {
		x.keptLn1, x.keptAtty, x.keptAct = la.ln1, la.atty, la.fchAct
		x.ln1, x.atty, x.act = a.wsH, a.wsH, a.wsF
		if la.ln2 != nil { // pre-LN
			x.keptLn2, x.ln2 = la.ln2, a.wsH
		}
		if relu { // fch is fchAct
			x.fch = a.wsF
		}
	}
	return x
}

// optLayer is one decoder layer of an OPT model: its weights and sizes,
// with the forward of its sub-blocks (LayerNorm, attention, MLP).
type optLayer struct {
	m            *Model
	l            int
	w            *LayerParams
	d            kernels.Device
	H, F, NH, HS int
	preLN        bool
	dropout      float32
}

func (m *Model) optLayer(l int) optLayer {
	c := m.Config
	return optLayer{
		m: m, l: l, w: &m.Params.Layers[l], d: m.Dev,
		H: c.HiddenSize, F: c.FFNDim, NH: c.NumHeads, HS: c.HeadSize(),
		preLN: c.DoLayerNormBefore, dropout: float32(c.Dropout),
	}
}

// forward runs the layer from x.x into x.out.
//
// Pre-LN (do_layer_norm_before):
//
//	ln1 = LN1(r); qkv = ln1·Wqkvᵀ; atty = attn(qkv); attnOut = drop(atty·Woᵀ)
//	s1 = r + attnOut; ln2 = LN2(s1); fch = act(ln2·W1ᵀ); fc2o = drop(fch·W2ᵀ)
//	out = s1 + fc2o
//
// Post-LN (opt-350m): the LayerNorms follow the residual adds:
//
//	qkv = r·Wqkvᵀ; ...; s1 = r + attnOut; ln1 = LN1(s1)
//	fch = act(ln1·W1ᵀ); fc2o = drop(fch·W2ᵀ); s2 = ln1 + fc2o; out = LN2(s2)
func (ly optLayer) forward(x optBufs) {
	d, w, N, H := ly.d, ly.w, x.b*x.t, ly.H
	if ly.preLN {
		d.LayerNormForward(x.ln1, x.mean1, x.rstd1, x.x, w.AttnLNW, w.AttnLNB, N, H, lnEps)
		ly.keep(x.keptLn1, x.ln1)
		ly.attention(x, x.ln1)
		d.Add(x.s1, x.x, x.attnOut, N*H)
		d.LayerNormForward(x.ln2, x.mean2, x.rstd2, x.s1, w.FFNLNW, w.FFNLNB, N, H, lnEps)
		ly.keep(x.keptLn2, x.ln2)
		ly.mlp(x, x.ln2)
		d.Add(x.out, x.s1, x.fc2o, N*H)
		return
	}
	ly.attention(x, x.x)
	d.Add(x.s1, x.x, x.attnOut, N*H)
	d.LayerNormForward(x.ln1, x.mean1, x.rstd1, x.s1, w.AttnLNW, w.AttnLNB, N, H, lnEps)
	ly.keep(x.keptLn1, x.ln1)
	ly.mlp(x, x.ln1)
	d.Add(x.s2, x.ln1, x.fc2o, N*H)
	d.LayerNormForward(x.out, x.mean2, x.rstd2, x.s2, w.FFNLNW, w.FFNLNB, N, H, lnEps)
}

// attention: qkv = in·Wqkvᵀ + b; multi-head attention (over the cache when
// decoding); attnOut = drop(out_proj(atty)).
func (ly optLayer) attention(x optBufs, in kernels.Buffer) {
	d, w, N, H := ly.d, ly.w, x.b*x.t, ly.H
	ly.m.linearForward(ly.l, SiteQKV, x.qkv, in, w.QKVW, w.QKVB, N, H, 3*H)
	if kc := x.cache; kc != nil {
		d.AttentionDecode(x.atty, x.qkv, kc.k[ly.l], kc.v[ly.l], kc.mask, x.b, x.t, x.t0, kc.Tmax, ly.NH, ly.HS)
	} else if x.lse != nil {
		// OPT's packed q|k|v is the GQA layout with NKV = NH.
		d.(kernels.FlashAttention).FlashAttentionForward(x.atty, x.lse, x.qkv, x.mask, x.b, x.t, ly.NH, ly.NH, ly.HS)
	} else {
		d.AttentionForward(x.atty, x.att, x.qkv, x.mask, x.b, x.t, ly.NH, ly.HS)
	}
	ly.keep(x.keptAtty, x.atty)
	ly.m.linearForward(ly.l, SiteOut, x.attnOut, x.atty, w.OutW, w.OutB, N, H, H)
	ly.drop(x, x.attnOut, x.drop1, 0)
}

// mlp: fch = in·W1ᵀ + b; act = relu or gelu(fch); fc2o = drop(fc2(act)).
func (ly optLayer) mlp(x optBufs, in kernels.Buffer) {
	w, N := ly.w, x.b*x.t
	ly.m.linearForward(ly.l, SiteFC1, x.fch, in, w.FC1W, w.FC1B, N, ly.H, ly.F)
	optActivationForward(ly.m, x.act, x.fch, N*ly.F)
	ly.keep(x.keptAct, x.act)
	ly.m.linearForward(ly.l, SiteFC2, x.fc2o, x.act, w.FC2W, w.FC2B, N, ly.F, ly.H)
	ly.drop(x, x.fc2o, x.drop2, 1)
}

// drop applies dropout in place to buf [N,H] at the layer's dropout site
// (a no-op when the pass has no dropout: scale is nil).
func (ly optLayer) drop(x optBufs, buf, scale kernels.Buffer, site int) {
	if scale != nil {
		ly.d.DropoutForward(buf, scale, buf, ly.dropout, dropoutSeed(x.seed, ly.l, site), x.b*x.t*ly.H)
	}
}

// keep stores an F32 tensor the forward computed into where a bf16 store
// keeps it (a no-op without one: kept is nil).
func (ly optLayer) keep(kept, ws kernels.Buffer) {
	if kept != nil {
		ly.d.Copy(kept, ws)
	}
}

// layerForward runs decoder layer l from a.resid[l] into a.resid[l+1].
func (optFamily) layerForward(m *Model, a *Acts, l int) {
	m.optLayer(l).forward(a.optBufs(l, m.Config.Activation == "relu"))
}

// final: the final LayerNorm (pre-LN OPTs), then project_out.
func (optFamily) final(m *Model, a *Acts) {
	c, d, p := m.Config, m.Dev, m.Params
	N, H, P := a.B*a.T, c.HiddenSize, c.WordEmbedProjDim
	x := a.resid[c.NumLayers]
	if c.HasFinalLayerNorm() {
		d.LayerNormForward(a.fin, a.finMean, a.finRstd, x, p.FinalLNW, p.FinalLNB, N, H, lnEps)
	}
	if c.HasProjections() {
		d.MatmulForward(a.y, a.fin, p.ProjectOut, nil, N, H, P)
	}
}

func optActivationForward(m *Model, out, inp kernels.Buffer, n int) {
	if m.Config.Activation == "relu" {
		m.Dev.ReLUForward(out, inp, n)
	} else {
		m.Dev.GELUForward(out, inp, n)
	}
}

// optActivationBackward is optActivationForward's backward, given its
// output act (ReLU's mask) and its input pre (GELU's).
func optActivationBackward(m *Model, dinp, dout, act, pre kernels.Buffer, n int) {
	if m.Config.Activation == "relu" {
		m.Dev.ReLUBackward(dinp, dout, act, n)
	} else {
		m.Dev.GELUBackward(dinp, dout, pre, n)
	}
}

// finalBackward: project_out and the final LayerNorm, reversed.
func (optFamily) finalBackward(m *Model, a *Acts, gr *Params) {
	c, d, p := m.Config, m.Dev, m.Params
	N, H, P := a.B*a.T, c.HiddenSize, c.WordEmbedProjDim
	dfin := a.dy
	if c.HasProjections() {
		d.MatmulBackward(a.dB, gr.ProjectOut, nil, a.dy, a.fin, p.ProjectOut, N, H, P)
		dfin = a.dB
	}
	// dA is the residual stream's gradient from here down.
	if c.HasFinalLayerNorm() {
		d.Zero(a.dA)
		d.LayerNormBackward(a.dA, gr.FinalLNW, gr.FinalLNB, dfin, a.resid[c.NumLayers], p.FinalLNW, a.finMean, a.finRstd, N, H)
	} else {
		d.Copy(a.dA, dfin)
	}
}

// layerBackward is layerForward reversed, accumulating into gw. On entry a.dA
// holds the gradient of the layer's output; on return, of its input.
func (optFamily) layerBackward(m *Model, a *Acts, gw *LayerParams, l int) {
	c, d, w, la := m.Config, m.Dev, &m.Params.Layers[l], a.layer(l)
	B, T, N, H, F := a.B, a.T, a.B*a.T, c.HiddenSize, c.FFNDim
	r := a.resid[l]
	mask := a.maskBuf()
	undrop := func(dst, src, scale kernels.Buffer) kernels.Buffer {
		if scale == nil {
			return src
		}
		d.Mul(dst, src, scale, N*H)
		return dst
	}
	// widen returns a tensor the forward kept, as F32: itself, or with a
	// bf16 store (Acts.store) widened into the working buffer ws.
	widen := func(kept, ws kernels.Buffer) kernels.Buffer {
		if !a.store {
			return kept
		}
		d.Copy(ws, kept)
		return ws
	}

	if c.DoLayerNormBefore {
		// out = s1 + fc2o
		dfc2o := undrop(a.dC, a.dA, la.drop2)
		act := widen(la.fchAct, a.wsF)
		m.linearBackward(l, SiteFC2, a.dfch, gw.FC2W, gw.FC2B, dfc2o, act, w.FC2W, N, F, H)
		optActivationBackward(m, a.dfch, a.dfch, act, la.fch, N*F)
		m.linearBackward(l, SiteFC1, a.dB, gw.FC1W, gw.FC1B, a.dfch, widen(la.ln2, a.wsH), w.FC1W, N, H, F)
		d.LayerNormBackward(a.dA, gw.FFNLNW, gw.FFNLNB, a.dB, la.s1, w.FFNLNW, la.ln2Mean, la.ln2Rstd, N, H)
		// s1 = r + attnOut
		dattn := undrop(a.dC, a.dA, la.drop1)
		m.linearBackward(l, SiteOut, a.dB, gw.OutW, gw.OutB, dattn, widen(la.atty, a.wsH), w.OutW, N, H, H)
		optAttentionBackward(d, a.dqkv, a.dB, la, mask, B, T, c.NumHeads, c.HeadSize())
		m.linearBackward(l, SiteQKV, a.dB, gw.QKVW, gw.QKVB, a.dqkv, widen(la.ln1, a.wsH), w.QKVW, N, H, 3*H)
		d.LayerNormBackward(a.dA, gw.AttnLNW, gw.AttnLNB, a.dB, r, w.AttnLNW, la.ln1Mean, la.ln1Rstd, N, H)
		return
	}

	// Post-LN. out = LN2(s2)
	d.Zero(a.dB)
	d.LayerNormBackward(a.dB, gw.FFNLNW, gw.FFNLNB, a.dA, la.s2, w.FFNLNW, la.ln2Mean, la.ln2Rstd, N, H)
	// s2 = ln1 + fc2o
	dfc2o := undrop(a.dC, a.dB, la.drop2)
	act := widen(la.fchAct, a.wsF)
	m.linearBackward(l, SiteFC2, a.dfch, gw.FC2W, gw.FC2B, dfc2o, act, w.FC2W, N, F, H)
	optActivationBackward(m, a.dfch, a.dfch, act, la.fch, N*F)
	m.linearBackward(l, SiteFC1, a.dA, gw.FC1W, gw.FC1B, a.dfch, widen(la.ln1, a.wsH), w.FC1W, N, H, F)
	d.Add(a.dA, a.dA, a.dB, N*H)
	// ln1 = LN1(s1)
	d.Zero(a.dB)
	d.LayerNormBackward(a.dB, gw.AttnLNW, gw.AttnLNB, a.dA, la.s1, w.AttnLNW, la.ln1Mean, la.ln1Rstd, N, H)
	// s1 = r + attnOut
	dattn := undrop(a.dC, a.dB, la.drop1)
	m.linearBackward(l, SiteOut, a.dA, gw.OutW, gw.OutB, dattn, widen(la.atty, a.wsH), w.OutW, N, H, H)
	optAttentionBackward(d, a.dqkv, a.dA, la, mask, B, T, c.NumHeads, c.HeadSize())
	m.linearBackward(l, SiteQKV, a.dA, gw.QKVW, gw.QKVB, a.dqkv, r, w.QKVW, N, H, 3*H)
	d.Add(a.dA, a.dA, a.dB, N*H)
}

// optAttentionBackward: dqkv = the gradient of layer la's attention given
// dout, through the flash kernels when the layer kept lse, else from its
// probabilities att.
func optAttentionBackward(d kernels.Device, dqkv, dout kernels.Buffer, la *layerActs, mask kernels.Buffer, b, t, nh, hs int) {
	if la.lse != nil {
		d.(kernels.FlashAttention).FlashAttentionBackward(dqkv, dout, la.qkv, la.lse, mask, b, t, nh, nh, hs)
		return
	}
	d.AttentionBackward(dqkv, dout, la.qkv, la.att, mask, b, t, nh, hs)
}

// embedBackward: positions, project_in and tokens, reversed.
func (optFamily) embedBackward(m *Model, a *Acts, gr *Params) {
	c, d, p := m.Config, m.Dev, m.Params
	N, H, P := a.B*a.T, c.HiddenSize, c.WordEmbedProjDim
	d.EmbeddingBackward(gr.EmbedPos, a.dA, a.pos, N, H)
	if c.HasProjections() {
		d.MatmulBackward(a.demb, gr.ProjectIn, nil, a.dA, a.emb, p.ProjectIn, N, P, H)
		d.EmbeddingBackward(gr.EmbedToks, a.demb, a.ids, N, P)
	} else {
		d.EmbeddingBackward(gr.EmbedToks, a.dA, a.ids, N, P)
	}
}

// layoutCache: K and V [B,Tmax,H] per layer, and the scratch of chunks of
// up to MaxChunk positions.
func (optFamily) layoutCache(c *Config, kc *Cache, alloc func(kernels.DType, int) kernels.Buffer) {
	H, F, P, V := c.HiddenSize, c.FFNDim, c.WordEmbedProjDim, c.VocabSize
	b, n := kc.B, kc.B*kc.MaxChunk
	f32 := func(k int) kernels.Buffer { return alloc(kernels.F32, k) }
	for range c.NumLayers {
		kc.k = append(kc.k, f32(b*kc.Tmax*H))
		kc.v = append(kc.v, f32(b*kc.Tmax*H))
	}
	kc.mask = alloc(kernels.I32, b*kc.Tmax)
	kc.ids, kc.pos = alloc(kernels.I32, n), alloc(kernels.I32, n)
	kc.x, kc.h, kc.ln, kc.tmp = f32(n*H), f32(n*H), f32(n*H), f32(n*H)
	kc.qkv, kc.fch = f32(3*n*H), f32(n*F)
	kc.emb, kc.y = f32(n*P), f32(n*P)
	kc.mean, kc.rstd = f32(n), f32(n)
	kc.last, kc.lastLogits = f32(b*P), f32(b*V)
}

// decode: the embeddings, every layer through the same layer code as
// Forward with the cache's scratch and attention over the cache, the final
// LayerNorm and project_out.
func (optFamily) decode(m *Model, kc *Cache, tn, t0 int) kernels.Buffer {
	c, d, p := m.Config, m.Dev, m.Params
	N, H, P := kc.B*tn, c.HiddenSize, c.WordEmbedProjDim
	sl := func(b kernels.Buffer, cols int) kernels.Buffer { return b.Slice(0, N*cols) }
	emb, x, ln, tmp := sl(kc.emb, P), sl(kc.x, H), sl(kc.ln, H), sl(kc.tmp, H)
	fch, y := sl(kc.fch, c.FFNDim), sl(kc.y, P)
	mean, rstd := sl(kc.mean, 1), sl(kc.rstd, 1)
	bufs := optBufs{
		b: kc.B, t: tn, mask: kc.mask, cache: kc, t0: t0,
		x: x, s1: x, out: x,
		ln1: ln, mean1: mean, rstd1: rstd, ln2: ln, mean2: mean, rstd2: rstd,
		qkv: sl(kc.qkv, 3*H), atty: sl(kc.h, H), attnOut: tmp,
		fch: fch, act: fch, fc2o: tmp, s2: tmp,
	}

	d.EmbeddingForward(emb, kc.ids.Slice(0, N), p.EmbedToks, N, P)
	embIn := emb
	if c.HasProjections() {
		d.MatmulForward(tmp, emb, p.ProjectIn, nil, N, P, H)
		embIn = tmp
	}
	d.EmbeddingForward(ln, kc.pos.Slice(0, N), p.EmbedPos, N, H)
	d.Add(x, embIn, ln, N*H)
	for l := range c.NumLayers {
		m.optLayer(l).forward(bufs)
	}
	fin := x
	if c.HasFinalLayerNorm() {
		d.LayerNormForward(ln, mean, rstd, x, p.FinalLNW, p.FinalLNB, N, H, lnEps)
		fin = ln
	}
	if c.HasProjections() {
		d.MatmulForward(y, fin, p.ProjectOut, nil, N, H, P)
		return y
	}
	return fin
}
