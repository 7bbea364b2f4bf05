package zero

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

func devices(t *testing.T, n int) []kernels.Device {
	t.Helper()
	devs := make([]kernels.Device, n)
	for i := range devs {
		d, err := cpu.New(cpu.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		devs[i] = d
	}
	return devs
}

// values returns the same pseudo-random values on every rank for seed.
func values(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.IntN(61) - 30) // small integers: sums over 4 ranks are exact, in bf16 too
	}
	return out
}

func TestExchange(t *testing.T) {
	sizes := []int{6, 130, 2, 0, 1000, 34}
	for _, ranks := range []int{1, 2, 3, 4} {
		for _, dt := range []kernels.DType{kernels.F32, kernels.BF16} {
			for _, stage := range []int{0, 64} { // 64: chunks of 16 elements per rank
				t.Run(fmt.Sprintf("%d ranks/%v/stage %d", ranks, dt, stage), func(t *testing.T) {
					err := disttest.Run(devices(t, ranks), func(c dist.Comm, dev kernels.Device) error {
						return checkExchange(c, dev, sizes, dt, stage)
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

func checkExchange(c dist.Comm, dev kernels.Device, sizes []int, dt kernels.DType, stage int) error {
	lay, err := NewLayout(sizes, c.Size(), c.Rank())
	if err != nil {
		return err
	}
	x, err := NewExchange(dev, c, lay, stage)
	if err != nil {
		return err
	}
	defer x.Free()
	buf, err := dev.Alloc(dt, lay.N)
	if err != nil {
		return err
	}
	want := values(7, lay.N)
	// Gather: each rank starts with its pieces and junk elsewhere.
	start := values(100+uint64(c.Rank()), lay.N)
	for _, r := range lay.Owned() {
		copy(start[r.Lo:r.Hi], want[r.Lo:r.Hi])
	}
	dev.WriteF32(buf, start)
	for u := range lay.Units {
		if err := x.Gather(buf, u); err != nil {
			return err
		}
	}
	got := make([]float32, lay.N)
	dev.ReadF32(got, buf)
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("gather: element %d is %v, want %v", i, got[i], want[i])
		}
	}
	// ReduceScatter: the owner's piece holds the sum over ranks; Release
	// zeroes the rest.
	dev.WriteF32(buf, values(200+uint64(c.Rank()), lay.N))
	sum := make([]float32, lay.N)
	for q := range c.Size() {
		for i, v := range values(200+uint64(q), lay.N) {
			sum[i] += v
		}
	}
	for u := range lay.Units {
		if err := x.ReduceScatter(buf, u); err != nil {
			return err
		}
		x.Release(buf, u)
	}
	dev.ReadF32(got, buf)
	owned := make([]bool, lay.N)
	for _, r := range lay.Owned() {
		for i := r.Lo; i < r.Hi; i++ {
			owned[i] = true
		}
	}
	for i := range got {
		w := float32(0)
		if owned[i] {
			w = sum[i]
		}
		if got[i] != w {
			return fmt.Errorf("reduce-scatter: element %d (owned %v) is %v, want %v", i, owned[i], got[i], w)
		}
	}
	return nil
}

func TestLayout(t *testing.T) {
	lay, err := NewLayout([]int{6, 130, 2}, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Unit 0: shards of 16, rank 1 owns nothing of 6 elements; unit 1:
	// shards of 48, rank 1 owns [6+48, 6+96); unit 2: nothing.
	want := []Range{{54, 102}}
	if got := lay.Owned(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("owned %v, want %v", got, want)
	}
	if got := lay.Intersect(0, 60); fmt.Sprint(got) != fmt.Sprint([]Range{{54, 60}}) {
		t.Errorf("intersect: %v", got)
	}
	if _, err := NewLayout([]int{3, 4}, 2, 0); err == nil {
		t.Error("a unit at an odd offset accepted")
	}
	if _, err := NewLayout([]int{4}, 2, 2); err == nil {
		t.Error("rank 2 of 2 accepted")
	}
}
