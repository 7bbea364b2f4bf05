package kernels_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/kerneltest"
)

// TestRoPEInvFreqGolden compares RoPEInvFreq with PyTorch's
// ROPE_INIT_FUNCTIONS (default, linear, llama3 on real configs; see
// scripts/llama_kernels_golden.py) and RoPECosSin with
// LlamaRotaryEmbedding's tables at positions up to 131071.
func TestRoPEInvFreqGolden(t *testing.T) {
	cfgs, err := kerneltest.RoPEGolden()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) == 0 {
		t.Fatal("the golden file has no rope configurations")
	}
	for _, c := range cfgs {
		t.Run(c.Name, func(t *testing.T) {
			inv, err := kernels.RoPEInvFreq(c.HeadDim, c.Theta, c.RoPEScaling())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv) != len(c.InvFreq) {
				t.Fatalf("%d frequencies, PyTorch has %d", len(inv), len(c.InvFreq))
			}
			// theta^(2j/d) is correctly rounded here; PyTorch's vectorised
			// powf is within an ulp of it (and off by one in one of Qwen3's
			// 64 frequencies), so allow one ulp.
			dInv := make([]float64, len(inv))
			for j, v := range inv {
				d := int64(math.Float32bits(v)) - int64(math.Float32bits(c.InvFreq[j]))
				if d < -1 || d > 1 {
					t.Errorf("inv_freq[%d] = %g (%#08x), PyTorch %g (%#08x)", j, v, math.Float32bits(v), c.InvFreq[j], math.Float32bits(c.InvFreq[j]))
				}
				if d != 0 {
					t.Logf("inv_freq[%d] = %g (%#08x), PyTorch %g (%#08x): one ulp apart", j, v, math.Float32bits(v), c.InvFreq[j], math.Float32bits(c.InvFreq[j]))
				}
				dInv[j] = math.Abs(float64(v) - float64(c.InvFreq[j]))
			}
			// PyTorch's float32 cos and sin are within an ulp or so of the
			// correctly rounded ones: compare at 1e-6 of 1 (the values'
			// scale) plus what a frequency an ulp apart moves the angle, at
			// every position, the largest included.
			h := c.HeadDim / 2
			cos, sin := make([]float32, h), make([]float32, h)
			for i, p := range c.Positions {
				kernels.RoPECosSin(cos, sin, inv, p)
				for j := range h {
					tol := 1e-6 + 1.01*float64(p)*dInv[j]
					wc, ws := c.Cos[i*h+j], c.Sin[i*h+j]
					if math.Abs(float64(cos[j]-wc)) > tol || math.Abs(float64(sin[j]-ws)) > tol {
						t.Fatalf("position %d pair %d: cos, sin = %g, %g; PyTorch %g, %g", p, j, cos[j], sin[j], wc, ws)
					}
				}
			}
		})
	}
}

// TestRoPETableRows checks that RoPETable's rows are RoPECosSin's.
func TestRoPETableRows(t *testing.T) {
	inv, err := kernels.RoPEInvFreq(8, 10000, kernels.RoPEScaling{})
	if err != nil {
		t.Fatal(err)
	}
	cos, sin := kernels.RoPETable(inv, 50)
	if len(cos) != 50*4 || len(sin) != 50*4 {
		t.Fatalf("tables of %d and %d, want %d", len(cos), len(sin), 50*4)
	}
	c, s := make([]float32, 4), make([]float32, 4)
	for p := range 50 {
		kernels.RoPECosSin(c, s, inv, p)
		for j := range 4 {
			if cos[p*4+j] != c[j] || sin[p*4+j] != s[j] {
				t.Fatalf("row %d differs from RoPECosSin", p)
			}
		}
	}
	if cos[0] != 1 || sin[0] != 0 || inv[0] != 1 {
		t.Fatalf("position 0: cos %g sin %g, inv_freq[0] %g; want 1, 0, 1", cos[0], sin[0], inv[0])
	}
}

func TestRoPEInvFreqErrors(t *testing.T) {
	l3 := kernels.RoPEScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}
	for _, c := range []struct {
		name    string
		hd      int
		theta   float64
		s       kernels.RoPEScaling
		wantErr string
	}{
		{"odd head_dim", 63, 1e4, kernels.RoPEScaling{}, "head_dim 63"},
		{"zero head_dim", 0, 1e4, kernels.RoPEScaling{}, "head_dim 0"},
		{"zero theta", 64, 0, kernels.RoPEScaling{}, "rope_theta"},
		{"NaN theta", 64, math.NaN(), kernels.RoPEScaling{}, "rope_theta"},
		{"yarn", 64, 1e4, kernels.RoPEScaling{Type: "yarn", Factor: 4}, `"yarn" is not supported`},
		{"dynamic", 64, 1e4, kernels.RoPEScaling{Type: "dynamic", Factor: 2}, `"dynamic" is not supported`},
		{"linear without factor", 64, 1e4, kernels.RoPEScaling{Type: "linear"}, "positive factor"},
		{"llama3 without factor", 64, 1e4, func() kernels.RoPEScaling { s := l3; s.Factor = 0; return s }(), "positive factor"},
		{"llama3 high <= low", 64, 1e4, func() kernels.RoPEScaling { s := l3; s.HighFreqFactor = 1; return s }(), "low_freq_factor < high_freq_factor"},
		{"llama3 without omax", 64, 1e4, func() kernels.RoPEScaling { s := l3; s.OriginalMaxPositions = 0; return s }(), "original_max_position_embeddings"},
		{"default", 64, 1e4, kernels.RoPEScaling{Type: "default"}, ""},
		{"llama3", 64, 5e5, l3, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			inv, err := kernels.RoPEInvFreq(c.hd, c.theta, c.s)
			if c.wantErr == "" {
				if err != nil || len(inv) != c.hd/2 {
					t.Fatalf("got %d frequencies, %v", len(inv), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}
