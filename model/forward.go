package model

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// Batch is the input of a forward pass. Slices are row-major [B,T].
type Batch struct {
	IDs []int32
	// Mask is the attention mask (1 = real token, 0 = padding); nil means
	// all ones. Padding may be on either side.
	Mask []int32
	// Targets are next-token targets aligned with IDs (Targets[b,t] is the
	// token that should follow position t), IgnoreIndex where no loss is
	// taken. nil skips the loss. ShiftLabels builds them from labels.
	Targets []int32
	// Seed keys the dropout masks of this pass (training only).
	Seed uint64
}

// ShiftLabels turns Hugging Face-style labels (aligned with the inputs, the
// model shifts them) into Targets: targets[b,t] = labels[b,t+1], and
// IgnoreIndex at the last position of each row.
func ShiftLabels(labels []int32, b, t int) []int32 {
	out := make([]int32, len(labels))
	for i := 0; i < b; i++ {
		row := labels[i*t : (i+1)*t]
		o := out[i*t : (i+1)*t]
		copy(o, row[1:])
		o[t-1] = IgnoreIndex
	}
	return out
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

// upload checks a batch and copies it to the device. It checks everything
// before it writes anything, so a rejected batch leaves a as it was.
func (m *Model) upload(a *Acts, in Batch) error {
	n := a.B * a.T
	if len(in.IDs) != n {
		return fmt.Errorf("model: batch has %d ids, want B·T = %d", len(in.IDs), n)
	}
	V := int32(m.Config.VocabSize)
	for i, id := range in.IDs {
		if id < 0 || id >= V {
			return fmt.Errorf("model: token id %d at position %d is outside the vocabulary [0, %d)", id, i, V)
		}
	}
	if in.Mask != nil && len(in.Mask) != n {
		return fmt.Errorf("model: attention mask has %d entries, want %d", len(in.Mask), n)
	}
	pos := Positions(in.Mask, a.B, a.T, nil)
	for i, p := range pos {
		if int(p) >= m.Config.MaxPositions+2 {
			return fmt.Errorf("model: position %d at index %d exceeds max_position_embeddings %d", p-2, i, m.Config.MaxPositions)
		}
	}
	if in.Targets != nil {
		if len(in.Targets) != n {
			return fmt.Errorf("model: targets have %d entries, want %d", len(in.Targets), n)
		}
		for i, tg := range in.Targets {
			if tg != IgnoreIndex && (tg < 0 || tg >= V) {
				return fmt.Errorf("model: target %d at position %d is outside the vocabulary", tg, i)
			}
		}
	}
	d := m.Dev
	d.WriteI32(a.ids, in.IDs)
	d.WriteI32(a.pos, pos)
	a.hasMask = in.Mask != nil
	if a.hasMask {
		d.WriteI32(a.mask, in.Mask)
	}
	a.hasTargets = in.Targets != nil && a.logits != nil
	a.hostTargets = a.hostTargets[:0] // no stale targets for MeanLossGrad
	if in.Targets != nil {
		d.WriteI32(a.targets, in.Targets)
		a.hostTargets = append(a.hostTargets, in.Targets...)
	}
	a.seed = in.Seed
	return nil
}

func (a *Acts) maskBuf() kernels.Buffer {
	if a.hasMask {
		return a.mask
	}
	return nil
}

// Forward runs the decoder over a batch: logits (unless NoLogits), the
// per-position losses when Targets are given, and the value head.
func (m *Model) Forward(a *Acts, in Batch) error {
	if err := m.upload(a, in); err != nil {
		return err
	}
	c, d, p := m.Config, m.Dev, m.Params
	N, H, P, V := a.B*a.T, c.HiddenSize, c.WordEmbedProjDim, c.VocabSize
	if m.adapter != nil {
		if err := m.adapter.Reserve(N); err != nil {
			return err
		}
	}
	if err := m.acquire(-1); err != nil {
		return err
	}

	// Embeddings: tokens (projected to H when P != H) plus positions.
	d.EmbeddingForward(a.emb, a.ids, p.EmbedToks, N, P)
	if c.HasProjections() {
		d.MatmulForward(a.embIn, a.emb, p.ProjectIn, nil, N, P, H)
	}
	d.EmbeddingForward(a.posEmb, a.pos, p.EmbedPos, N, H)
	d.Add(a.resid[0], a.embIn, a.posEmb, N*H)

	for l := range c.NumLayers {
		if err := m.acquire(l); err != nil {
			return err
		}
		m.layerForward(a, l)
		if err := m.release(l, false); err != nil {
			return err
		}
	}

	// Head: final LayerNorm, project_out, lm_head, loss, value head.
	x := a.resid[c.NumLayers]
	if c.HasFinalLayerNorm() {
		d.LayerNormForward(a.fin, a.finMean, a.finRstd, x, p.FinalLNW, p.FinalLNB, N, H, lnEps)
	}
	if c.HasProjections() {
		d.MatmulForward(a.y, a.fin, p.ProjectOut, nil, N, H, P)
	}
	a.logitsLive = false
	if a.logits != nil {
		d.MatmulForward(a.logits, a.y, p.LMHead, nil, N, P, V)
		a.logitsLive = true
		if a.hasTargets {
			d.CrossEntropyForward(a.losses, a.logits, a.targets, N, V, IgnoreIndex)
		}
	}
	if p.VHead != nil {
		d.MatmulForward(a.values, a.y, p.VHead, nil, N, P, 1)
	}
	return m.release(-1, false)
}

// acquire and release call the ParamHook, if any.
func (m *Model) acquire(part int) error {
	if m.Hook == nil {
		return nil
	}
	if err := m.Hook.Acquire(part); err != nil {
		return fmt.Errorf("model: weights of %s: %w", partName(part), err)
	}
	return nil
}

func (m *Model) release(part int, backward bool) error {
	if m.Hook == nil {
		return nil
	}
	if err := m.Hook.Release(part, backward); err != nil {
		return fmt.Errorf("model: release of %s: %w", partName(part), err)
	}
	return nil
}

func partName(part int) string {
	if part < 0 {
		return "the embeddings and heads"
	}
	return fmt.Sprintf("layer %d", part)
}

// dropoutSeed derives the seed of one dropout site.
func dropoutSeed(seed uint64, layer, site int) uint64 {
	x := seed ^ (uint64(layer)*2+uint64(site)+1)*0x9E3779B97F4A7C15
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	return x ^ x>>29
}

// layerForward runs decoder layer l from a.resid[l] into a.resid[l+1].
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
func (m *Model) layerForward(a *Acts, l int) {
	c, d, w, la := m.Config, m.Dev, &m.Params.Layers[l], a.layer(l)
	B, T, N, H, F := a.B, a.T, a.B*a.T, c.HiddenSize, c.FFNDim
	r, out := a.resid[l], a.resid[l+1]
	mask := a.maskBuf()
	dropout := func(buf, scale kernels.Buffer, site int) {
		if scale != nil {
			d.DropoutForward(buf, scale, buf, float32(c.Dropout), dropoutSeed(a.seed, l, site), N*H)
		}
	}

	// Where this pass computes the tensors a bf16 store keeps rounded
	// (Acts.store): its F32 working buffers, kept once used.
	ln1, ln2, atty, fch, act := la.ln1, la.ln2, la.atty, la.fch, la.fchAct
	if a.store {
		ln1, ln2, atty, act = a.wsH, a.wsH, a.wsH, a.wsF
		if c.Activation == "relu" {
			fch = a.wsF
		}
	}
	keep := func(dst, src kernels.Buffer) {
		if a.store {
			d.Copy(dst, src)
		}
	}

	attnIn := r
	if c.DoLayerNormBefore {
		d.LayerNormForward(ln1, la.ln1Mean, la.ln1Rstd, r, w.AttnLNW, w.AttnLNB, N, H, lnEps)
		attnIn = ln1
	}
	m.linearForward(l, SiteQKV, la.qkv, attnIn, w.QKVW, w.QKVB, N, H, 3*H)
	if c.DoLayerNormBefore {
		keep(la.ln1, ln1)
	}
	d.AttentionForward(atty, la.att, la.qkv, mask, B, T, c.NumHeads, c.HeadSize())
	m.linearForward(l, SiteOut, la.attnOut, atty, w.OutW, w.OutB, N, H, H)
	keep(la.atty, atty)
	dropout(la.attnOut, la.drop1, 0)
	d.Add(la.s1, r, la.attnOut, N*H)

	ffnIn := ln1
	if c.DoLayerNormBefore {
		d.LayerNormForward(ln2, la.ln2Mean, la.ln2Rstd, la.s1, w.FFNLNW, w.FFNLNB, N, H, lnEps)
		ffnIn = ln2
	} else {
		d.LayerNormForward(ln1, la.ln1Mean, la.ln1Rstd, la.s1, w.AttnLNW, w.AttnLNB, N, H, lnEps)
	}
	m.linearForward(l, SiteFC1, fch, ffnIn, w.FC1W, w.FC1B, N, H, F)
	if c.DoLayerNormBefore {
		keep(la.ln2, ln2)
	}
	m.activationForward(act, fch, N*F)
	m.linearForward(l, SiteFC2, la.fc2o, act, w.FC2W, w.FC2B, N, F, H)
	keep(la.fchAct, act)
	dropout(la.fc2o, la.drop2, 1)
	if c.DoLayerNormBefore {
		d.Add(out, la.s1, la.fc2o, N*H)
	} else {
		d.Add(la.s2, ln1, la.fc2o, N*H)
		keep(la.ln1, ln1)
		d.LayerNormForward(out, la.ln2Mean, la.ln2Rstd, la.s2, w.FFNLNW, w.FFNLNB, N, H, lnEps)
	}
}

func (m *Model) activationForward(out, inp kernels.Buffer, n int) {
	if m.Config.Activation == "relu" {
		m.Dev.ReLUForward(out, inp, n)
	} else {
		m.Dev.GELUForward(out, inp, n)
	}
}

// activationBackward is activationForward's backward, given its output
// act (ReLU's mask) and its input pre (GELU's).
func (m *Model) activationBackward(dinp, dout, act, pre kernels.Buffer, n int) {
	if m.Config.Activation == "relu" {
		m.Dev.ReLUBackward(dinp, dout, act, n)
	} else {
		m.Dev.GELUBackward(dinp, dout, pre, n)
	}
}

// Logits copies the logits [B,T,V] of the last Forward to the host.
func (m *Model) Logits(a *Acts) ([]float32, error) {
	if !a.logitsLive {
		return nil, fmt.Errorf("model: no logits (NoLogits, or overwritten by Backward)")
	}
	out := make([]float32, a.logits.Len())
	m.Dev.ReadF32(out, a.logits)
	return out, nil
}

// Values copies the value-head outputs [B,T] of the last Forward to the host.
func (m *Model) Values(a *Acts) ([]float32, error) {
	if a.values == nil {
		return nil, fmt.Errorf("model: no value head")
	}
	out := make([]float32, a.values.Len())
	m.Dev.ReadF32(out, a.values)
	return out, nil
}

// Losses copies the per-position cross-entropy [B,T] of the last Forward to
// the host (0 at ignored positions).
func (m *Model) Losses(a *Acts) ([]float32, error) {
	if !a.hasTargets {
		return nil, fmt.Errorf("model: the last Forward had no targets")
	}
	out := make([]float32, a.losses.Len())
	m.Dev.ReadF32(out, a.losses)
	return out, nil
}

// MeanLoss is the mean cross-entropy over the non-ignored targets of the last
// Forward, and how many there were.
func (m *Model) MeanLoss(a *Acts) (float32, int, error) {
	l, err := m.Losses(a)
	if err != nil {
		return 0, 0, err
	}
	var sum float64
	cnt := 0
	for i, t := range a.hostTargets {
		if t != IgnoreIndex {
			sum += float64(l[i])
			cnt++
		}
	}
	if cnt == 0 {
		return 0, 0, nil
	}
	return float32(sum / float64(cnt)), cnt, nil
}
