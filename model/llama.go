package model

import (
	"fmt"
	"slices"

	"github.com/gochat-ai/gochat/kernels"
)

// The LLaMA family — LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
// and Qwen3ForCausalLM — as transformers computes it (modeling_llama.py and
// its Qwen2/Qwen3 copies, eager attention):
//
//	x = embed_tokens(ids)
//	layer:  h = x + o_proj(attention(rope(qk_norm(q_proj(n1(x)))), rope(qk_norm(k_proj(n1(x)))), v_proj(n1(x))))
//	        x = h + down_proj(silu(gate_proj(n2(h)))·up_proj(n2(h)))
//	y = norm(x)
//
// with n1 = input_layernorm, n2 = post_attention_layernorm and norm RMSNorms
// in fp32 (kernels.RMSNormForward), rotary embeddings in the rotate-half
// convention at the positions of the attention mask (llamaPositions),
// grouped-query attention (NKV key/value heads, HS = head_dim), qk_norm
// Qwen3's per-head RMSNorm (identity for the others), optional q/k/v biases
// (Qwen2; attention_bias) and o_proj/MLP biases (attention_bias, mlp_bias),
// then lm_head (tied to embed_tokens when tie_word_embeddings) and the value
// head (Model). There is no dropout.
//
// q_proj, k_proj and v_proj are stored adjacent, forming one
// [(NH+2·NKV)·HS, H] matrix whose output is the packed qkv row the
// attention kernels read; gate_proj and up_proj likewise form one [2F,H]
// matrix whose output is SwiGLU's gate|up input.

// llamaFamily is the LLaMA family's architecture.
type llamaFamily struct{}

func (llamaFamily) prefix() string { return "model." }

// qkvWidth is the width W of a packed qkv row: (NH+2·NKV)·HS.
func (c *Config) qkvWidth() int { return (c.NumHeads + 2*c.KVHeads()) * c.HeadSize() }

// paramSpecs: embed_tokens, each layer as one block (input_layernorm; q, k,
// v and their biases; Qwen3's q_norm, k_norm; o_proj;
// post_attention_layernorm; gate, up and their biases; down_proj), the
// final norm, lm_head when untied, the value head.
func (llamaFamily) paramSpecs(c *Config, valueHead bool) []paramSpec {
	H, F, V := c.HiddenSize, c.FFNDim, c.VocabSize
	NH, NKV, HS := c.NumHeads, c.KVHeads(), c.HeadSize()
	var specs []paramSpec
	add := func(name string, shape ...int) { specs = append(specs, paramSpec{name: name, shape: shape}) }
	add("embed_tokens.weight", V, H)
	for l := range c.NumLayers {
		p := fmt.Sprintf("layers.%d.", l)
		add(p+"input_layernorm.weight", H)
		add(p+"self_attn.q_proj.weight", NH*HS, H)
		add(p+"self_attn.k_proj.weight", NKV*HS, H)
		add(p+"self_attn.v_proj.weight", NKV*HS, H)
		if c.QKVBias {
			add(p+"self_attn.q_proj.bias", NH*HS)
			add(p+"self_attn.k_proj.bias", NKV*HS)
			add(p+"self_attn.v_proj.bias", NKV*HS)
		}
		if c.QKNorm {
			add(p+"self_attn.q_norm.weight", HS)
			add(p+"self_attn.k_norm.weight", HS)
		}
		add(p+"self_attn.o_proj.weight", H, NH*HS)
		if c.OutBias {
			add(p+"self_attn.o_proj.bias", H)
		}
		add(p+"post_attention_layernorm.weight", H)
		add(p+"mlp.gate_proj.weight", F, H)
		add(p+"mlp.up_proj.weight", F, H)
		if c.MLPBias {
			add(p+"mlp.gate_proj.bias", F)
			add(p+"mlp.up_proj.bias", F)
		}
		add(p+"mlp.down_proj.weight", H, F)
		if c.MLPBias {
			add(p+"mlp.down_proj.bias", H)
		}
	}
	add("norm.weight", H)
	if !c.TieWordEmbeddings {
		add("lm_head.weight", V, H)
	}
	if valueHead {
		add("v_head.weight", 1, H)
	}
	return specs
}

