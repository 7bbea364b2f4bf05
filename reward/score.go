package reward

import (
	"fmt"
	"slices"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/model"
)

// Tokenizer is what scoring needs of a tokenizer (*tokenizer.Tokenizer
// satisfies it).
type Tokenizer interface {
	// Encode returns the ids of text; with addSpecial, inside the
	// tokenizer's template (OPT: BOS in front).
	Encode(text string, addSpecial bool) []int32
	// Decode returns the text of ids, ill-formed UTF-8 replaced by U+FFFD,
	// special tokens dropped with skipSpecial; an id outside the vocabulary
	// is an error.
	Decode(ids []int32, skipSpecial bool) (string, error)
}

// Sequence is the token sequence the reward model scores for answer to
// prompt: data.RewardText(prompt, answer, endText) tokenized as one text,
// with BOS as step 2 adds it. `gochat score`, the demo's evaluation and
// step 3 all score this, so a reward model is asked about the sequences it
// was trained on.
func Sequence(tok Tokenizer, prompt, answer, endText string) []int32 {
	return tok.Encode(data.RewardText(prompt, answer, endText), true)
}

// SequenceFromIDs is Sequence for token ids, as step 3 has them. The
// prompt's ids (padding already removed) lose the ids the tokenizer puts
// before every text (Encode("", true): OPT's BOS) when they start with
// them; the generated answer's ids are cut at the first eos (eos and all
// after it dropped; eos < 0 cuts nothing). Both are decoded to text and
// the texts go to Sequence: re-tokenizing gives the ids step 2 makes of the
// same text, which joining ids (answer ids + tokenized endText) does not,
// because byte-level BPE merges across the seams (" Paris." + "<|endoftext|>"
// tokenizes to ... "ĠParis" ".<" "|" ..., not "." "<").
//
// Decoding keeps special tokens as their text ("</s>", "<pad>"), which
// encodes back to their ids, so for valid UTF-8 texts p and a (a free of
// the EOS token, which would end it)
// SequenceFromIDs(Encode(p, true), Encode(a, false), eos, e) equals
// Sequence(p, a, e). An answer whose bytes are not valid UTF-8 (generation
// stopped inside a multi-byte character, or bytes in a bad order) is scored
// as the text Decode shows: each ill-formed part replaced by U+FFFD, as
// Hugging Face's decoder does; no text is dropped. An id outside the
// tokenizer's vocabulary (a model vocabulary padded past the tokenizer's,
// OPT's 50272 against 50265) has no text and is an error.
func SequenceFromIDs(tok Tokenizer, promptIDs, answerIDs []int32, eos int32, endText string) ([]int32, error) {
	prompt, answer, err := Texts(tok, promptIDs, answerIDs, eos)
	if err != nil {
		return nil, err
	}
	return Sequence(tok, prompt, answer, endText), nil
}

// Texts are the prompt and answer texts SequenceFromIDs scores for token
// ids (what `gochat ppo --print-answers` shows, so that `gochat score` on
// them gives the same score).
func Texts(tok Tokenizer, promptIDs, answerIDs []int32, eos int32) (prompt, answer string, err error) {
	if prefix := tok.Encode("", true); len(prefix) > 0 && len(promptIDs) >= len(prefix) && slices.Equal(promptIDs[:len(prefix)], prefix) {
		promptIDs = promptIDs[len(prefix):]
	}
	if i := slices.Index(answerIDs, eos); i >= 0 {
		answerIDs = answerIDs[:i]
	}
	if prompt, err = tok.Decode(promptIDs, false); err != nil {
		return "", "", fmt.Errorf("reward: prompt: %w", err)
	}
	if answer, err = tok.Decode(answerIDs, false); err != nil {
		return "", "", fmt.Errorf("reward: answer: %w", err)
	}
	return prompt, answer, nil
}

// ScoreActs are the activation buffers Score holds while it scores a batch
// of b sequences of up to t tokens (freed before it returns): no logits,
// and one layer's buffers for every layer (Checkpoint: there is no
// backward pass).
func ScoreActs(b, t int) model.ActsShape {
	return model.ActsShape{B: b, T: t, Opts: model.ActsOptions{Checkpoint: true, NoLogits: true}}
}

// Scorer is what Score uses of a reward model: evaluation forwards of its
// value head. *model.Model implements it.
type Scorer interface {
	ModelConfig() *model.Config
	HasValueHead() bool
	NewActs(b, t int, opts model.ActsOptions) (*model.Acts, error)
	Forward(a *model.Acts, in model.Batch) error
	Values(a *model.Acts) ([]float32, error)
}

var _ Scorer = (*model.Model)(nil)

// Score returns the reward model's score of each token sequence: the value
// head's output at the sequence's last token, as the pairwise loss scores
// pairs (REFERENCE.md §4). Sequences are scored in batches of at most
// batch rows (0 = all at once), right-padded to the longest in the batch.
// A sequence must be non-empty and no longer than max_position_embeddings.
func Score(m Scorer, seqs [][]int32, batch int) ([]float32, error) {
	if !m.HasValueHead() {
		return nil, fmt.Errorf("reward: the model has no value head")
	}
	c := m.ModelConfig()
	for i, s := range seqs {
		if len(s) == 0 {
			return nil, fmt.Errorf("reward: sequence %d is empty", i)
		}
		if len(s) > c.MaxPositions {
			return nil, fmt.Errorf("reward: sequence %d has %d tokens, more than max_position_embeddings %d", i, len(s), c.MaxPositions)
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
					ids[b*T+t] = int32(c.PadTokenID)
				}
			}
		}
		sh := ScoreActs(B, T)
		a, err := m.NewActs(sh.B, sh.T, sh.Opts)
		if err != nil {
			return nil, err
		}
		defer a.Free()
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
