package optim

import (
	"fmt"
	"math"
	"strings"
)

// ScheduleNames lists the learning-rate schedules, as transformers'
// get_scheduler names them.
var ScheduleNames = []string{"linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup"}

// Schedule maps the number of optimizer steps already taken (0 for the
// first step) to a multiplier of the base learning rate, as transformers'
// LambdaLR schedules do. Past its total a schedule holds its final value
// (a cosine does not climb back).
type Schedule func(step int) float64

// NewSchedule returns the named schedule with warmup steps of linear
// warm-up out of total optimizer steps. Polynomial decays to 1e-7 of the base
// rate with power 1 (lrEndRatio and power are transformers' defaults for an
// initial rate of 1; pass the real ratio with NewPolynomial).
func NewSchedule(name string, warmup, total int) (Schedule, error) {
	if warmup < 0 || total < 0 {
		return nil, fmt.Errorf("schedule %s: warmup (%d) and total (%d) steps must be >= 0", name, warmup, total)
	}
	sched, err := newSchedule(name, warmup, total)
	if err != nil {
		return nil, err
	}
	return func(s int) float64 { return sched(min(s, total)) }, nil
}

func newSchedule(name string, warmup, total int) (Schedule, error) {
	warm := func(s int) float64 { return float64(s) / float64(max(1, warmup)) }
	progress := func(s int) float64 { return float64(s-warmup) / float64(max(1, total-warmup)) }
	switch name {
	case "constant":
		return func(int) float64 { return 1 }, nil
	case "constant_with_warmup":
		return func(s int) float64 {
			if s < warmup {
				return warm(s)
			}
			return 1
		}, nil
	case "linear":
		return func(s int) float64 {
			if s < warmup {
				return warm(s)
			}
			return math.Max(0, float64(total-s)/float64(max(1, total-warmup)))
		}, nil
	case "cosine":
		return func(s int) float64 {
			if s < warmup {
				return warm(s)
			}
			return math.Max(0, 0.5*(1+math.Cos(math.Pi*progress(s))))
		}, nil
	case "cosine_with_restarts":
		return func(s int) float64 {
			if s < warmup {
				return warm(s)
			}
			p := progress(s)
			if p >= 1 {
				return 0
			}
			return math.Max(0, 0.5*(1+math.Cos(math.Pi*math.Mod(p, 1))))
		}, nil
	case "polynomial":
		return NewPolynomial(warmup, total, 1e-7, 1), nil
	}
	return nil, fmt.Errorf("unknown lr scheduler %q (want one of %s)", name, strings.Join(ScheduleNames, ", "))
}

// NewPolynomial is transformers' polynomial decay with warm-up, from 1 down
// to lrEndRatio (= lr_end / base lr) with the given power.
func NewPolynomial(warmup, total int, lrEndRatio, power float64) Schedule {
	return func(s int) float64 {
		switch {
		case s < warmup:
			return float64(s) / float64(max(1, warmup))
		case s > total:
			return lrEndRatio
		}
		decay := float64(total - warmup)
		rem := 1 - float64(s-warmup)/decay
		return (1-lrEndRatio)*math.Pow(rem, power) + lrEndRatio
	}
}
