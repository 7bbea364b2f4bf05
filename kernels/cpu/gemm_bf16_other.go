//go:build !amd64

package cpu

var gemmBF16Generic = gemmBF16Impl{name: "generic", fp32: &gemmGeneric}

// gemmBF16ImplFor returns the bf16 GEMM for an ISA; without assembly
// kernels every ISA runs the portable path.
func gemmBF16ImplFor(isa) *gemmBF16Impl { return &gemmBF16Generic }

// gemmBF16Impls lists every bf16 GEMM implementation this CPU runs, for
// tests and benchmarks.
func gemmBF16Impls() []*gemmBF16Impl { return []*gemmBF16Impl{&gemmBF16Generic} }
