package model

import "fmt"

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
	c, d, p, gr, f := m.Config, m.Dev, m.Params, m.Grads, m.Config.family()
	N, P, V := a.B*a.T, c.WordEmbedProjDim, c.VocabSize
	if m.FreezeBase && gr.Flat != nil { // only the value head's gradient; nil views are skipped
		gr = &Params{VHead: gr.VHead, Layers: make([]LayerParams, c.NumLayers)}
	}

	if err := m.acquire(-1, true); err != nil {
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
	f.finalBackward(m, a, gr)

	for l := c.NumLayers - 1; l >= 0; l-- {
		if err := m.acquire(l, true); err != nil {
			return err
		}
		if a.opts.Checkpoint {
			f.layerForward(m, a, l) // recompute this layer's activations
		}
		f.layerBackward(m, a, &gr.Layers[l], l)
		if err := m.release(l, true); err != nil {
			return err
		}
	}

	// Embeddings, reversed.
	if m.FreezeBase {
		return m.release(-1, true)
	}
	f.embedBackward(m, a, gr)
	return m.release(-1, true)
}