func (llamaFamily) views(p *Params, c *Config, view func(string) kernels.Buffer, span func(string, int) kernels.Buffer) {
	H, F, W := c.HiddenSize, c.FFNDim, c.qkvWidth()
	p.FinalLNW = view("norm.weight")
	for l := range p.Layers {
		pre := fmt.Sprintf("layers.%d.", l)
		lp := &p.Layers[l]
		lp.AttnLNW = view(pre + "input_layernorm.weight")
		lp.QKVW = span(pre+"self_attn.q_proj.weight", W*H)
		if c.QKVBias {
			lp.QKVB = span(pre+"self_attn.q_proj.bias", W)
		}
		lp.QNormW = view(pre + "self_attn.q_norm.weight")
		lp.KNormW = view(pre + "self_attn.k_norm.weight")
		lp.OutW = view(pre + "self_attn.o_proj.weight")
		lp.OutB = view(pre + "self_attn.o_proj.bias")
		lp.FFNLNW = view(pre + "post_attention_layernorm.weight")
		lp.FC1W = span(pre+"mlp.gate_proj.weight", 2*F*H)
		if c.MLPBias {
			lp.FC1B = span(pre+"mlp.gate_proj.bias", 2*F)
		}
		lp.FC2W = view(pre + "mlp.down_proj.weight")
		lp.FC2B = view(pre + "mlp.down_proj.bias")
	}
}

// positions are transformers' position ids for an attention mask (what
// generate's prepare_inputs_for_generation computes and RLHF trainers pass
// to their scoring forwards): cumsum(mask) − 1 at real tokens, 1 at
// padding (masked_fill(mask == 0, 1)), so left padding does not shift a
// row. start[b] real tokens come before this chunk (KV-cache decoding).
func (llamaFamily) positions(mask []int32, b, t int, start []int32) []int32 {
	return llamaPositions(mask, b, t, start)
}

func llamaPositions(mask []int32, b, t int, start []int32) []int32 {
	pos := make([]int32, b*t)
	for i := range b {
		var c int32
		if start != nil {
			c = start[i]
		}
		for j := range t {
			if mask != nil && mask[i*t+j] == 0 {
				pos[i*t+j] = 1
				continue
			}
			c++
			pos[i*t+j] = c - 1
		}
	}
	return pos
}

func (llamaFamily) checkPositions(c *Config, pos []int32) error {
	for i, p := range pos {
		if int(p) >= c.MaxPositions {
			return fmt.Errorf("model: position %d at index %d exceeds max_position_embeddings %d", p, i, c.MaxPositions)
		}
	}
	return nil
}

// The rotary tables. A pass reads rows cos[p], sin[p] [HS/2] of
// kernels.RoPETable (rope_theta and rope_scaling's inverse frequencies,
// Model.ropeInv) at every position id p it uses; transformers computes the
// same rows from the position ids in every forward. gochat keeps them with
// the buffers of the pass, sized to its positions rather than to
// max_position_embeddings (131072 rows, 33 MB for llama-1b): an Acts for
// [B,T] holds ropeRows(T) rows, filled by the first Forward that needs
// them, and a Cache ropeRows(Tmax), filled by NewCache. Row p does not
// depend on how many rows a table has, so every size computes the same.

// ropeRows is the number of table rows a pass over t positions reads: real
// tokens sit at 0..t-1 (llamaPositions; a cache's at 0..Tmax-1) and padding
// at 1.
func ropeRows(t int) int { return max(t, 2) }

// fillRope writes the first rows rows of the tables of inv into cos and sin
// ([rows,len(inv)] each).
func fillRope(dev kernels.Device, cos, sin kernels.Buffer, inv []float32, rows int) {
	c, s := kernels.RoPETable(inv, rows)
	dev.WriteF32(cos, c)
	dev.WriteF32(sin, s)
}

