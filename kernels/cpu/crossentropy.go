package cpu

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// The cross-entropy kernels work row by row on logits[N,V] with a
// log-sum-exp: m = max(x), s = Σ exp(x-m) (float32 vector lanes, reduced in
// float64), log softmax(x)[t] = x[t] - m - log(s) evaluated in float64.
// Rows are fanned out over goroutines; with V = 50272 a row (196 KiB) stays
// in L2 between its passes.

// CrossEntropyForward sets losses[i] = -log softmax(logits[i,:])[targets[i]]
// for logits[N,V] and targets[N] (overwrites), and 0 where targets[i] ==
// ignoreIndex. Any other target outside [0,V) panics.
func (d *Device) CrossEntropyForward(losses, logits, targets kernels.Buffer, n, v int, ignoreIndex int32) {
	l, x, tg := f32(losses)[:n], f32(logits)[:n*v], i32(targets)[:n]
	checkTargets(tg, v, ignoreIndex, true)
	d.parallelFor(n, rowGrain(v), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t := tg[i]
			if t == ignoreIndex {
				l[i] = 0
				continue
			}
			xr := x[i*v : i*v+v]
			m := d.rowMax(xr)
			s := d.rowExpSum(xr, m)
			l[i] = float32(float64(m) + math.Log(s) - float64(xr[t]))
		}
	})
}

// CrossEntropyBackward sets dlogits[i,:] = dlosses[i]·(softmax(logits[i,:])
// - onehot(targets[i])) (overwrites) and zero for rows with targets[i] ==
// ignoreIndex. dlogits may alias logits: each row is read before it is
// written. With dlosses = -dlogprobs it is LogProbGather's backward.
func (d *Device) CrossEntropyBackward(dlogits, dlosses, logits, targets kernels.Buffer, n, v int, ignoreIndex int32) {
	dx, dl, x, tg := f32(dlogits)[:n*v], f32(dlosses)[:n], f32(logits)[:n*v], i32(targets)[:n]
	checkTargets(tg, v, ignoreIndex, true)
	d.parallelFor(n, rowGrain(v), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t := tg[i]
			dr := dx[i*v : i*v+v]
			if t == ignoreIndex {
				clear(dr)
				continue
			}
			xr := x[i*v : i*v+v]
			m := d.rowMax(xr)
			s := d.rowExpStore(dr, xr, m) // dr = exp(x-m), reading each x first
			g := dl[i]
			d.rowScale(dr, float32(float64(g)/s))
			dr[t] -= g
		}
	})
}

// LogProbGather sets out[i] = log softmax(logits[i,:])[ids[i]] for
// logits[N,V] (overwrites). Every id must be in [0,V).
func (d *Device) LogProbGather(out, logits, ids kernels.Buffer, n, v int) {
	o, x, id := f32(out)[:n], f32(logits)[:n*v], i32(ids)[:n]
	checkTargets(id, v, 0, false)
	d.parallelFor(n, rowGrain(v), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr := x[i*v : i*v+v]
			m := d.rowMax(xr)
			s := d.rowExpSum(xr, m)
			o[i] = float32(float64(xr[id[i]]) - float64(m) - math.Log(s))
		}
	})
}

// checkTargets panics, before any goroutine starts, on a target outside
// [0,v) that is not the ignore index (when ignore is set).
func checkTargets(tg []int32, v int, ignoreIndex int32, ignore bool) {
	for i, t := range tg {
		if ignore && t == ignoreIndex {
			continue
		}
		if t < 0 || int(t) >= v {
			panic(fmt.Sprintf("cpu: target %d at row %d is outside [0,%d)", t, i, v))
		}
	}
}
