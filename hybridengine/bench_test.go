package hybridengine

import (
	"fmt"
	"testing"

	"github.com/gochat-ai/gochat/kernels/cpu"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
)

// opt125m returns an opt-125m-shaped model with random weights.
func opt125m(b *testing.B) *model.Model {
	b.Helper()
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := model.PresetConfig("opt-125m")
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.New(dev, cfg, model.Options{})
	if err != nil {
		b.Fatal(err)
	}
	m.InitRandom(1, 0.02)
	return m
}

// BenchmarkGenerateOPT125m measures greedy generation of 64 tokens after
// prompts of 128 tokens (no early EOS) with an opt-125m-shaped model. tok/s
// counts generated tokens over the whole decoding, prefill included.
func BenchmarkGenerateOPT125m(b *testing.B) {
	const promptLen, answerLen = 128, 64
	m := opt125m(b)
	for _, batch := range []int{1, 4} {
		b.Run(fmt.Sprintf("B=%d", batch), func(b *testing.B) {
			lens := make([]int, batch)
			for i := range lens {
				lens[i] = promptLen
			}
			p := leftPad(m, randomPrompts(m, 1, lens...), promptLen)
			e, err := New(m, nil, Options{MaxAnswerLen: answerLen, Sample: model.SampleOptions{Greedy: true}, IgnoreEOS: true, KeepInferenceCache: true})
			if err != nil {
				b.Fatal(err)
			}
			var tokens int
			var secs float64
			for b.Loop() {
				r, err := e.Generate(p)
				if err != nil {
					b.Fatal(err)
				}
				tokens += r.Stats.Tokens
				secs += r.Stats.Seconds
			}
			b.ReportMetric(float64(tokens)/secs, "tok/s")
		})
	}
}

// BenchmarkEnterGenerateOPT125m measures a Train → Generate → Train round
// trip with LoRA (dim 128 on every decoder linear layer): copying the
// parameters into the workspace and fusing the adapters, and allocating the
// workspace unless it is kept (--keep-inference-cache).
func BenchmarkEnterGenerateOPT125m(b *testing.B) {
	m := opt125m(b)
	lo, err := lora.New(m, lora.Config{Dim: 128}, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, keep := range []bool{false, true} {
		b.Run(fmt.Sprintf("keep=%v", keep), func(b *testing.B) {
			e, err := New(m, lo, Options{MaxAnswerLen: 64, Sample: model.SampleOptions{Greedy: true}, KeepInferenceCache: keep})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := e.EnterGenerate(); err != nil {
					b.Fatal(err)
				}
				e.Train()
			}
		})
	}
}