// ensureRope fills a's rotary tables for m unless a previous Forward did:
// a's table buffers are kept by ReuseActs while large enough (they are
// laid out first after the inputs, at a fixed place), so rows filled for a
// larger T are still there, and a loop over shapes refills them only when T
// grows past every T before (or another rope_theta/rope_scaling uses a).
func (m *Model) ensureRope(a *Acts) {
	r := ropeRows(a.T)
	if a.ropeRows >= r && slices.Equal(a.ropeInv, m.ropeInv) {
		return
	}
	fillRope(m.Dev, a.cos, a.sin, m.ropeInv, r)
	a.ropeRows, a.ropeInv = r, m.ropeInv
}

// layoutActs: the layer's saved tensors (see llamaBufs), the final norm,
// the heads, and the gradient scratch. With a bf16 store (Acts.store) the
// tensors the backward pass reads only as a matmul's input are BF16: the
// RMSNorm outputs ln1 and ln2 (q|k|v's and gate|up's input), the attention
// output atty (o_proj's) and silu(gate)·up (down_proj's); the RMSNorms'
// inputs, gate|up and q|k|v, which their own backward passes read, stay
// F32.
func (llamaFamily) layoutActs(m *Model, a *Acts, b, t int, opts ActsOptions, w WeightsInfo, buf func(kernels.DType, int) kernels.Buffer) {
	c := m.Config
	H, F, V, NH, NKV := c.HiddenSize, c.FFNDim, c.VocabSize, c.NumHeads, c.KVHeads()
	W, A := c.qkvWidth(), c.NumHeads*c.HeadSize()
	n := b * t
	al := startActs(c, a, b, t, opts, w, buf)
	f32, kept := al.f32, al.kept
	a.cos, a.sin = f32(ropeRows(t)*c.HeadSize()/2), f32(ropeRows(t)*c.HeadSize()/2) // at a fixed place: ensureRope
	for i := range a.resid {
		a.resid[i] = f32(n * H)
	}
	for i := range a.layers {
		la := &a.layers[i]
		la.ln1, la.ln1Rstd = kept(n*H), f32(n)
		if c.QKNorm {
			la.qkvRaw, la.qRstd, la.kRstd = f32(n*W), f32(n*NH), f32(n*NKV)
		}
		la.qkv = f32(n * W)
		la.att, la.lse = attnStore(w, f32, b, NH, t)
		la.atty, la.attnOut, la.s1 = kept(n*A), f32(n*H), f32(n*H)
		la.ln2, la.ln2Rstd = kept(n*H), f32(n)
		la.fch, la.fchAct, la.fc2o = f32(2*n*F), kept(n*F), f32(n*H)
	}
	a.fin, a.finRstd = f32(n*H), f32(n)
	a.y = a.fin
	if !opts.NoLogits {
		a.logits, a.losses = f32(n*V), f32(n)
	}
	if m.opts.ValueHead {
		a.values = f32(n)
	}
	if opts.Train {
		a.dA, a.dB, a.dqkv, a.datty = f32(n*H), f32(n*H), f32(n*W), f32(n*A)
		a.dfch, a.dact = f32(2*n*F), f32(n*F)
		a.dy = f32(n * H)
		a.dlosses, a.dvalues = f32(n), f32(n)
	}
	if a.store {
		a.wsH, a.wsF = f32(n*max(H, A)), f32(n*F) // ln1, atty, ln2; act
	}
}

