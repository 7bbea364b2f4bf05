package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// SampleOptions choose how the next token is picked from the logits.
type SampleOptions struct {
	// Greedy picks the most likely token; the other fields are ignored.
	Greedy bool
	// Temperature divides the logits (1 = unchanged; must be > 0).
	Temperature float64
	// TopK keeps the K most likely tokens (0 = all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP (1 = all).
	TopP float64
	// Seed makes sampling reproducible.
	Seed uint64
}

// Validate checks the sampling options.
func (o SampleOptions) Validate() error {
	if o.Greedy {
		return nil
	}
	if !(o.Temperature > 0) {
		return fmt.Errorf("temperature must be > 0, got %v", o.Temperature)
	}
	if o.TopK < 0 {
		return fmt.Errorf("top-k must be >= 0, got %d", o.TopK)
	}
	if !(o.TopP > 0 && o.TopP <= 1) {
		return fmt.Errorf("top-p must be in (0, 1], got %v", o.TopP)
	}
	return nil
}

// Sampler picks tokens from logits, processing them as Hugging Face's
// generate does: temperature, then top-k, then top-p.
type Sampler struct {
	opts SampleOptions
	rng  *rand.Rand
	idx  []int
	p    []float64
}

// NewSampler returns a sampler; its random stream depends only on the seed.
func NewSampler(opts SampleOptions) (*Sampler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x5DEECE66D))}, nil
}

// LogSoftmaxAt is log softmax(logits)[i], computed in float64.
func LogSoftmaxAt(logits []float32, i int) float32 {
	mx := math.Inf(-1)
	for _, x := range logits {
		mx = math.Max(mx, float64(x))
	}
	var s float64
	for _, x := range logits {
		s += math.Exp(float64(x) - mx)
	}
	return float32(float64(logits[i]) - mx - math.Log(s))
}

// Sample picks a token from one row of logits [V]. It returns the token and
// its log-probability under the unmodified softmax (temperature 1, no
// filtering).
func (s *Sampler) Sample(logits []float32) (int32, float32) {
	var tok int
	if s.opts.Greedy {
		tok = argmax(logits)
	} else {
		tok = s.sample(logits)
	}
	return int32(tok), LogSoftmaxAt(logits, tok)
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func (s *Sampler) sample(logits []float32) int {
	V := len(logits)
	s.idx = s.idx[:0]
	for i := range V {
		s.idx = append(s.idx, i)
	}
	// Sort by logit, descending; ties by index so the order is deterministic.
	slices.SortFunc(s.idx, func(a, b int) int {
		if logits[a] != logits[b] {
			if logits[a] > logits[b] {
				return -1
			}
			return 1
		}
		return a - b
	})
	keep := V
	if k := s.opts.TopK; k > 0 && k < keep {
		keep = k
	}
	t := s.opts.Temperature
	mx := float64(logits[s.idx[0]]) / t
	s.p = s.p[:0]
	var sum float64
	for _, i := range s.idx[:keep] {
		e := math.Exp(float64(logits[i])/t - mx)
		s.p = append(s.p, e)
		sum += e
	}
	if s.opts.TopP < 1 {
		var c float64
		for j, e := range s.p {
			c += e / sum
			if c >= s.opts.TopP {
				keep = j + 1
				break
			}
		}
		sum = 0
		for _, e := range s.p[:keep] {
			sum += e
		}
	}
	r := s.rng.Float64() * sum
	for j, e := range s.p[:keep] {
		r -= e
		if r < 0 {
			return s.idx[j]
		}
	}
	return s.idx[keep-1]
}

// Generation is the output of Generate for one prompt.
type Generation struct {
	Tokens   []int32   // generated tokens (ending with EOS if it was produced)
	LogProbs []float32 // log p(token) under the full softmax at temperature 1
}

// Generate continues each prompt by up to maxNew tokens with the KV cache.
// Prompts are left-padded to a common length; a row stops at EOS (any of
// Config.EOSTokenIDs).
func (m *Model) Generate(prompts [][]int32, maxNew int, s *Sampler) ([]Generation, error) {
	return m.GenerateStream(prompts, maxNew, s, nil)
}

// GenerateStream is Generate calling onToken for every token as it is
// picked (row is the prompt's index). onToken returning false stops that
// row, as EOS does.
func (m *Model) GenerateStream(prompts [][]int32, maxNew int, s *Sampler, onToken func(row int, tok int32) bool) ([]Generation, error) {
	B := len(prompts)
	if B == 0 {
		return nil, nil
	}
	T0 := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("model: prompt %d is empty", i)
		}
		T0 = max(T0, len(p))
	}
	if maxNew < 1 {
		return nil, fmt.Errorf("model: max new tokens must be >= 1, got %d", maxNew)
	}
	if T0+maxNew > m.Config.MaxPositions {
		return nil, fmt.Errorf("model: prompt (%d) + new tokens (%d) exceed max_position_embeddings %d", T0, maxNew, m.Config.MaxPositions)
	}
	kc, err := m.NewCache(B, T0+maxNew, T0)
	if err != nil {
		return nil, err
	}
	defer kc.Free()
	ids, mask := make([]int32, B*T0), make([]int32, B*T0)
	for b, p := range prompts {
		pad := T0 - len(p)
		for j := range T0 {
			if j < pad {
				ids[b*T0+j] = int32(m.Config.PadTokenID)
			} else {
				ids[b*T0+j], mask[b*T0+j] = p[j-pad], 1
			}
		}
	}
	out := make([]Generation, B)
	done := make([]bool, B)
	V := m.Config.VocabSize
	logits, err := m.Decode(kc, ids, mask, T0, LastLogits)
	if err != nil {
		return nil, err
	}
	next := make([]int32, B)
	for step := 0; ; step++ {
		live := false
		for b := range B {
			if done[b] {
				next[b] = int32(m.Config.PadTokenID)
				continue
			}
			tok, lp := s.Sample(logits[b*V : (b+1)*V])
			next[b] = tok
			out[b].Tokens = append(out[b].Tokens, tok)
			out[b].LogProbs = append(out[b].LogProbs, lp)
			stop := onToken != nil && !onToken(b, tok)
			if m.Config.IsEOS(tok) || stop {
				done[b] = true
			} else {
				live = true
			}
		}
		if !live || step+1 == maxNew {
			return out, nil
		}
		if logits, err = m.Decode(kc, next, nil, 1, LastLogits); err != nil {
			return nil, err
		}
	}
}
