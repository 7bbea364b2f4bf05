package train

import (
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
)

// ParamOptions choose what of a model is trained and how.
type ParamOptions struct {
	LR          float64 // base learning rate of the model's weights
	WeightDecay float64
	// LoRA, when not nil, adds its adapters as a group with LoRALR and the
	// model's weight decay (DeepSpeed-Chat decays the adapter weights).
	LoRA   *lora.LoRA
	LoRALR float64
	// OnlyLoRA trains only the adapters (and the value head, if any); the
	// base weights are frozen and get no gradients.
	OnlyLoRA bool
}

// Model is what ModelTrainable uses of a model: its flat parameters and
// gradients with their names and layout, the frozen-base switch, and (for
// ZeRO 2 and 3, see Flat.Model) its layers and parameter hook.
// *model.Model implements it.
type Model interface {
	LayerLayout
	Hookable
	// SetFreezeBase and BaseFrozen set and report model.Model.FreezeBase.
	SetFreezeBase(frozen bool)
	BaseFrozen() bool
	AllocGrads() error
	// Parameters and Gradients are the flat buffers and their named
	// views; Gradients is nil before AllocGrads.
	Parameters() *model.Params
	Gradients() *model.Params
	ParamNames() []string
	ParamRange(name string) (offset int, shape []int, ok bool)
}

var _ Model = (*model.Model)(nil)

// ModelTrainable builds the optimizer groups, gradient list and checkpoint
// state of a model (and its LoRA adapters): DeepSpeed-Chat's
// get_optimizer_grouped_parameters, with weight decay off for biases and
// LayerNorm weights and the adapters at their own learning rate. It sets
// FreezeBase for OnlyLoRA and allocates the model's gradients: with a frozen
// base only the value head's, and then the model's groups and gradients are
// the value head's alone (next to the adapters').
func ModelTrainable(m Model, o ParamOptions) (Trainable, error) {
	m.SetFreezeBase(o.OnlyLoRA && o.LoRA != nil)
	if err := m.AllocGrads(); err != nil {
		return Trainable{}, err
	}
	params, grads := m.Parameters(), m.Gradients()
	decay := optim.Group{Name: "decay", LR: o.LR, WeightDecay: o.WeightDecay}
	noDecay := optim.Group{Name: "no_decay", LR: o.LR}
	var decayAt, noDecayAt []SegmentAt
	tr := Trainable{State: map[string]kernels.Buffer{"model": params.Flat}}
	if m.BaseFrozen() {
		// Grads.Flat may be nil (AllocGrads allocated only v_head's).
		if grads.VHead != nil {
			g, at := &decay, &decayAt
			if optim.NoDecay("v_head.weight") {
				g, at = &noDecay, &noDecayAt
			}
			g.Segments = append(g.Segments, optim.Segment{Name: g.Name, Params: params.VHead, Grads: grads.VHead})
			*at = append(*at, SegmentAt{Flat: len(tr.Flats)})
			tr.Flats = append(tr.Flats, Flat{Name: "v_head", Params: params.VHead, Grads: grads.VHead})
			tr.Grads = append(tr.Grads, grads.VHead)
		}
		// The frozen base, for ZeRO-3 to partition (Flat: no Grads).
		tr.Flats = append(tr.Flats, Flat{Name: "model", Params: params.Flat, Units: ModelUnits(m), Model: m})
	} else {
		// Consecutive parameters of the same group form one segment.
		var cur *optim.Group
		var curAt *[]SegmentAt
		start, end := 0, 0
		flush := func() {
			if cur != nil && end > start {
				cur.Segments = append(cur.Segments, optim.Segment{
					Name: cur.Name, Params: params.Flat.Slice(start, end-start), Grads: grads.Flat.Slice(start, end-start)})
				*curAt = append(*curAt, SegmentAt{Flat: 0, Off: start})
			}
		}
		for _, name := range m.ParamNames() {
			off, shape, _ := m.ParamRange(name)
			n := 1
			for _, d := range shape {
				n *= d
			}
			g, at := &decay, &decayAt
			if optim.NoDecay(name) {
				g, at = &noDecay, &noDecayAt
			}
			if g != cur || off != end {
				flush()
				cur, curAt, start = g, at, off
			}
			end = off + n
		}
		flush()
		tr.Flats = append(tr.Flats, Flat{Name: "model", Params: params.Flat, Grads: grads.Flat, Units: ModelUnits(m), Model: m})
		tr.Grads = append(tr.Grads, grads.Flat)
	}
	for i, g := range []optim.Group{decay, noDecay} {
		if len(g.Segments) > 0 {
			tr.Groups = append(tr.Groups, g)
			tr.At = append(tr.At, [][]SegmentAt{decayAt, noDecayAt}[i])
		}
	}
	if o.LoRA != nil {
		tr.Groups = append(tr.Groups, optim.Group{Name: "lora", LR: o.LoRALR, WeightDecay: o.WeightDecay,
			Segments: []optim.Segment{{Name: "lora", Params: o.LoRA.Params, Grads: o.LoRA.Grads}}})
		tr.At = append(tr.At, []SegmentAt{{Flat: len(tr.Flats)}})
		tr.Flats = append(tr.Flats, Flat{Name: "lora", Params: o.LoRA.Params, Grads: o.LoRA.Grads})
		tr.Grads = append(tr.Grads, o.LoRA.Grads)
		tr.State["lora"] = o.LoRA.Params
	}
	return tr, nil
}
