package ppo

import (
	"fmt"

	"github.com/gochat-ai/gochat/model"
)

// The model works in sequence coordinates, [B,S]: with targets
// model.ShiftLabels(ids), its per-position loss is losses[b,t] =
// −log p(seq[t+1] | seq[0..t]) and IgnoreIndex drops the last position; its
// value head gives values[b,t] at every token. The helpers below move
// between that layout and this package's log-prob coordinates [B,S−1].

// LogProbs returns logp[b,t] = −losses[b,t] for t < S−1 ([B,S−1]) from the
// model's per-position losses [B,S].
func LogProbs(losses []float32, b, s int) []float32 {
	out := DropLast(losses, b, s)
	for i, v := range out {
		out[i] = -v
	}
	return out
}

// DropLast returns x[:, :-1] ([B,S−1]) of x [B,S]: the critic's values in
// log-prob coordinates, as DeepSpeed-Chat's `values[:, :-1]`.
func DropLast(x []float32, b, s int) []float32 {
	mustRows(len(x), b, s)
	out := make([]float32, 0, b*(s-1))
	for r := range b {
		out = append(out, x[r*s:(r+1)*s-1]...)
	}
	return out
}

// ActionMask returns attn[:, 1:] ([B,S−1]) of an attention mask [B,S]: the
// action mask of log-prob coordinates.
func ActionMask(attn []int32, b, s int) []int32 {
	mustRows(len(attn), b, s)
	out := make([]int32, 0, b*(s-1))
	for r := range b {
		out = append(out, attn[r*s+1:(r+1)*s]...)
	}
	return out
}

// ActorGrad is the model gradient of the actor loss: DLosses[b,t] =
// −dlogp[b,t] ([B,S] with S = T+1, 0 at the last position), since the
// model's loss is −logp. dlogp is ActorLoss's [B,T] gradient.
func ActorGrad(dlogp []float32, b, t int) model.Grad {
	return model.Grad{DLosses: widen(dlogp, b, t, -1)}
}

// CriticGrad is the model gradient of the critic loss: DValues[b,t] =
// dvalues[b,t] ([B,S] with S = T+1, 0 at the last position). dvalues is
// CriticLoss's [B,T] gradient.
func CriticGrad(dvalues []float32, b, t int) model.Grad {
	return model.Grad{DValues: widen(dvalues, b, t, 1)}
}

// widen returns sign·x [B,T] as [B,T+1] with a zero last column.
func widen(x []float32, b, t int, sign float32) []float32 {
	if t < 1 || len(x) != b*t {
		panic(fmt.Sprintf("ppo: slice of %d elements, want B·T = %d·%d", len(x), b, t))
	}
	out := make([]float32, b*(t+1))
	for r := range b {
		o := out[r*(t+1) : r*(t+1)+t]
		for i, v := range x[r*t : (r+1)*t] {
			o[i] = sign * v
		}
	}
	return out
}

func mustRows(n, b, s int) {
	if s < 2 || n != b*s {
		panic(fmt.Sprintf("ppo: slice of %d elements, want B·S = %d·%d with S >= 2", n, b, s))
	}
}
