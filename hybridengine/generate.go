package hybridengine

import (
	"fmt"
	"slices"
	"time"

	"github.com/gochat-ai/gochat/model"
)

// Prompts is a batch of left-padded prompts, as data.Collator.Prompts makes
// them: row b is PAD…PAD followed by its real tokens, with mask 0…0 1…1.
type Prompts struct {
	B, T int
	IDs  []int32 // [B,T]
	Mask []int32 // [B,T]
	// Rows are the rows' global indices (for example the prompts' positions
	// in the epoch's sample order). A row's random stream is derived from
	// (Sample.Seed, its index), so its continuation does not depend on the
	// rest of the batch. nil means 0, 1, …, B-1.
	Rows []uint64
}

func (p Prompts) validate() error {
	if p.B < 1 || p.T < 1 {
		return fmt.Errorf("hybridengine: empty prompt batch [%d,%d]", p.B, p.T)
	}
	if len(p.IDs) != p.B*p.T || len(p.Mask) != p.B*p.T {
		return fmt.Errorf("hybridengine: prompts have %d ids and %d mask entries, want [%d,%d]", len(p.IDs), len(p.Mask), p.B, p.T)
	}
	if p.Rows != nil && len(p.Rows) != p.B {
		return fmt.Errorf("hybridengine: %d row indices for %d prompts", len(p.Rows), p.B)
	}
	for b := range p.B {
		row := p.Mask[b*p.T : (b+1)*p.T]
		if row[p.T-1] != 1 {
			return fmt.Errorf("hybridengine: prompt %d does not end with a real token (prompts must be left-padded and non-empty)", b)
		}
		for j, m := range row {
			if m != 0 && m != 1 || j > 0 && m < row[j-1] {
				return fmt.Errorf("hybridengine: prompt %d: the mask must be 0…0 1…1 (left padding), got %v", b, row)
			}
		}
	}
	return nil
}

// Rollout is the output of Generate: prompts followed by their answers.
type Rollout struct {
	// B rows of T = PromptLen + AnswerLen positions. AnswerLen is the
	// longest answer of the batch (at most Options.MaxAnswerLen).
	B, T, PromptLen, AnswerLen int
	// Seq is [B,T]: the left-padded prompt, then the answer, right-padded
	// with PAD after it ends.
	Seq []int32
	// Mask is [B,T]: the prompt's mask, then 1 for every generated token
	// (EOS included) and 0 after the row's end.
	Mask []int32
	// AnswerLens[b] is the number of tokens generated for row b (EOS
	// included).
	AnswerLens []int
	// LogProbs is [B,AnswerLen]: log p(token) of each generated token under
	// the Generate-mode model's full softmax at temperature 1; 0 after the
	// row's end.
	LogProbs []float32
	Stats    Stats
}

// Answer returns row b's generated tokens (a view into Seq).
func (r *Rollout) Answer(b int) []int32 {
	off := b*r.T + r.PromptLen
	return r.Seq[off : off+r.AnswerLens[b]]
}

// Stats measure one Generate call.
type Stats struct {
	// Tokens is the number of tokens generated (the sum of AnswerLens).
	Tokens int
	// Steps is the number of decoding steps (AnswerLen).
	Steps int
	// Seconds is the wall time of decoding, prefill included.
	Seconds float64
	// SwitchSeconds is the time this call spent entering Generate mode
	// (copying the parameters and fusing LoRA); 0 when it was already in
	// Generate mode.
	SwitchSeconds float64
}

// TokensPerSecond is Tokens / Seconds.
func (s Stats) TokensPerSecond() float64 {
	if s.Seconds <= 0 {
		return 0
	}
	return float64(s.Tokens) / s.Seconds
}

