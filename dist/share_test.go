package dist_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/dist/disttest"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// TestShareFloat64s: three ranks each share two float64 values with full
// 53-bit mantissas; every rank gets every value back bit for bit.
func TestShareFloat64s(t *testing.T) {
	want := []float64{1.0 / 3, -math.Pi * 1e20, 0, math.E * 1e-20, math.Sqrt2, -7.25e30}
	devs := make([]kernels.Device, 3)
	for i := range devs {
		devs[i], _ = cpu.New(cpu.Options{Threads: 1})
	}
	err := disttest.Run(devs, func(c dist.Comm, dev kernels.Device) error {
		v := make([]float64, len(want))
		r := c.Rank()
		copy(v[2*r:2*r+2], want[2*r:2*r+2])
		if err := dist.ShareFloat64s(c, dev, v); err != nil {
			return err
		}
		for i := range want {
			if math.Float64bits(v[i]) != math.Float64bits(want[i]) {
				return fmt.Errorf("rank %d: value %d is %v, want %v", r, i, v[i], want[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
