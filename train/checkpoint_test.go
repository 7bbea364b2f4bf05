package train

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/kernels/cpu"
)

// TestStateBuffersBitExact: SaveState and LoadState give back F32, BF16
// and I32 buffers bit for bit — I32 ones (AdamW's master low halves)
// whatever their bits would mean as floats: NaN payloads, infinities,
// denormals, negative zero. (F32 and BF16 buffers must be finite:
// TestNonFiniteStateRefused.)
func TestStateBuffersBitExact(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	bits := []int32{0, 1, -1, 0x7fc00001, 0x7f800001, -0x7f7fffff, 0x7f800000, int32(-0x80000000), 0x00008001, 0x7fff8000, 0x0001ffff}
	f := []float32{1.5, float32(math.Copysign(0, -1)), 1e38, 1e-40, 3.14159}
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

// TestSaveAfterCutSave: a save cut between its two renames leaves only
// checkpoint.old, the last complete checkpoint (--resume loads it). The
// next save must keep it until its own checkpoint is in place: here that
// save fails at its last rename, and checkpoint.old still loads; then a
// save that succeeds replaces it.
func TestSaveAfterCutSave(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := must(dev.Alloc(kernels.F32, 3))
	dir := t.TempDir()
	save := func(step float32) error {
		dev.WriteF32(b, []float32{step, step, step})
		return SaveState(dev, dir, map[string]kernels.Buffer{"b": b}, map[string]float32{"step": step})
	}
	check := func(step float32) {
		t.Helper()
		var rec map[string]float32
		if err := ReadRecord(dir, &rec); err != nil || rec["step"] != step {
			t.Fatalf("checkpoint record %v (%v), want step %v", rec, err, step)
		}
		got := []float32{0, 0, 0}
		dev.WriteF32(b, got)
		if err := LoadState(dev, dir, map[string]kernels.Buffer{"b": b}); err != nil {
			t.Fatal(err)
		}
		dev.ReadF32(got, b)
		if got[0] != step {
			t.Fatalf("checkpoint holds %v, want step %v", got, step)
		}
	}
	if err := save(1); err != nil {
		t.Fatal(err)
	}
	// The save of step 2 was cut after its first rename.
	final := filepath.Join(dir, CheckpointDir)
	if err := os.Rename(final, final+".old"); err != nil {
		t.Fatal(err)
	}
	check(1)
	rename = func(from, to string) error {
		if to == final {
			return errors.New("cut")
		}
		return os.Rename(from, to)
	}
	err = save(3)
	rename = os.Rename
	if err == nil {
		t.Fatal("the failing rename did not fail the save")
	}
	check(1)
	if err := save(4); err != nil {
		t.Fatal(err)
	}
	check(4)
	if _, err := os.Stat(final + ".old"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("checkpoint.old left after a complete save: %v", err)
	}
}
