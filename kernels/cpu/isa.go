package cpu

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/cpu"
)

// isa is the instruction set the GEMM micro-kernel uses.
type isa uint8

const (
	isaGeneric isa = iota
	isaAVX2
	isaAVX512
)

func (i isa) String() string {
	switch i {
	case isaAVX512:
		return "avx512"
	case isaAVX2:
		return "avx2"
	}
	return "generic"
}

// bestISA is the fastest micro-kernel this CPU runs.
func bestISA() isa {
	if runtime.GOARCH != "amd64" {
		return isaGeneric
	}
	if cpu.X86.HasAVX512F {
		return isaAVX512
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		return isaAVX2
	}
	return isaGeneric
}

// pickISA resolves Options.ISA; asking for more than the CPU has is an error.
func pickISA(name string) (isa, error) {
	best := bestISA()
	var want isa
	switch name {
	case "":
		return best, nil
	case "generic":
		want = isaGeneric
	case "avx2":
		want = isaAVX2
	case "avx512":
		want = isaAVX512
	default:
		return 0, fmt.Errorf("cpu: unknown ISA %q (want avx512, avx2 or generic)", name)
	}
	if want > best {
		return 0, fmt.Errorf("cpu: ISA %s is not supported by this CPU (best: %s)", want, best)
	}
	return want, nil
}

// hasBF16 reports whether the CPU has AVX512_BF16 (VDPBF16PS and the
// bf16 conversions).
func hasBF16() bool { return runtime.GOARCH == "amd64" && cpu.X86.HasAVX512BF16 }
