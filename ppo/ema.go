package ppo

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// EMAUpdate does one step of the actor EMA on dev, DeepSpeed-Chat's
// moving_average:
//
//	ema = β·ema + (1−β)·theta
//
// ema (F32) and theta (F32, or the BF16 weights of mixed precision: the EMA
// itself stays fp32) have the same length (a model's flat parameter
// buffers, or matching views of them); beta is in [0, 1]. It uses only the
// Device's Scale, Add and Copy, so it runs on any backend and allocates
// nothing: for 0 < β < 1 it computes
//
//	ema = (1−β)·(ema·(β/(1−β)) + theta)
//
// in float32 (three roundings, so within a few ulps of the direct formula;
// the scale factors are rounded from float64). β = 1 leaves ema as it is and
// β = 0 copies theta.
func EMAUpdate(dev kernels.Device, ema, theta kernels.Buffer, beta float64) error {
	if ema.DType() != kernels.F32 || (theta.DType() != kernels.F32 && theta.DType() != kernels.BF16) {
		return fmt.Errorf("ppo: EMA of %v into %v buffers, want f32 or bf16 into f32", theta.DType(), ema.DType())
	}
	if ema.Len() != theta.Len() {
		return fmt.Errorf("ppo: EMA of %d parameters into %d", theta.Len(), ema.Len())
	}
	if !(beta >= 0 && beta <= 1) {
		return fmt.Errorf("ppo: EMA beta %v, want it in [0, 1]", beta)
	}
	n := ema.Len()
	switch {
	case n == 0 || beta == 1:
	case beta == 0:
		dev.Copy(ema, theta)
	default:
		dev.Scale(ema, float32(beta/(1-beta)), n)
		dev.Add(ema, ema, theta, n)
		dev.Scale(ema, float32(1-beta), n)
	}
	return nil
}

// ScoreEMA is DeepSpeed-Chat's ExponentialMovingAverage of the average
// reward score: the first update sets Value to its argument, later ones do
// Value = Alpha·Value + (1−Alpha)·x. Its fields are exported so that a
// checkpoint can save and restore it.
type ScoreEMA struct {
	Alpha float64 // decay; Config.ScoreEMAAlpha
	Value float64 // 0 before the first update
	N     int     // updates so far
}

// Update folds x into the average and returns the new Value.
func (e *ScoreEMA) Update(x float64) float64 {
	prev := e.Value
	if e.N == 0 {
		prev = x
	}
	e.Value = e.Alpha*prev + (1-e.Alpha)*x
	e.N++
	return e.Value
}
