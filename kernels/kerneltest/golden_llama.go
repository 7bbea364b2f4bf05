package kerneltest

import (
	"embed"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gochat-ai/gochat/kernels"
)

// The LLaMA-family ops against PyTorch: testdata/llama_kernels_golden.json,
// written by scripts/llama_kernels_golden.py from an independent
// implementation of transformers' LlamaRMSNorm, Qwen3's q/k norm, the rope
// initialisers, apply_rotary_pos_emb, LlamaMLP's SwiGLU and the eager
// grouped-query attention, with autograd's gradients of Σ out·dout. Each
// op's forward and backward must agree to RTol (1e-5 relative; see Close).

//go:embed testdata/llama_kernels_golden.json
var llamaGoldenFS embed.FS

// f32s reads a JSON array of numbers as float32, each parsed straight to
// the nearest float32 (the file holds each value's shortest float32
// decimal, so this is exact).
type f32s []float32

func (v *f32s) UnmarshalJSON(b []byte) error {
	var nums []json.Number
	if err := json.Unmarshal(b, &nums); err != nil {
		return err
	}
	out := make([]float32, len(nums))
	for i, n := range nums {
		f, err := strconv.ParseFloat(string(n), 32)
		if err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = float32(f)
	}
	*v = out
	return nil
}

// RoPEGoldenConfig is one rope configuration of the golden file: its
// inverse frequencies and table rows at some positions, per PyTorch.
type RoPEGoldenConfig struct {
	Name    string  `json:"name"`
	HeadDim int     `json:"head_dim"`
	Theta   float64 `json:"rope_theta"`
	Scaling struct {
		Type   string  `json:"rope_type"`
		Factor float64 `json:"factor"`
		Low    float64 `json:"low_freq_factor"`
		High   float64 `json:"high_freq_factor"`
		OMax   int     `json:"original_max_position_embeddings"`
	} `json:"rope_scaling"`
	InvFreq   f32s  `json:"inv_freq"`
	Positions []int `json:"positions"`
	Cos       f32s  `json:"cos"` // [len(Positions), HeadDim/2]
	Sin       f32s  `json:"sin"`
}

// RoPEScaling returns the config's scaling as kernels takes it.
func (c *RoPEGoldenConfig) RoPEScaling() kernels.RoPEScaling {
	s := c.Scaling
	return kernels.RoPEScaling{Type: s.Type, Factor: s.Factor, LowFreqFactor: s.Low, HighFreqFactor: s.High, OriginalMaxPositions: s.OMax}
}

type llamaGolden struct {
	RMSNorm []struct {
		N, C                              int
		Eps                               float64
		X, Weight, Out, Dout, DX, DWeight f32s
	} `json:"rmsnorm"`
	HeadRMSNorm []struct {
		B, T, NH, NKV, HS int
		Eps               float64
		QKV               f32s
		QWeight           f32s `json:"q_weight"`
		KWeight           f32s `json:"k_weight"`
		Out, Dout, DQKV   f32s
		DQWeight          f32s `json:"dq_weight"`
		DKWeight          f32s `json:"dk_weight"`
	} `json:"head_rmsnorm"`
	RoPETables []RoPEGoldenConfig `json:"rope_tables"`
	RoPE       []struct {
		B, T, NH, NKV, HS    int
		Config               string
		Pos                  []int32
		QKV, Out, Dout, DQKV f32s
	} `json:"rope"`
	SwiGLU []struct {
		N, F                 int
		Inp, Out, Dout, DInp f32s
	} `json:"swiglu"`
	Attention []struct {
		B, T, NH, NKV, HS         int
		Mask                      []int32
		QKV, Out, Att, Dout, DQKV f32s
	} `json:"attention"`
}

// loadLlamaGolden parses the embedded golden file.
func loadLlamaGolden() (*llamaGolden, error) {
	var g llamaGolden
	b, err := llamaGoldenFS.ReadFile("testdata/llama_kernels_golden.json")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("testdata/llama_kernels_golden.json: %w", err)
	}
	return &g, nil
}

// RoPEGolden returns the rope configurations of the golden file (for
// kernels' own test of RoPEInvFreq and RoPECosSin).
func RoPEGolden() ([]RoPEGoldenConfig, error) {
	g, err := loadLlamaGolden()
	if err != nil {
		return nil, err
	}
	return g.RoPETables, nil
}

