//go:build !amd64

package cpu

// gemmKernelFor returns the micro-kernel for an ISA; without assembly
// kernels every ISA runs the portable one.
func gemmKernelFor(isa) *gemmKernel { return &gemmGeneric }
