package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlotCompare writes two runs whose losses differ by 10% from step 11
// on and checks the table, the gap on 5-step running means, and the PNG.
func TestPlotCompare(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, scale func(step int) float64) string {
		var b strings.Builder
		for s := 1; s <= 20; s++ {
			fmt.Fprintf(&b, "{\"step\":%d,\"loss\":%g}\n", s, 2*scale(s))
		}
		p := filepath.Join(dir, name+".jsonl")
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a", func(int) float64 { return 1 })
	b := write("b", func(s int) float64 {
		if s > 10 {
			return 1.1
		}
		return 1
	})
	png := filepath.Join(dir, "loss.png")
	out, errOut, code := run(t, "plot", "--key", "loss", "--output", png, "--every", "10", "--window", "5", "fp32="+a, "bf16="+b)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	for _, want := range []string{"step", "fp32", "bf16", "10     ", "2.2000", "largest gap of bf16 vs fp32 (5-step running means of loss): 10.00% at step",
		"largest absolute gap: 0.2 at step", "(10.00% of fp32's first running mean, 2)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
	if _, errOut, code := run(t, "plot", "--output", png, "nameonly"); code != 2 || !strings.Contains(errOut, "NAME=PATH") {
		t.Errorf("bad run argument: code %d, %q", code, errOut)
	}
}
