package kernels

import (
	"fmt"
	"math"
)

// RoPEScaling is a config.json's rope_scaling: the rope type (its
// "rope_type" key, or the legacy "type") and that type's parameters.
type RoPEScaling struct {
	// Type is "" or "default" (no scaling), "linear" or "llama3". Others
	// ("dynamic", "yarn", "longrope", ...) are refused by RoPEInvFreq.
	Type string
	// Factor divides the frequencies (linear) or the low ones (llama3).
	Factor float64
	// LowFreqFactor, HighFreqFactor and OriginalMaxPositions
	// (original_max_position_embeddings) are llama3's.
	LowFreqFactor, HighFreqFactor float64
	OriginalMaxPositions          int
}

// RoPEInvFreq returns the rotary inverse frequencies inv_freq[headDim/2]
// of Hugging Face's ROPE_INIT_FUNCTIONS for rope_theta theta and the given
// scaling, computed as transformers computes them, in float32 one
// operation at a time (the exponent 2j/dim, theta to its power, the
// reciprocal; llama3's wavelengths, smoothing factor and blend in the
// order of _compute_llama3_parameters):
//
//	default: inv[j] = 1/theta^(2j/headDim)
//	linear:  inv[j]/factor
//	llama3:  wavelen = 2π/inv[j]; inv[j]/factor where wavelen >
//	         omax/low_freq_factor, inv[j] where wavelen < omax/high_freq_factor,
//	         else (1-s)·inv[j]/factor + s·inv[j] with
//	         s = (omax/wavelen - low)/(high - low)
//
// Each of these has an attention scaling of 1, so the tables need no other
// factor. Partial rotary embeddings are not supported. theta^(2j/headDim) is
// correctly rounded here; PyTorch's vectorised float32 pow is within an ulp
// of it (one of the 64 frequencies of head_dim 128 with theta 1e6 is an ulp
// apart), which moves the angle of position p by p·ulp.
func RoPEInvFreq(headDim int, theta float64, s RoPEScaling) ([]float32, error) {
	if headDim <= 0 || headDim%2 != 0 {
		return nil, fmt.Errorf("rope: head_dim %d is not a positive even number", headDim)
	}
	if !(theta > 0) || math.IsInf(theta, 0) {
		return nil, fmt.Errorf("rope: rope_theta %g is not a positive number", theta)
	}
	inv := make([]float32, headDim/2)
	base, dim := float32(theta), float32(headDim)
	for j := range inv {
		e := float32(2*j) / dim
		inv[j] = 1 / float32(math.Pow(float64(base), float64(e)))
	}
	switch s.Type {
	case "", "default":
		return inv, nil
	case "linear":
		if !(s.Factor > 0) {
			return nil, fmt.Errorf("rope: rope_scaling type linear needs a positive factor, got %g", s.Factor)
		}
		f := float32(s.Factor)
		for j, v := range inv {
			inv[j] = v / f
		}
		return inv, nil
	case "llama3":
		switch {
		case !(s.Factor > 0):
			return nil, fmt.Errorf("rope: rope_scaling type llama3 needs a positive factor, got %g", s.Factor)
		case !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor):
			return nil, fmt.Errorf("rope: rope_scaling type llama3 needs 0 < low_freq_factor < high_freq_factor, got %g and %g", s.LowFreqFactor, s.HighFreqFactor)
		case s.OriginalMaxPositions <= 0:
			return nil, fmt.Errorf("rope: rope_scaling type llama3 needs a positive original_max_position_embeddings, got %d", s.OriginalMaxPositions)
		}
		omax := float64(s.OriginalMaxPositions)
		// Python computes these in float64; the tensor ops round their
		// scalar operands to float32.
		lowWave, highWave := float32(omax/s.LowFreqFactor), float32(omax/s.HighFreqFactor)
		factor, low := float32(s.Factor), float32(s.LowFreqFactor)
		span := float32(s.HighFreqFactor - s.LowFreqFactor)
		twoPi, om := float32(2*math.Pi), float32(omax)
		for j, v := range inv {
			// x / tensor is tensor.reciprocal() * x in PyTorch.
			wave := float32(1/v) * twoPi
			switch {
			case wave > lowWave:
				inv[j] = v / factor
			case wave < highWave:
				// unchanged
			default:
				sm := (float32(float32(1/wave)*om) - low) / span
				a := float32(float32(1-sm)*v) / factor
				inv[j] = a + float32(sm*v)
			}
		}
		return inv, nil
	}
	return nil, fmt.Errorf("rope: rope_scaling type %q is not supported (default, linear and llama3 are)", s.Type)
}

// RoPETable returns the cos and sin tables [maxPos, len(invFreq)] of the
// rotary embedding, row p being RoPECosSin's for position p. RoPEForward
// reads them.
func RoPETable(invFreq []float32, maxPos int) (cos, sin []float32) {
	h := len(invFreq)
	cos, sin = make([]float32, maxPos*h), make([]float32, maxPos*h)
	for p := range maxPos {
		RoPECosSin(cos[p*h:(p+1)*h], sin[p*h:(p+1)*h], invFreq, p)
	}
	return cos, sin
}

// RoPECosSin writes the table row of position pos into cos and sin
// (len(invFreq) each): the angle of pair j is pos·invFreq[j] rounded to
// float32 (Hugging Face's float32 outer product of positions and inverse
// frequencies), and its cosine and sine are rounded to float32.
func RoPECosSin(cos, sin, invFreq []float32, pos int) {
	cos, sin = cos[:len(invFreq)], sin[:len(invFreq)]
	p := float32(pos)
	for j, f := range invFreq {
		a := float64(float32(p * f))
		cos[j] = float32(math.Cos(a))
		sin[j] = float32(math.Sin(a))
	}
}
