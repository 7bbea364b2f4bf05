package train

import (
	"math"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// TestStateBuffersBitExact: SaveState and LoadState give back F32, BF16
// and I32 buffers bit for bit — I32 ones (AdamW's master low halves)
// whatever their bits would mean as floats: NaN payloads, infinities,
// denormals, negative zero.
func TestStateBuffersBitExact(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	bits := []int32{0, 1, -1, 0x7fc00001, 0x7f800001, -0x7f7fffff, 0x7f800000, int32(-0x80000000), 0x00008001, 0x7fff8000, 0x0001ffff}
	f := []float32{1.5, -0, float32(math.Inf(1)), 1e-40, 3.14159}
	ib, fb, hb := must(dev.Alloc(kernels.I32, len(bits))), must(dev.Alloc(kernels.F32, len(f))), must(dev.Alloc(kernels.BF16, len(f)))
	dev.WriteI32(ib, bits)
	dev.WriteF32(fb, f)
	dev.WriteF32(hb, f)
	dir := t.TempDir()
	if err := SaveState(dev, dir, map[string]kernels.Buffer{"i": ib, "f": fb, "h": hb}, map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	wantH := make([]float32, len(f))
	dev.ReadF32(wantH, hb)
	ib2, fb2, hb2 := must(dev.Alloc(kernels.I32, len(bits))), must(dev.Alloc(kernels.F32, len(f))), must(dev.Alloc(kernels.BF16, len(f)))
	if err := LoadState(dev, dir, map[string]kernels.Buffer{"i": ib2, "f": fb2, "h": hb2}); err != nil {
		t.Fatal(err)
	}
	gotI := make([]int32, len(bits))
	dev.ReadI32(gotI, ib2)
	for i := range bits {
		if gotI[i] != bits[i] {
			t.Errorf("I32[%d] = %#x, want %#x", i, uint32(gotI[i]), uint32(bits[i]))
		}
	}
	for _, c := range []struct {
		name string
		b    kernels.Buffer
		want []float32
	}{{"F32", fb2, f}, {"BF16", hb2, wantH}} {
		got := make([]float32, len(f))
		dev.ReadF32(got, c.b)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(c.want[i]) {
				t.Errorf("%s[%d] = %#x, want %#x", c.name, i, math.Float32bits(got[i]), math.Float32bits(c.want[i]))
			}
		}
	}
}