// Generate continues a batch of left-padded prompts by up to
// Options.MaxAnswerLen tokens, entering Generate mode first if the engine
// is in Train mode (it stays in Generate mode; call Train to leave). The
// prompt is prefilled into a KV cache in one chunk, then every step decodes
// one token per row. A row stops after EOS or one of Options.StopIDs
// (unless Options.IgnoreEOS) and
// then feeds PAD with mask 0; decoding ends when every row has stopped or
// MaxAnswerLen tokens were generated.
func (e *Engine[M]) Generate(p Prompts) (*Rollout, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	c := e.m.ModelConfig()
	B, Tp, Ta := p.B, p.T, e.opts.MaxAnswerLen
	if Tp+Ta > c.MaxPositions {
		return nil, fmt.Errorf("hybridengine: prompt length %d + max answer length %d exceed max_position_embeddings %d (lower --max-prompt-seq-len or --max-answer-seq-len)", Tp, Ta, c.MaxPositions)
	}
	var st Stats
	if e.mode != GenerateMode {
		t0 := time.Now()
		if err := e.EnterGenerate(); err != nil {
			return nil, err
		}
		st.SwitchSeconds = time.Since(t0).Seconds()
	}
	kc, err := e.cache(B, Tp+Ta, Tp)
	if err != nil {
		return nil, err
	}
	samplers := make([]*model.Sampler, B)
	for b := range B {
		row := uint64(b)
		if p.Rows != nil {
			row = p.Rows[b]
		}
		o := e.opts.Sample
		o.Seed = rowSeed(o.Seed, row)
		if samplers[b], err = model.NewSampler(o); err != nil {
			return nil, fmt.Errorf("hybridengine: %w", err)
		}
	}

	pad, V := int32(c.PadTokenID), c.VocabSize
	answers, lps := make([]int32, B*Ta), make([]float32, B*Ta)
	lens, done := make([]int, B), make([]bool, B)
	next, nextMask := make([]int32, B), make([]int32, B)
	start := time.Now()
	logits, err := e.inf.Decode(kc, p.IDs, p.Mask, Tp, model.LastLogits)
	if err != nil {
		return nil, fmt.Errorf("hybridengine: prefill: %w", err)
	}
	steps := 0
	for {
		live := false
		for b := range B {
			if done[b] {
				next[b], nextMask[b] = pad, 0
				continue
			}
			tok, lp := samplers[b].Sample(logits[b*V : (b+1)*V])
			answers[b*Ta+steps], lps[b*Ta+steps] = tok, lp
			lens[b]++
			next[b], nextMask[b] = tok, 1
			if e.Stops(tok) && !e.opts.IgnoreEOS {
				done[b] = true
			} else {
				live = true
			}
		}
		steps++
		if !live || steps == Ta {
			break
		}
		if logits, err = e.inf.Decode(kc, next, nextMask, 1, model.LastLogits); err != nil {
			return nil, fmt.Errorf("hybridengine: decode step %d: %w", steps, err)
		}
	}
	st.Seconds = time.Since(start).Seconds()
	st.Steps = steps

	T := Tp + steps
	r := &Rollout{
		B: B, T: T, PromptLen: Tp, AnswerLen: steps,
		Seq: make([]int32, B*T), Mask: make([]int32, B*T),
		AnswerLens: lens, LogProbs: make([]float32, B*steps),
	}
	for b := range B {
		seq, mask := r.Seq[b*T:(b+1)*T], r.Mask[b*T:(b+1)*T]
		copy(seq, p.IDs[b*Tp:(b+1)*Tp])
		copy(mask, p.Mask[b*Tp:(b+1)*Tp])
		for j := range steps {
			if j < lens[b] {
				seq[Tp+j], mask[Tp+j] = answers[b*Ta+j], 1
			} else {
				seq[Tp+j] = pad
			}
		}
		copy(r.LogProbs[b*steps:(b+1)*steps], lps[b*Ta:b*Ta+steps])
		st.Tokens += lens[b]
	}
	r.Stats = st
	return r, nil
}

// Stops reports whether tok ends an answer: one of the model's EOS ids
// (eos_token_id may list several, as Llama-3's does) or of
// Options.StopIDs.
func (e *Engine[M]) Stops(tok int32) bool {
	return e.m.ModelConfig().IsEOS(tok) || slices.Contains(e.opts.StopIDs, tok)
}

// rowSeed derives a row's sampling seed from the run's seed and the row's
// global index (SplitMix64 finalizer).
func rowSeed(seed, row uint64) uint64 {
	z := seed + (row+1)*0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}
