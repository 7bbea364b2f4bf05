package cuda

import (
	"os"
	"testing"

	"github.com/gochat-ai/gochat/kernels/kerneltest"
)

// openGPU opens GPU 0 or skips the test with the reason: a GPU is not
// part of CI, so this skips there too (the GPU checks run through
// scripts/gpu-check.sh on a machine that has one). GOCHAT_CUDA_REQUIRE=1
// turns the skip into a failure (gpu-check.sh sets it).
func openTestGPU(t *testing.T) *Device {
	t.Helper()
	d, err := New(Options{OnBuild: func(tg string, cached bool) { t.Logf("kernels for %s (from the disk cache: %v)", tg, cached) }})
	if err != nil {
		if os.Getenv("GOCHAT_CUDA_REQUIRE") == "1" {
			t.Fatalf("no usable GPU: %v", err)
		}
		t.Skipf("no usable GPU: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Logf("device %s", d.Name())
	return d
}

// TestConformance runs the kerneltest suite on GPU 0: every op against the
// float64 references, the bf16 tier, the finite-difference checks and the
// LLaMA goldens.
func TestConformance(t *testing.T) {
	d := openTestGPU(t)
	kerneltest.Run(t, d)
	if s := d.MemStats(); s.Live != 0 {
		t.Errorf("%d bytes live after the suite", s.Live)
	}
}
