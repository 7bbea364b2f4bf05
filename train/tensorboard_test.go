package train

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestTensorBoardFraming reads the event file back: TFRecord framing with
// valid masked CRCs, the version event, then a scalar event whose fields
// decode to the written tag, value and step.
func TestTensorBoardFraming(t *testing.T) {
	dir := t.TempDir()
	tb, err := NewTensorBoard(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Scalars(7, map[string]float64{"loss": 1.5}); err != nil {
		t.Fatal(err)
	}
	tb.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("event files: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	var recs [][]byte
	for len(b) > 0 {
		n := binary.LittleEndian.Uint64(b[:8])
		if maskedCRC(b[:8]) != binary.LittleEndian.Uint32(b[8:12]) {
			t.Fatal("bad length CRC")
		}
		data := b[12 : 12+n]
		if maskedCRC(data) != binary.LittleEndian.Uint32(b[12+n:16+n]) {
			t.Fatal("bad data CRC")
		}
		recs = append(recs, data)
		b = b[16+n:]
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	ev := recs[1]
	// wall_time (9 bytes), then step.
	if ev[9] != 0x10 || ev[10] != 7 {
		t.Fatalf("step field: % x", ev[9:11])
	}
	sum := ev[11:]
	if sum[0] != 0x2a {
		t.Fatalf("summary tag % x", sum[0])
	}
	val := sum[4:] // summary tag, length, value tag, length, then the value
	if string(val[2:6]) != "loss" || val[6] != 0x15 || math.Float32frombits(binary.LittleEndian.Uint32(val[7:11])) != 1.5 {
		t.Fatalf("value % x", val)
	}
}