// llamaBufs are the buffers one pass of a layer reads and writes: the
// layer's saved activations (Forward), or a KV cache's scratch (Decode),
// where the residual stream is updated in place (x = s1 = out) and the
// norms share their buffers.
type llamaBufs struct {
	b, t      int            // rows and positions of this pass (N = b·t)
	pos, mask kernels.Buffer // I32 [N] position ids; the attention mask ([B,T], or the cache's [B,Tmax])
	cos, sin  kernels.Buffer // the rotary tables, rows for every position id in pos
	cache     *Cache         // decoding: attend against (and append to) this cache from position t0
	t0        int

	x, s1, out           kernels.Buffer // [N,H]: the layer's input, after attention, its output
	ln1, rstd1           kernels.Buffer // [N,H], [N]: input_layernorm
	qkvRaw, qRstd, kRstd kernels.Buffer // Qwen3: [N,W] before q/k norm, [N,NH], [N,NKV]
	qkv                  kernels.Buffer // [N,W]: q|k|v after q/k norm and RoPE
	att                  kernels.Buffer // [B,NH,T,T] attention probabilities (Forward without flash attention)
	lse                  kernels.Buffer // [B,NH,T] their log-sum-exp (Forward with flash attention)
	atty                 kernels.Buffer // [N,NH·HS] attention output
	attnOut              kernels.Buffer // [N,H] o_proj output
	ln2, rstd2           kernels.Buffer // [N,H], [N]: post_attention_layernorm
	gu                   kernels.Buffer // [N,2F] gate|up
	act                  kernels.Buffer // [N,F] silu(gate)·up
	fc2o                 kernels.Buffer // [N,H] down_proj output

	// With a bf16 store (Acts.store), ln1, atty, ln2 and act above are
	// the store's F32 working buffers, and these are where the pass keeps
	// them, rounded to BF16 (nil without a store).
	keptLn1, keptAtty, keptLn2, keptAct kernels.Buffer
}

// llamaBufs are layer l's buffers in a Forward pass.
func (a *Acts) llamaBufs(l int) llamaBufs {
	la := a.layer(l)
	x := llamaBufs{
		b: a.B, t: a.T, pos: a.pos, mask: a.maskBuf(), cos: a.cos, sin: a.sin,
		x: a.resid[l], s1: la.s1, out: a.resid[l+1],
		ln1: la.ln1, rstd1: la.ln1Rstd, qkvRaw: la.qkvRaw, qRstd: la.qRstd, kRstd: la.kRstd,
		qkv: la.qkv, att: la.att, lse: la.lse, atty: la.atty, attnOut: la.attnOut,
		ln2: la.ln2, rstd2: la.ln2Rstd, gu: la.fch, act: la.fchAct, fc2o: la.fc2o,
	}
	if a.store {
		x.keptLn1, x.keptAtty, x.keptLn2, x.keptAct = la.ln1, la.atty, la.ln2, la.fchAct
		x.ln1, x.ln2 = a.wsH.Slice(0, la.ln1.Len()), a.wsH.Slice(0, la.ln2.Len())
		x.atty, x.act = a.wsH.Slice(0, la.atty.Len()), a.wsF
	}
	return x
}

// keep stores an F32 tensor the forward computed into where a bf16 store
// keeps it (a no-op without one: kept is nil).
func (ly llamaLayer) keep(kept, ws kernels.Buffer) {
	if kept != nil {
		ly.d.Copy(kept, ws)
	}
}

// widen returns, as F32, a tensor the forward kept: ws itself without a
// store (kept nil), else kept widened into the working buffer ws.
func (ly llamaLayer) widen(kept, ws kernels.Buffer) kernels.Buffer {
	if kept != nil {
		ly.d.Copy(ws, kept)
	}
	return ws
}

// llamaLayer is one decoder layer of a model: its weights and sizes, with
// the forward and backward of its typed sub-blocks (RMSNorm, attention,
// MLP).
type llamaLayer struct {
	m                    *Model
	l                    int
	w                    *LayerParams
	d                    kernels.Device
	H, F, NH, NKV, HS, W int
	eps                  float32
	qkNorm               bool
}

func (m *Model) llamaLayer(l int) llamaLayer {
	c := m.Config
	return llamaLayer{
		m: m, l: l, w: &m.Params.Layers[l], d: m.Dev,
		H: c.HiddenSize, F: c.FFNDim, NH: c.NumHeads, NKV: c.KVHeads(), HS: c.HeadSize(), W: c.qkvWidth(),
		eps: float32(c.RMSNormEps), qkNorm: c.QKNorm,
	}
}

