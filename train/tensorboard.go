package train

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// TensorBoard writes scalar summaries as a TensorBoard event file
// (events.out.tfevents.*): TFRecord framing (length, masked CRC-32C of the
// length, the serialized Event, masked CRC-32C of the data) around Event
// protocol buffers {wall_time=1, step=2, file_version=3, summary=5 {value=1
// {tag=1, simple_value=2}}}, encoded by hand.
type TensorBoard struct {
	f *os.File
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// NewTensorBoard creates an event file in dir.
func NewTensorBoard(dir string) (*TensorBoard, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	host, _ := os.Hostname()
	name := fmt.Sprintf("events.out.tfevents.%d.%s", time.Now().Unix(), host)
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	tb := &TensorBoard{f: f}
	ev := appendDouble(nil, 1, nowSeconds())
	ev = appendBytes(ev, 3, []byte("brain.Event:2"))
	return tb, tb.record(ev)
}

func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// Scalars writes one event with a scalar per tag at step.
func (tb *TensorBoard) Scalars(step int, values map[string]float64) error {
	tags := make([]string, 0, len(values))
	for k := range values {
		tags = append(tags, k)
	}
	sort.Strings(tags)
	var summary []byte
	for _, tag := range tags {
		v := appendBytes(nil, 1, []byte(tag))
		v = append(v, 0x15) // field 2, fixed32
		v = binary.LittleEndian.AppendUint32(v, math.Float32bits(float32(values[tag])))
		summary = appendBytes(summary, 1, v)
	}
	ev := appendDouble(nil, 1, nowSeconds())
	ev = append(ev, 0x10) // field 2, varint
	ev = binary.AppendUvarint(ev, uint64(step))
	ev = appendBytes(ev, 5, summary)
	return tb.record(ev)
}

// Close closes the file.
func (tb *TensorBoard) Close() error { return tb.f.Close() }

func (tb *TensorBoard) record(data []byte) error {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	buf := append(hdr[:], data...)
	buf = binary.LittleEndian.AppendUint32(buf, maskedCRC(data))
	if _, err := tb.f.Write(buf); err != nil {
		return fmt.Errorf("tensorboard: %w", err)
	}
	return nil
}

func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, crcTable)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

func appendDouble(b []byte, field int, v float64) []byte {
	b = append(b, byte(field<<3|1))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func appendBytes(b []byte, field int, v []byte) []byte {
	b = append(b, byte(field<<3|2))
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}
