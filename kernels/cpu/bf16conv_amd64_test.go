package cpu

// bf16AddRoundImpls adds the assembly roundings this CPU runs.
func bf16AddRoundImpls(m map[string]func(dst []uint16, src []float32)) {
	if bf16HasAVX512 {
		m["avx512"] = func(dst []uint16, src []float32) {
			if len(src) > 0 {
				roundBF16AVX512(&dst[0], &src[0], len(src))
			}
		}
	}
	if bf16HasBF16Conv {
		m["avx512bf16"] = func(dst []uint16, src []float32) {
			if len(src) > 0 {
				roundBF16AVX512BF16(&dst[0], &src[0], len(src))
			}
		}
	}
}
