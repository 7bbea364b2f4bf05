package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/model"
)

// BenchDecodeOptions are the options of `gochat bench decode`.
type BenchDecodeOptions struct {
	g      *Globals
	Model  string
	Batch  int
	Prompt int
	New    int
	Runs   int
	DTypes []string
	JSON   bool
}

// newBenchDecodeCmd is `gochat bench decode`: KV-cache decoding tokens/s
// (what generation in step 3 and chat spend their time on) on random
// weights, for each --dtype in turn in one process.
func newBenchDecodeCmd(g *Globals, runF func(*BenchDecodeOptions) error) *cobra.Command {
	o := &BenchDecodeOptions{g: g}
	cmd := &cobra.Command{
		Use:   "decode --model opt-125m|CONFIG.json --batch B --prompt T0 --new N [--dtype fp32,bf16]",
		Short: "Decoding tokens/s with the KV cache (random weights), per dtype, side by side",
		Long: `Prefill a random prompt of --prompt tokens for --batch rows, then decode --new
tokens one position at a time (each step feeds the argmax back), as generation
does. Reports the decode tokens/s (new tokens × batch / decode time, median of
--runs), the prefill time, the end-to-end tokens/s (new tokens × batch /
(prefill + decode), median of --runs: what a caller of generate sees), and the
weights' and KV cache's bytes, for each --dtype in the order given; with
several, the ratio to the first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsBelow(cmd.Flags(), flagMin{"batch", 1}, flagMin{"prompt", 1}, flagMin{"new", 1}, flagMin{"runs", 1}); err != nil {
				return err
			}
			for _, d := range o.DTypes {
				if err := checkDTypeFlag(d); err != nil {
					return err
				}
			}
			if runF != nil {
				return runF(o)
			}
			return runBenchDecode(o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Model, "model", "opt-125m", "a built-in architecture ("+strings.Join(model.PresetNames(), ", ")+") or a config.json")
	f.IntVar(&o.Batch, "batch", 1, "rows decoded together")
	f.IntVar(&o.Prompt, "prompt", 16, "prompt tokens per row")
	f.IntVar(&o.New, "new", 64, "new tokens per row")
	f.IntVar(&o.Runs, "runs", 5, "timed runs (after one warm-up)")
	f.StringSliceVar(&o.DTypes, "dtype", []string{"auto"}, "precisions to measure, in order (fp32, bf16, auto)")
	f.BoolVar(&o.JSON, "json", false, "print one JSON object per dtype")
	return cmd
}

func runBenchDecode(o *BenchDecodeOptions) error {
	var first float64
	for i, dt := range o.DTypes {
		bo := BenchTrainOptions{g: o.g, Model: o.Model, Batch: o.Batch, Seq: o.Prompt + o.New, Steps: 1, DType: dt}
		m, err := benchModel(&bo)
		if err != nil {
			return err
		}
		B, T0, N, V := o.Batch, o.Prompt, o.New, m.Config.VocabSize
		rng := rand.New(rand.NewPCG(3, 3))
		prompt := make([]int32, B*T0)
		for j := range prompt {
			prompt[j] = int32(3 + rng.IntN(V-3))
		}
		kc, err := m.NewCache(B, T0+N, T0)
		if err != nil {
			return err
		}
		next := make([]int32, B)
		run := func() (prefill, decode float64, err error) {
			kc.Reset()
			t0 := time.Now()
			logits, err := m.Decode(kc, prompt, nil, T0, model.LastLogits)
			if err != nil {
				return 0, 0, err
			}
			t1 := time.Now()
			for range N {
				for b := range B {
					next[b] = argmax(logits[b*V : (b+1)*V])
				}
				if logits, err = m.Decode(kc, next, nil, 1, model.LastLogits); err != nil {
					return 0, 0, err
				}
			}
			return t1.Sub(t0).Seconds(), time.Since(t1).Seconds(), nil
		}
		if _, _, err := run(); err != nil { // warm-up
			return err
		}
		pre, dec, both := make([]float64, o.Runs), make([]float64, o.Runs), make([]float64, o.Runs)
		for r := range o.Runs {
			if pre[r], dec[r], err = run(); err != nil {
				return err
			}
			both[r] = pre[r] + dec[r]
		}
		tps := float64(B*N) / median(dec)
		if i == 0 {
			first = tps
		}
		weights, kvBytes := m.NumParams()*m.DType().Size(), kc.Bytes()
		res := map[string]any{"model": o.Model, "dtype": m.DType().String(), "batch": B, "prompt": T0, "new": N,
			"params": m.NumParams(), "decode_tokens_per_sec": round(tps, 2), "prefill_seconds": round(median(pre), 4),
			"tokens_per_sec": round(float64(B*N)/median(both), 2), "weight_bytes": weights, "kv_cache_bytes": kvBytes,
			"device_peak_bytes": m.Dev.MemStats().Peak, "device": m.Dev.Name(), "vs_first": round(tps/first, 3)}
		kc.Free()
		m.Free()
		if o.JSON {
			if err := json.NewEncoder(o.g.Out).Encode(res); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(o.g.Out, "decode %s %s B=%d prompt=%d new=%d on %s: %.1f tokens/s (median of %d; %.2fx the first), prefill %.3f s, weights %.0f MiB, KV cache %.0f MiB, device peak %.0f MiB\n",
			o.Model, m.DType(), B, T0, N, m.Dev.Name(), tps, o.Runs, tps/first, median(pre), float64(weights)/(1<<20), float64(kvBytes)/(1<<20), float64(res["device_peak_bytes"].(int64))/(1<<20))
	}
	return nil
}

// argmax is the index of the largest value (the first on ties).
func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}