// forward runs the layer: the attention block, then the MLP block, each
// normed on the way in and added to the residual stream on the way out.
func (ly llamaLayer) forward(x llamaBufs) {
	N := x.b * x.t
	ly.d.RMSNormForward(x.ln1, x.rstd1, x.x, ly.w.AttnLNW, N, ly.H, ly.eps)
	ly.keep(x.keptLn1, x.ln1)
	ly.attention(x)
	ly.d.Add(x.s1, x.x, x.attnOut, N*ly.H)
	ly.d.RMSNormForward(x.ln2, x.rstd2, x.s1, ly.w.FFNLNW, N, ly.H, ly.eps)
	ly.keep(x.keptLn2, x.ln2)
	ly.mlp(x)
	ly.d.Add(x.out, x.s1, x.fc2o, N*ly.H)
}

// attention: q|k|v = ln1·Wqkvᵀ + b; Qwen3's q_norm and k_norm per head;
// RoPE on the q and k heads; grouped-query attention (over the cache when
// decoding); o_proj.
func (ly llamaLayer) attention(x llamaBufs) {
	d, w, N := ly.d, ly.w, x.b*x.t
	qkv := x.qkv
	if ly.qkNorm {
		qkv = x.qkvRaw
	}
	ly.m.linearForward(ly.l, SiteQKV, qkv, x.ln1, w.QKVW, w.QKVB, N, ly.H, ly.W)
	if ly.qkNorm {
		q := ly.NH * ly.HS
		d.Copy(x.qkv, x.qkvRaw) // v passes through
		d.HeadRMSNormForward(x.qkv, x.qRstd, x.qkvRaw, w.QNormW, N, ly.NH, ly.HS, ly.W, ly.eps)
		d.HeadRMSNormForward(x.qkv.Slice(q, N*ly.W-q), x.kRstd, x.qkvRaw.Slice(q, N*ly.W-q), w.KNormW, N, ly.NKV, ly.HS, ly.W, ly.eps)
	}
	d.RoPEForward(x.qkv, x.pos, x.cos, x.sin, N, ly.NH+ly.NKV, ly.HS, ly.W)
	if kc := x.cache; kc != nil {
		d.GQAAttentionDecode(x.atty, x.qkv, kc.k[ly.l], kc.v[ly.l], kc.mask, x.b, x.t, x.t0, kc.Tmax, ly.NH, ly.NKV, ly.HS)
	} else if x.lse != nil {
		d.(kernels.FlashAttention).FlashAttentionForward(x.atty, x.lse, x.qkv, x.mask, x.b, x.t, ly.NH, ly.NKV, ly.HS)
	} else {
		d.GQAAttentionForward(x.atty, x.att, x.qkv, x.mask, x.b, x.t, ly.NH, ly.NKV, ly.HS)
	}
	ly.keep(x.keptAtty, x.atty)
	ly.m.linearForward(ly.l, SiteOut, x.attnOut, x.atty, w.OutW, w.OutB, N, ly.NH*ly.HS, ly.H)
}

// mlp: gate|up = ln2·W1ᵀ (+ b); act = silu(gate)·up; down_proj.
func (ly llamaLayer) mlp(x llamaBufs) {
	w, N := ly.w, x.b*x.t
	ly.m.linearForward(ly.l, SiteFC1, x.gu, x.ln2, w.FC1W, w.FC1B, N, ly.H, 2*ly.F)
	ly.d.SwiGLUForward(x.act, x.gu, N, ly.F)
	ly.keep(x.keptAct, x.act)
	ly.m.linearForward(ly.l, SiteFC2, x.fc2o, x.act, w.FC2W, w.FC2B, N, ly.F, ly.H)
}

