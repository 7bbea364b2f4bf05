package disttest

import (
	"fmt"
	"testing"

	"github.com/gochat-ai/gochat/dist"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// The in-process group and the single rank pass the suite every Comm
// passes.
func TestConformance(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		dev := cpuDevice(t)
		Conformance(t, dist.Single{Dev: dev}, dev)
	})
	for _, size := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			devs := make([]kernels.Device, size)
			for r := range devs {
				devs[r] = cpuDevice(t)
			}
			err := Run(devs, func(c dist.Comm, dev kernels.Device) error {
				Conformance(t, c, dev)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func cpuDevice(t *testing.T) kernels.Device {
	d, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