// goldenLlama checks every LLaMA-family op of the device against PyTorch.
func goldenLlama(e *Env) {
	g, err := loadLlamaGolden()
	if err != nil {
		e.T.Fatal(err)
	}
	for i, c := range g.RMSNorm {
		n, cc := c.N, c.C
		name := fmt.Sprintf("rmsnorm[%d] n=%d c=%d", i, n, cc)
		out, rstd := e.NaNs(n*cc), e.NaNs(n)
		xb, wb := e.F32(c.X), e.F32(c.Weight)
		e.Dev.RMSNormForward(out, rstd, xb, wb, n, cc, float32(c.Eps))
		e.Close(name+" out", e.Read(out), F64(c.Out), RTol)
		dx, dw := e.F32(make([]float32, n*cc)), e.F32(make([]float32, cc))
		e.Dev.RMSNormBackward(dx, dw, e.F32(c.Dout), xb, wb, rstd, n, cc)
		e.Close(name+" dinp", e.Read(dx), F64(c.DX), RTol)
		e.Close(name+" dweight", e.Read(dw), F64(c.DWeight), RTol)
	}

	for i, c := range g.HeadRMSNorm {
		// Qwen3's q_norm and k_norm on a packed qkv row, as a model runs
		// them: copy the row (v passes through), normalise q and k.
		n, w := c.B*c.T, (c.NH+2*c.NKV)*c.HS
		ko := c.NH * c.HS
		name := fmt.Sprintf("head_rmsnorm[%d] b=%d t=%d nh=%d nkv=%d hs=%d", i, c.B, c.T, c.NH, c.NKV, c.HS)
		xb, out := e.F32(c.QKV), e.NaNs(n*w)
		e.Dev.Copy(out, xb)
		qr, kr := e.NaNs(n*c.NH), e.NaNs(n*c.NKV)
		qw, kw := e.F32(c.QWeight), e.F32(c.KWeight)
		e.Dev.HeadRMSNormForward(out, qr, xb, qw, n, c.NH, c.HS, w, float32(c.Eps))
		e.Dev.HeadRMSNormForward(withOffset(out, ko), kr, withOffset(xb, ko), kw, n, c.NKV, c.HS, w, float32(c.Eps))
		e.Close(name+" out", e.Read(out), F64(c.Out), RTol)
		d := e.F32(c.Dout)
		dqw, dkw := e.F32(make([]float32, c.HS)), e.F32(make([]float32, c.HS))
		e.Dev.HeadRMSNormBackward(d, dqw, d, xb, qw, qr, n, c.NH, c.HS, w)
		e.Dev.HeadRMSNormBackward(withOffset(d, ko), dkw, withOffset(d, ko), withOffset(xb, ko), kw, kr, n, c.NKV, c.HS, w)
		e.Close(name+" dqkv", e.Read(d), F64(c.DQKV), RTol)
		e.Close(name+" dq_weight", e.Read(dqw), F64(c.DQWeight), RTol)
		e.Close(name+" dk_weight", e.Read(dkw), F64(c.DKWeight), RTol)
	}

	for i, c := range g.RoPE {
		var cfg *RoPEGoldenConfig
		for k := range g.RoPETables {
			if g.RoPETables[k].Name == c.Config {
				cfg = &g.RoPETables[k]
			}
		}
		if cfg == nil {
			e.T.Fatalf("rope[%d]: no rope config %q", i, c.Config)
		}
		inv, err := kernels.RoPEInvFreq(c.HS, cfg.Theta, cfg.RoPEScaling())
		if err != nil {
			e.T.Fatal(err)
		}
		maxPos := 0
		for _, p := range c.Pos {
			maxPos = max(maxPos, int(p)+1)
		}
		cos, sin := kernels.RoPETable(inv, maxPos)
		n, w := c.B*c.T, (c.NH+2*c.NKV)*c.HS
		name := fmt.Sprintf("rope[%d] %s b=%d t=%d nh=%d nkv=%d hs=%d", i, c.Config, c.B, c.T, c.NH, c.NKV, c.HS)
		pb, cb, sb := e.I32(c.Pos), e.F32(cos), e.F32(sin)
		x := e.F32(c.QKV)
		e.Dev.RoPEForward(x, pb, cb, sb, n, c.NH+c.NKV, c.HS, w)
		e.Close(name+" out", e.Read(x), F64(c.Out), RTol)
		d := e.F32(c.Dout)
		e.Dev.RoPEBackward(d, pb, cb, sb, n, c.NH+c.NKV, c.HS, w)
		e.Close(name+" dqkv", e.Read(d), F64(c.DQKV), RTol)
	}

	for i, c := range g.SwiGLU {
		name := fmt.Sprintf("swiglu[%d] n=%d f=%d", i, c.N, c.F)
		out, xb := e.NaNs(c.N*c.F), e.F32(c.Inp)
		e.Dev.SwiGLUForward(out, xb, c.N, c.F)
		e.Close(name+" out", e.Read(out), F64(c.Out), RTol)
		dx := e.NaNs(2 * c.N * c.F)
		e.Dev.SwiGLUBackward(dx, e.F32(c.Dout), xb, c.N, c.F)
		e.Close(name+" dinp", e.Read(dx), F64(c.DInp), RTol)
	}

	for i, c := range g.Attention {
		name := fmt.Sprintf("attention[%d] b=%d t=%d nh=%d nkv=%d hs=%d", i, c.B, c.T, c.NH, c.NKV, c.HS)
		out, att := e.NaNs(c.B*c.T*c.NH*c.HS), e.NaNs(c.B*c.NH*c.T*c.T)
		qb, mb := e.F32(c.QKV), e.I32(c.Mask)
		e.Dev.GQAAttentionForward(out, att, qb, mb, c.B, c.T, c.NH, c.NKV, c.HS)
		e.Close(name+" out", e.Read(out), F64(c.Out), RTol)
		e.Close(name+" att", e.Read(att), F64(c.Att), RTol)
		dqkv := e.NaNs(len(c.QKV))
		e.Dev.GQAAttentionBackward(dqkv, e.F32(c.Dout), qb, att, mb, c.B, c.T, c.NH, c.NKV, c.HS)
		e.Close(name+" dqkv", e.Read(dqkv), F64(c.DQKV), RTol)
	}
}