// backward is forward reversed, accumulating into gw: a.dA holds the
// gradient of the layer's output on entry (the residual stream's) and of
// its input on return.
func (ly llamaLayer) backward(a *Acts, x llamaBufs, gw *LayerParams) {
	d, w, N := ly.d, ly.w, x.b*x.t
	// MLP block: out = s1 + down_proj(silu(gate)·up), gate|up = W1·n2(s1).
	ly.m.linearBackward(ly.l, SiteFC2, a.dact, gw.FC2W, gw.FC2B, a.dA, ly.widen(x.keptAct, x.act), w.FC2W, N, ly.F, ly.H)
	d.SwiGLUBackward(a.dfch, a.dact, x.gu, N, ly.F)
	ly.m.linearBackward(ly.l, SiteFC1, a.dB, gw.FC1W, gw.FC1B, a.dfch, ly.widen(x.keptLn2, x.ln2), w.FC1W, N, ly.H, 2*ly.F)
	d.RMSNormBackward(a.dA, gw.FFNLNW, a.dB, x.s1, w.FFNLNW, x.rstd2, N, ly.H)
	// Attention block: s1 = x + o_proj(attention(...)), qkv from n1(x).
	ly.m.linearBackward(ly.l, SiteOut, a.datty, gw.OutW, gw.OutB, a.dA, ly.widen(x.keptAtty, x.atty), w.OutW, N, ly.NH*ly.HS, ly.H)
	if x.lse != nil {
		d.(kernels.FlashAttention).FlashAttentionBackward(a.dqkv, a.datty, x.qkv, x.lse, x.mask, x.b, x.t, ly.NH, ly.NKV, ly.HS)
	} else {
		d.GQAAttentionBackward(a.dqkv, a.datty, x.qkv, x.att, x.mask, x.b, x.t, ly.NH, ly.NKV, ly.HS)
	}
	d.RoPEBackward(a.dqkv, x.pos, x.cos, x.sin, N, ly.NH+ly.NKV, ly.HS, ly.W)
	if ly.qkNorm {
		q := ly.NH * ly.HS
		d.HeadRMSNormBackward(a.dqkv, gw.QNormW, a.dqkv, x.qkvRaw, w.QNormW, x.qRstd, N, ly.NH, ly.HS, ly.W)
		dk := a.dqkv.Slice(q, N*ly.W-q)
		d.HeadRMSNormBackward(dk, gw.KNormW, dk, x.qkvRaw.Slice(q, N*ly.W-q), w.KNormW, x.kRstd, N, ly.NKV, ly.HS, ly.W)
	}
	ly.m.linearBackward(ly.l, SiteQKV, a.dB, gw.QKVW, gw.QKVB, a.dqkv, ly.widen(x.keptLn1, x.ln1), w.QKVW, N, ly.H, ly.W)
	d.RMSNormBackward(a.dA, gw.AttnLNW, a.dB, x.x, w.AttnLNW, x.rstd1, N, ly.H)
}

// embed: the rotary tables of this shape when not yet there, and x =
// embed_tokens(ids).
func (llamaFamily) embed(m *Model, a *Acts) {
	m.ensureRope(a)
	m.Dev.EmbeddingForward(a.resid[0], a.ids, m.Params.EmbedToks, a.B*a.T, m.Config.HiddenSize)
}

func (llamaFamily) layerForward(m *Model, a *Acts, l int) {
	m.llamaLayer(l).forward(a.llamaBufs(l))
}

// final: y = norm(x).
func (llamaFamily) final(m *Model, a *Acts) {
	c := m.Config
	m.Dev.RMSNormForward(a.fin, a.finRstd, a.resid[c.NumLayers], m.Params.FinalLNW, a.B*a.T, c.HiddenSize, float32(c.RMSNormEps))
}

func (llamaFamily) finalBackward(m *Model, a *Acts, gr *Params) {
	c, d := m.Config, m.Dev
	d.Zero(a.dA)
	d.RMSNormBackward(a.dA, gr.FinalLNW, a.dy, a.resid[c.NumLayers], m.Params.FinalLNW, a.finRstd, a.B*a.T, c.HiddenSize)
}

