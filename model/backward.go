package model

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// Grad holds the upstream gradient of a backward pass: the gradient of the
// objective with respect to each position's cross-entropy loss and value.
// Either may be nil.
type Grad struct {
	// DLosses[b,t] = ∂objective/∂loss[b,t] ([B,T]). For the mean loss it is
	// 1/count at counted positions. Since loss = −log p(target), a gradient
	// with respect to log-probabilities is passed negated.
	DLosses []float32
	// DValues[b,t] = ∂objective/∂value[b,t] ([B,T]).
	DValues []float32
}

// MeanLossGrad is the Grad of the mean cross-entropy of the last Forward.
func (m *Model) MeanLossGrad(a *Acts) Grad {
	cnt := 0
	for _, t := range a.hostTargets {
		if t != IgnoreIndex {
			cnt++
		}
	}
	dl := make([]float32, a.B*a.T)
	if cnt > 0 {
		for i, t := range a.hostTargets {
			if t != IgnoreIndex {
				dl[i] = 1 / float32(cnt)
			}
		}
	}
	return Grad{DLosses: dl}
}

// Backward accumulates into m.Grads the gradient of the objective whose
// upstream gradient is g, for the batch of the last Forward on a. It
// overwrites the logits with their gradient.
func (m *Model) Backward(a *Acts, g Grad) error {
	if m.Grads == nil {
		return fmt.Errorf("model: Backward before AllocGrads")
	}
	if a.dA == nil {
		return fmt.Errorf("model: Backward needs Acts made with Train")
	}
	if !m.FreezeBase && m.Grads.Flat == nil {
		return fmt.Errorf("model: gradients were allocated for a frozen base (FreezeBase); call AllocGrads again after clearing FreezeBase")
	}
	c, d, p, gr := m.Config, m.Dev, m.Params, m.Grads
	N, H, P, V := a.B*a.T, c.HiddenSize, c.WordEmbedProjDim, c.VocabSize
	if m.FreezeBase && gr.Flat != nil { // only the value head's gradient; nil views are skipped
		gr = &Params{VHead: gr.VHead, Layers: make([]LayerParams, c.NumLayers)}
	}

	if err := m.acquire(-1); err != nil {
		return err
	}
	// Head, reversed: value head and lm_head into dy.
	d.Zero(a.dy)
	if g.DLosses != nil {
		if !a.hasTargets || !a.logitsLive {
			return fmt.Errorf("model: loss gradient given, but the last Forward computed no loss")
		}
		if len(g.DLosses) != N {
			return fmt.Errorf("model: DLosses has %d entries, want %d", len(g.DLosses), N)
		}
		d.WriteF32(a.dlosses, g.DLosses)
		d.CrossEntropyBackward(a.logits, a.dlosses, a.logits, a.targets, N, V, IgnoreIndex)
		a.logitsLive = false
		d.MatmulBackward(a.dy, gr.LMHead, nil, a.logits, a.y, p.LMHead, N, P, V)
	}
	if g.DValues != nil {
		if p.VHead == nil {
			return fmt.Errorf("model: value gradient given, but the model has no value head")
		}
		if len(g.DValues) != N {
			return fmt.Errorf("model: DValues has %d entries, want %d", len(g.DValues), N)
		}
		d.WriteF32(a.dvalues, g.DValues)
		// dy += dvalues[N,1]·v_head[1,P]; dv_head += dvaluesᵀ·y.
		d.Gemm(false, false, N, P, 1, 1, a.dvalues, 1, p.VHead, P, 1, a.dy, P)
		d.Gemm(true, false, 1, P, N, 1, a.dvalues, 1, a.y, P, 1, gr.VHead, P)
	}
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

	for l := c.NumLayers - 1; l >= 0; l-- {
		if err := m.acquire(l); err != nil {
			return err
		}
		if a.opts.Checkpoint {
			m.layerForward(a, l) // recompute this layer's activations
		}
		m.layerBackward(a, &gr.Layers[l], l)
		if err := m.release(l, true); err != nil {
			return err
		}
	}

	// Embeddings, reversed.
	if m.FreezeBase {
		return m.release(-1, true)
	}
	d.EmbeddingBackward(gr.EmbedPos, a.dA, a.pos, N, H)
	if c.HasProjections() {
		d.MatmulBackward(a.demb, gr.ProjectIn, nil, a.dA, a.emb, p.ProjectIn, N, P, H)
		d.EmbeddingBackward(gr.EmbedToks, a.demb, a.ids, N, P)
	} else {
		d.EmbeddingBackward(gr.EmbedToks, a.dA, a.ids, N, P)
	}
	return m.release(-1, true)
}

// layerBackward is layerForward reversed, accumulating into gw. On entry a.dA
// holds the gradient of the layer's output; on return, of its input.
func (m *Model) layerBackward(a *Acts, gw *LayerParams, l int) {
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
		m.activationBackward(a.dfch, a.dfch, act, la.fch, N*F)
		m.linearBackward(l, SiteFC1, a.dB, gw.FC1W, gw.FC1B, a.dfch, widen(la.ln2, a.wsH), w.FC1W, N, H, F)
		d.LayerNormBackward(a.dA, gw.FFNLNW, gw.FFNLNB, a.dB, la.s1, w.FFNLNW, la.ln2Mean, la.ln2Rstd, N, H)
		// s1 = r + attnOut
		dattn := undrop(a.dC, a.dA, la.drop1)
		m.linearBackward(l, SiteOut, a.dB, gw.OutW, gw.OutB, dattn, widen(la.atty, a.wsH), w.OutW, N, H, H)
		d.AttentionBackward(a.dqkv, a.dB, la.qkv, la.att, mask, B, T, c.NumHeads, c.HeadSize())
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
	m.activationBackward(a.dfch, a.dfch, act, la.fch, N*F)
	m.linearBackward(l, SiteFC1, a.dA, gw.FC1W, gw.FC1B, a.dfch, widen(la.ln1, a.wsH), w.FC1W, N, H, F)
	d.Add(a.dA, a.dA, a.dB, N*H)
	// ln1 = LN1(s1)
	d.Zero(a.dB)
	d.LayerNormBackward(a.dB, gw.AttnLNW, gw.AttnLNB, a.dA, la.s1, w.AttnLNW, la.ln1Mean, la.ln1Rstd, N, H)
	// s1 = r + attnOut
	dattn := undrop(a.dC, a.dB, la.drop1)
	m.linearBackward(l, SiteOut, a.dA, gw.OutW, gw.OutB, dattn, widen(la.atty, a.wsH), w.OutW, N, H, H)
	d.AttentionBackward(a.dqkv, a.dA, la.qkv, la.att, mask, B, T, c.NumHeads, c.HeadSize())
	m.linearBackward(l, SiteQKV, a.dA, gw.QKVW, gw.QKVB, a.dqkv, r, w.QKVW, N, H, 3*H)
	d.Add(a.dA, a.dA, a.dB, N*H)
}
