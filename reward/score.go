package reward

import (
	"fmt"

	"github.com/gochat-ai/gochat/model"
)

// Score returns the reward model's score of each token sequence: the value
// head's output at the sequence's last token, as the pairwise loss scores
// pairs (REFERENCE.md §4). Sequences are scored in batches of at most
// batch rows (0 = all at once), right-padded to the longest in the batch.
// A sequence must be non-empty and no longer than max_position_embeddings.
func Score(m *model.Model, seqs [][]int32, batch int) ([]float32, error) {
	if !m.HasValueHead() {
		return nil, fmt.Errorf("reward: the model has no value head")
	}
	for i, s := range seqs {
		if len(s) == 0 {
			return nil, fmt.Errorf("reward: sequence %d is empty", i)
		}
		if len(s) > m.Config.MaxPositions {
			return nil, fmt.Errorf("reward: sequence %d has %d tokens, more than max_position_embeddings %d", i, len(s), m.Config.MaxPositions)
		}
	}
	if batch <= 0 {
		batch = len(seqs)
	}
	scores := make([]float32, 0, len(seqs))
	for lo := 0; lo < len(seqs); lo += batch {
		chunk := seqs[lo:min(lo+batch, len(seqs))]
		B, T := len(chunk), 0
		for _, s := range chunk {
			T = max(T, len(s))
		}
		ids, mask := make([]int32, B*T), make([]int32, B*T)
		for b, s := range chunk {
			for t := range T {
				if t < len(s) {
					ids[b*T+t], mask[b*T+t] = s[t], 1
				} else {
					ids[b*T+t] = int32(m.Config.PadTokenID)
				}
			}
		}
		a := m.NewActs(B, T, model.ActsOptions{NoLogits: true})
		if err := m.Forward(a, model.Batch{IDs: ids, Mask: mask}); err != nil {
			return nil, err
		}
		v, err := m.Values(a)
		if err != nil {
			return nil, err
		}
		for b, s := range chunk {
			scores = append(scores, v[b*T+len(s)-1])
		}
	}
	return scores, nil
}
