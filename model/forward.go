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
	f := m.Config.family()
	pos := f.positions(in.Mask, a.B, a.T, nil)
	if err := f.checkPositions(m.Config, pos); err != nil {
		return err
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
	c, d, p, f := m.Config, m.Dev, m.Params, m.Config.family()
	N, P, V := a.B*a.T, c.WordEmbedProjDim, c.VocabSize
	if m.adapter != nil {
		if err := m.adapter.Reserve(N); err != nil {
			return err
		}
	}
	if err := m.acquire(-1, false); err != nil {
		return err
	}

	f.embed(m, a)
	for l := range c.NumLayers {
		if err := m.acquire(l, false); err != nil {
			return err
		}
		f.layerForward(m, a, l)
		if err := m.release(l, false); err != nil {
			return err
		}
	}
	f.final(m, a)

	// Heads: lm_head, loss, value head.
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
func (m *Model) acquire(part int, backward bool) error {
	if m.Hook == nil {
		return nil
	}
	if err := m.Hook.Acquire(part, backward); err != nil {
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