func (llamaFamily) layerBackward(m *Model, a *Acts, gw *LayerParams, l int) {
	m.llamaLayer(l).backward(a, a.llamaBufs(l), gw)
}

func (llamaFamily) embedBackward(m *Model, a *Acts, gr *Params) {
	m.Dev.EmbeddingBackward(gr.EmbedToks, a.dA, a.ids, a.B*a.T, m.Config.HiddenSize)
}

// layoutCache: K and V [B,NKV,Tmax,HS] per layer (sized by the KV heads),
// the rotary tables of Tmax positions (NewCache fills them), and the scratch of chunks of up to MaxChunk positions.
func (llamaFamily) layoutCache(c *Config, kc *Cache, alloc func(kernels.DType, int) kernels.Buffer) {
	H, F, V, NH, NKV, HS, W := c.HiddenSize, c.FFNDim, c.VocabSize, c.NumHeads, c.KVHeads(), c.HeadSize(), c.qkvWidth()
	b, n := kc.B, kc.B*kc.MaxChunk
	f32 := func(k int) kernels.Buffer { return alloc(kernels.F32, k) }
	for range c.NumLayers {
		kc.k = append(kc.k, f32(b*NKV*kc.Tmax*HS))
		kc.v = append(kc.v, f32(b*NKV*kc.Tmax*HS))
	}
	kc.mask = alloc(kernels.I32, b*kc.Tmax)
	kc.ids, kc.pos = alloc(kernels.I32, n), alloc(kernels.I32, n)
	kc.cos, kc.sin = f32(ropeRows(kc.Tmax)*HS/2), f32(ropeRows(kc.Tmax)*HS/2)
	kc.x, kc.ln, kc.tmp, kc.h = f32(n*H), f32(n*H), f32(n*H), f32(n*NH*HS)
	kc.qkv = f32(n * W)
	if c.QKNorm {
		kc.qkvRaw, kc.qRstd, kc.kRstd = f32(n*W), f32(n*NH), f32(n*NKV)
	}
	kc.fch, kc.act = f32(2*n*F), f32(n*F)
	kc.rstd = f32(n)
	kc.last, kc.lastLogits = f32(b*H), f32(b*V)
}

// decode: the embeddings, every layer through the same layer code as
// Forward with the cache's scratch and attention over the cache, and the
// final norm.
func (llamaFamily) decode(m *Model, kc *Cache, tn, t0 int) kernels.Buffer {
	c, d := m.Config, m.Dev
	N, H, F, W := kc.B*tn, c.HiddenSize, c.FFNDim, c.qkvWidth()
	sl := func(b kernels.Buffer, cols int) kernels.Buffer {
		if b == nil {
			return nil
		}
		return b.Slice(0, N*cols)
	}
	x, ln, tmp, rstd := sl(kc.x, H), sl(kc.ln, H), sl(kc.tmp, H), sl(kc.rstd, 1)
	bufs := llamaBufs{
		b: kc.B, t: tn, pos: sl(kc.pos, 1), mask: kc.mask, cos: kc.cos, sin: kc.sin, cache: kc, t0: t0,
		x: x, s1: x, out: x,
		ln1: ln, rstd1: rstd, ln2: ln, rstd2: rstd,
		qkvRaw: sl(kc.qkvRaw, W), qRstd: sl(kc.qRstd, c.NumHeads), kRstd: sl(kc.kRstd, c.KVHeads()),
		qkv: sl(kc.qkv, W), atty: sl(kc.h, c.NumHeads*c.HeadSize()), attnOut: tmp,
		gu: sl(kc.fch, 2*F), act: sl(kc.act, F), fc2o: tmp,
	}
	d.EmbeddingForward(x, kc.ids.Slice(0, N), m.Params.EmbedToks, N, H)
	for l := range c.NumLayers {
		m.llamaLayer(l).forward(bufs)
	}
	d.RMSNormForward(ln, rstd, x, m.Params.FinalLNW, N, H, float32(c.RMSNormEps))
	return ln
}
