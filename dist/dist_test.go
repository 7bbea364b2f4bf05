package dist

import (
	"slices"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

func TestSingle(t *testing.T) {
	dev, _ := cpu.New(cpu.Options{Threads: 1})
	c := Single{Dev: dev}
	in, out := must(dev.Alloc(kernels.F32, 3)), must(dev.Alloc(kernels.F32, 3))
	dev.WriteF32(in, []float32{1, 2, 3})
	if err := c.AllReduceSum(in); err != nil {
		t.Fatal(err)
	}
	if err := c.ReduceScatterSum(out, in); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3)
	dev.ReadF32(got, out)
	if !slices.Equal(got, []float32{1, 2, 3}) {
		t.Errorf("reduce-scatter on one rank: %v", got)
	}
	if err := c.AllGather(must(dev.Alloc(kernels.F32, 2)), in); err == nil {
		t.Error("mismatched all-gather accepted")
	}
	if err := c.Broadcast(in, 1); err == nil {
		t.Error("broadcast from a missing rank accepted")
	}
	if c.Rank() != 0 || c.Size() != 1 || c.Barrier() != nil {
		t.Error("Single is rank 0 of 1")
	}
}
