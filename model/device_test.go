package model

import (
	"fmt"
	"os"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cuda"
)

// testDeviceEnv names the device TestGoldenOnDevice runs the golden tests
// on: cuda, cuda:N or cpu, as gochat's --device takes them.
// scripts/gpu-check.sh sets it to cuda.
const testDeviceEnv = "GOCHAT_TEST_DEVICE"

// testDeviceSpec parses a GOCHAT_TEST_DEVICE value: "cpu", or "cuda"
// ("gpu") with an ordinal (cuda:N; 0 when not named).
func testDeviceSpec(s string) (kind string, ordinal int, err error) {
	spec, err := kernels.ParseDevice(s)
	if err != nil || spec.Kind == "auto" {
		return "", 0, fmt.Errorf("%s=%q: want cuda, cuda:N or cpu", testDeviceEnv, s)
	}
	return spec.Kind, spec.Ordinal, nil
}

// openTestDevice opens the device GOCHAT_TEST_DEVICE names, through the
// constructor gochat's --device uses (kernels/cuda.New with the ordinal,
// kernels/cpu.New), closed when the test ends. Unset, the test is skipped
// (CI has no GPU; the CPU runs the same checks in the tests that call
// newCPU); set, a device that cannot be made fails the test with why.
func openTestDevice(t *testing.T) kernels.Device {
	t.Helper()
	s := os.Getenv(testDeviceEnv)
	if s == "" {
		t.Skipf("%s is not set (cuda, cuda:N or cpu): the golden tests on another device are skipped; the CPU runs them in TestGoldenPyTorch and the others", testDeviceEnv)
	}
	kind, ordinal, err := testDeviceSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	if kind == "cpu" {
		return newCPU(t, 2)
	}
	d, err := cuda.New(cuda.Options{Ordinal: ordinal, OnBuild: func(target string, cached bool) {
		t.Logf("kernels for %s (from the disk cache: %v)", target, cached)
	}})
	if err != nil {
		t.Fatalf("%s=%s: %v", testDeviceEnv, s, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Logf("device %s", d.Name())
	return d
}

// TestGoldenOnDevice runs the golden tests against PyTorch on the device
// GOCHAT_TEST_DEVICE names (skipped when unset): the OPT (pre-LN and
// post-LN) and LLaMA-family (Llama, Qwen2, Qwen3) cases in fp32 — logits,
// loss, values, every gradient with and without gradient checkpointing,
// ten AdamW steps — and in bf16 against torch autocast and the exact
// answer, with deviceTol's bounds (golden_test.go says why they are wider
// than cpuTol's). After each case the device must hold no deferred error.
func TestGoldenOnDevice(t *testing.T) {
	dev := openTestDevice(t)
	synced := func(f func(*testing.T)) func(*testing.T) {
		return func(t *testing.T) {
			f(t)
			if err := dev.Sync(); err != nil {
				t.Fatalf("device error: %v", err)
			}
		}
	}
	for _, name := range []string{"preln", "postln"} {
		for _, side := range []string{"left", "right"} {
			t.Run("opt/fp32/"+name+"/"+side, synced(func(t *testing.T) { checkOPTGolden(t, dev, name, side, deviceTol) }))
		}
		t.Run("opt/bf16/"+name, synced(func(t *testing.T) { checkOPTBF16(t, dev, name, deviceTol) }))
		t.Run("opt/bf16-grads/"+name, synced(func(t *testing.T) { checkOPTBF16Grads(t, dev, name, deviceTol) }))
	}
	for _, name := range llamaCases {
		for _, side := range []string{"left", "right"} {
			t.Run("llama/fp32/"+name+"/"+side, synced(func(t *testing.T) { checkLlamaGolden(t, dev, name, side, deviceTol) }))
		}
		t.Run("llama/bf16/"+name, synced(func(t *testing.T) { checkLlamaBF16(t, dev, name, deviceTol) }))
	}
}

// TestGoldenOnDeviceCPU runs TestGoldenOnDevice's body on the CPU with
// deviceTol (GOCHAT_TEST_DEVICE=cpu), so that CI checks the wiring the GPU
// run depends on.
func TestGoldenOnDeviceCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Setenv(testDeviceEnv, "cpu")
	TestGoldenOnDevice(t)
}

func TestTestDeviceSpec(t *testing.T) {
	for _, c := range []struct {
		in      string
		kind    string
		ordinal int
		bad     bool
	}{
		{"cuda", "cuda", 0, false}, {"gpu", "cuda", 0, false}, {"cuda:0", "cuda", 0, false}, {"cuda:3", "cuda", 3, false},
		{"cpu", "cpu", 0, false}, {"cuda:", "", 0, true}, {"cuda:-1", "", 0, true}, {"cuda:x", "", 0, true}, {"tpu", "", 0, true},
	} {
		kind, n, err := testDeviceSpec(c.in)
		if (err != nil) != c.bad || kind != c.kind || n != c.ordinal {
			t.Errorf("testDeviceSpec(%q) = %q, %d, %v; want %q, %d, error %v", c.in, kind, n, err, c.kind, c.ordinal, c.bad)
		}
	}
}
