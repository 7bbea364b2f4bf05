package cli

import (
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// newCPU returns the CPU backend with the --threads setting.
func newCPU(g *Globals) (*cpu.Device, error) {
	return cpu.New(cpu.Options{Threads: g.Threads})
}
