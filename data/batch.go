package data

import "fmt"

// Batch is B examples padded to T tokens, row-major [B,T] int32 slices: what
// model.Batch takes (model.ShiftLabels turns Labels into its Targets).
type Batch struct {
	B, T int
	// IDs are the token ids, PAD at padded positions.
	IDs []int32
	// Mask is the attention mask: 1 for a real token, 0 for padding.
	Mask []int32
	// Labels are Hugging Face-style labels aligned with IDs (the model
	// shifts them): the token id where a loss is taken, IgnoreIndex
	// elsewhere. nil for batches without a language-model loss (pairs,
	// prompts).
	Labels []int32
}

// Collator pads examples into batches. Padding never relies on PAD differing
// from BOS or EOS: the mask says which positions are real.
type Collator struct {
	// T is the padded length: MaxSeqLen (phases 1-2), MaxPromptLen (phase 3)
	// or the block size (unsupervised).
	T int
	// PAD is the id written at padded positions.
	PAD int32
	// ResponseOnly restricts the phase-1 loss to the response (and EOS):
	// labels of the PromptLen prompt tokens become IgnoreIndex; for an
	// example with Spans (a chat template) only the spans' tokens, the
	// assistant messages, keep their labels. Off, the loss covers every
	// token as in DeepSpeed-Chat.
	ResponseOnly bool
}

func (c Collator) alloc(b int, labels bool) (Batch, error) {
	if c.T < 1 {
		return Batch{}, fmt.Errorf("data: collator length %d, want >= 1", c.T)
	}
	out := Batch{B: b, T: c.T, IDs: make([]int32, b*c.T), Mask: make([]int32, b*c.T)}
	for i := range out.IDs {
		out.IDs[i] = c.PAD
	}
	if labels {
		out.Labels = make([]int32, b*c.T)
		for i := range out.Labels {
			out.Labels[i] = IgnoreIndex
		}
	}
	return out, nil
}

// putRight writes ids at the start of row r (right padding).
func (c Collator) putRight(out *Batch, r int, ids []int32) error {
	if len(ids) > c.T {
		return fmt.Errorf("data: example of %d tokens does not fit length %d", len(ids), c.T)
	}
	row := r * c.T
	copy(out.IDs[row:], ids)
	for t := range ids {
		out.Mask[row+t] = 1
	}
	return nil
}

// SFT pads phase-1 examples on the right. Labels equal IDs at real tokens
// (with ResponseOnly: from PromptLen on, or inside Spans when the example
// has them) and IgnoreIndex elsewhere.
func (c Collator) SFT(exs []Example) (Batch, error) {
	out, err := c.alloc(len(exs), true)
	if err != nil {
		return Batch{}, err
	}
	for r, ex := range exs {
		if err := c.putRight(&out, r, ex.IDs); err != nil {
			return Batch{}, err
		}
		if c.ResponseOnly && ex.Spans != nil {
			for k := 0; k+1 < len(ex.Spans); k += 2 {
				s, e := min(int(ex.Spans[k]), len(ex.IDs)), min(int(ex.Spans[k+1]), len(ex.IDs))
				copy(out.Labels[r*c.T+s:r*c.T+max(s, e)], ex.IDs[s:max(s, e)])
			}
			continue
		}
		from := 0
		if c.ResponseOnly {
			from = min(ex.PromptLen, len(ex.IDs))
		}
		copy(out.Labels[r*c.T+from:], ex.IDs[from:])
	}
	return out, nil
}

// SFTTargets is the number of positions of ex that carry the phase-1 loss
// in a batch of SFT: the labels after the first token (the model predicts
// token t+1 from tokens up to t), from PromptLen on with ResponseOnly. An
// example whose prompt fills T under ResponseOnly, or of one token, has
// none: it trains nothing. With Spans and ResponseOnly the positions are
// those after the first token inside the spans.
func (c Collator) SFTTargets(ex Example) int {
	if c.ResponseOnly && ex.Spans != nil {
		n := 0
		for k := 0; k+1 < len(ex.Spans); k += 2 {
			s, e := max(int(ex.Spans[k]), 1), min(int(ex.Spans[k+1]), len(ex.IDs), c.T)
			n += max(e-s, 0)
		}
		return n
	}
	from := 1
	if c.ResponseOnly {
		from = max(ex.PromptLen, 1)
	}
	return max(min(len(ex.IDs), c.T)-from, 0)
}

// Pairs pads phase-2 examples on the right into a chosen and a rejected
// batch; row i of each comes from exs[i]. (DeepSpeed-Chat's collator stacks
// them as [chosen; rejected], 2B rows.)
func (c Collator) Pairs(exs []Example) (chosen, rejected Batch, err error) {
	if chosen, err = c.alloc(len(exs), false); err != nil {
		return Batch{}, Batch{}, err
	}
	rejected, _ = c.alloc(len(exs), false)
	for r, ex := range exs {
		if err := c.putRight(&chosen, r, ex.IDs); err != nil {
			return Batch{}, Batch{}, err
		}
		if err := c.putRight(&rejected, r, ex.Rejected); err != nil {
			return Batch{}, Batch{}, err
		}
	}
	return chosen, rejected, nil
}

// Prompts pads phase-3 prompts on the LEFT, so every prompt ends at T-1 and
// generation continues from the same position in every row.
func (c Collator) Prompts(exs []Example) (Batch, error) {
	out, err := c.alloc(len(exs), false)
	if err != nil {
		return Batch{}, err
	}
	for r, ex := range exs {
		if len(ex.IDs) > c.T {
			return Batch{}, fmt.Errorf("data: prompt of %d tokens does not fit length %d", len(ex.IDs), c.T)
		}
		row := r*c.T + c.T - len(ex.IDs)
		copy(out.IDs[row:], ex.IDs)
		for t := range ex.IDs {
			out.Mask[row+t] = 1
		}
	}
	return out, nil
}

// Blocks batches unsupervised blocks: labels equal IDs. A short block (a
// text group smaller than one block) is padded on the right with mask 0 and
// IgnoreIndex labels.
func (c Collator) Blocks(exs []Example) (Batch, error) {
	out, err := c.alloc(len(exs), true)
	if err != nil {
		return Batch{}, err
	}
	for r, ex := range exs {
		if err := c.putRight(&out, r, ex.IDs); err != nil {
			return Batch{}, err
		}
		copy(out.Labels[r*c.T:], ex.IDs)
	}
	return out, nil
}
