package tensor

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gochat-ai/gochat/internal/atomicfile"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"
)

// maxHeader is the largest safetensors header accepted, the Hugging Face library's limit.
const maxHeader = 100_000_000

// stInfo is one tensor entry of a safetensors header.
type stInfo struct {
	DType       *DType   `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// readSafetensors parses and validates the header of the safetensors file f (size bytes) and
// returns its tensors.
func readSafetensors(path string, f io.ReaderAt, size int64) ([]*entry, error) {
	if size < 8 {
		return nil, fileErr(path, "safetensors: file is %d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := f.ReadAt(lenBuf[:], 0); err != nil {
		return nil, &Error{File: path, Err: err}
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader {
		return nil, fileErr(path, "safetensors: header length %d exceeds the %d-byte limit "+
			"(not a safetensors file?)", n, maxHeader)
	}
	if n > uint64(size-8) {
		return nil, fileErr(path, "safetensors: header length %d runs past the end of the "+
			"%d-byte file (truncated?)", n, size)
	}
	header := make([]byte, n)
	if _, err := f.ReadAt(header, 8); err != nil {
		return nil, &Error{File: path, Err: err}
	}
	infos, err := parseHeader(path, header)
	if err != nil {
		return nil, err
	}
	bufStart := 8 + int64(n)
	bufSize := size - bufStart
	return layoutSafetensors(path, f, infos, bufStart, bufSize)
}

type namedInfo struct {
	name       string
	dtype      DType
	shape      []int
	numel      int64
	begin, end uint64
}

// parseHeader decodes the JSON header, rejecting duplicate names and malformed entries.
func parseHeader(path string, header []byte) ([]namedInfo, error) {
	if !utf8.Valid(header) {
		return nil, fileErr(path, "safetensors: header is not valid UTF-8")
	}
	if len(header) == 0 || header[0] != '{' {
		return nil, fileErr(path, "safetensors: header does not start with '{' (not a safetensors file?)")
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	bad := func(err error) error {
		return fileErr(path, "safetensors: invalid header JSON: %v", err)
	}
	if _, err := dec.Token(); err != nil { // '{'
		return nil, bad(err)
	}
	seen := map[string]bool{}
	var infos []namedInfo
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, bad(fmt.Errorf("object key %v", tok))
		}
		if seen[name] {
			return nil, tensorErr(path, name, "safetensors: duplicate name in header")
		}
		seen[name] = true
		if name == "__metadata__" {
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				return nil, fileErr(path, "safetensors: __metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var si stInfo
		if err := dec.Decode(&si); err != nil {
			return nil, tensorErr(path, name, "safetensors: invalid header entry: %v", err)
		}
		ni, err := checkInfo(si)
		if err != nil {
			return nil, &Error{File: path, Tensor: name, Err: fmt.Errorf("safetensors: %w", err)}
		}
		ni.name = name
		infos = append(infos, ni)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, bad(err)
	}
	if rest := header[dec.InputOffset():]; len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, fileErr(path, "safetensors: header has %d bytes of non-space data after the JSON object", len(rest))
	}
	return infos, nil
}

// checkInfo validates one header entry on its own: known dtype, sane shape, offsets consistent
// with shape and dtype.
func checkInfo(si stInfo) (namedInfo, error) {
	var ni namedInfo
	if si.DType == nil || si.Shape == nil || si.DataOffsets == nil {
		return ni, errors.New(`header entry needs "dtype", "shape" and "data_offsets"`)
	}
	if !si.DType.known() {
		return ni, fmt.Errorf("unknown dtype %q", *si.DType)
	}
	ni.dtype = *si.DType
	if len(si.DataOffsets) != 2 {
		return ni, fmt.Errorf("data_offsets has %d numbers, want 2", len(si.DataOffsets))
	}
	ni.begin, ni.end = si.DataOffsets[0], si.DataOffsets[1]
	if ni.end < ni.begin {
		return ni, fmt.Errorf("data_offsets [%d,%d] end before they begin", ni.begin, ni.end)
	}
	numel, err := checkShape(*si.Shape)
	if err != nil {
		return ni, err
	}
	ni.numel = numel
	ni.shape = make([]int, len(*si.Shape))
	for i, d := range *si.Shape {
		ni.shape[i] = int(d)
	}
	hi, nbytes := bits.Mul64(uint64(numel), uint64(ni.dtype.Size()))
	if hi != 0 || nbytes != ni.end-ni.begin {
		return ni, fmt.Errorf("shape %v of %s needs %d×%d bytes but data_offsets [%d,%d] hold %d",
			*si.Shape, ni.dtype, numel, ni.dtype.Size(), ni.begin, ni.end, ni.end-ni.begin)
	}
	return ni, nil
}

// checkShape returns the element count of a shape, rejecting negative dimensions and counts that
// overflow int (or a byte count that overflows int64).
func checkShape[T int | int64](shape []T) (int64, error) {
	numel := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		hi, lo := bits.Mul64(uint64(numel), uint64(d))
		if hi != 0 || lo > math.MaxInt64/8 || lo > math.MaxInt {
			return 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		numel = int64(lo)
	}
	return numel, nil
}

// layoutSafetensors checks that the tensors tile the data buffer exactly — sorted by offset, each
// begins where the previous one ends, and the last ends at the end of the file — and builds the
// entries.
func layoutSafetensors(path string, f io.ReaderAt, infos []namedInfo, bufStart, bufSize int64) ([]*entry, error) {
	for _, ni := range infos {
		if ni.end > uint64(bufSize) {
			return nil, tensorErr(path, ni.name, "safetensors: data_offsets [%d,%d] run past the end "+
				"of the %d-byte data buffer (file truncated?)", ni.begin, ni.end, bufSize)
		}
	}
	sorted := slices.Clone(infos)
	slices.SortFunc(sorted, func(a, b namedInfo) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end), cmp.Compare(a.name, b.name))
	})
	var pos uint64
	prev := ""
	for _, ni := range sorted {
		switch {
		case ni.begin < pos:
			return nil, tensorErr(path, ni.name, "safetensors: data_offsets [%d,%d] overlap tensor %q "+
				"(which ends at %d)", ni.begin, ni.end, prev, pos)
		case ni.begin > pos:
			return nil, tensorErr(path, ni.name, "safetensors: data_offsets [%d,%d] leave a gap of %d "+
				"bytes after byte %d of the data buffer", ni.begin, ni.end, ni.begin-pos, pos)
		}
		pos = ni.end
		prev = ni.name
	}
	if pos != uint64(bufSize) {
		return nil, fileErr(path, "safetensors: tensors cover %d bytes but the data buffer has %d "+
			"(%d trailing bytes)", pos, bufSize, uint64(bufSize)-pos)
	}
	es := make([]*entry, len(infos))
	for i, ni := range infos {
		es[i] = &entry{
			info:  Info{Name: ni.name, DType: ni.dtype, Shape: ni.shape, File: path},
			numel: ni.numel,
			src:   &region{r: f, off: bufStart + int64(ni.begin), size: int64(ni.end - ni.begin)},
		}
	}
	return es, nil
}

// WriteTensor is one tensor to write: its float32 values, in row-major order, are converted to
// DType (F32, F16 or BF16; F16 and BF16 round to nearest even).
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int     // empty for a scalar
	F32   []float32 // len(F32) must equal the product of Shape
	// Read, used when F32 is nil, supplies the values in chunks: it fills
	// dst with elements [off, off+len(dst)). It lets a caller stream a large
	// tensor (from a device, say) without a full host copy.
	Read func(off int, dst []float32)
}

// DefaultMetadata is the __metadata__ that WriteSafetensors writes when given nil, the same as
// Hugging Face transformers' save_pretrained.
var DefaultMetadata = map[string]string{"format": "pt"}

// WriteSafetensors writes tensors to a safetensors file at path, byte for byte as the Hugging Face
// library would: compact JSON header with __metadata__ first and the tensors ordered by dtype
// (widest first) then name, padded with spaces so the data starts at a multiple of 8, then the
// data contiguously in the same order. A nil metadata writes DefaultMetadata; an empty non-nil map
// writes no __metadata__. The file is written to a temporary file in the same directory, synced
// and renamed over path, so a crash leaves either the old file or the complete new one.
func WriteSafetensors(path string, tensors []WriteTensor, metadata map[string]string) error {
	return WriteSafetensorsTee(path, tensors, metadata, nil)
}

// WriteSafetensorsTee is WriteSafetensors that also writes every byte of the file to tee (when not
// nil) as it goes out, in order: a hash.Hash, say, so a caller can checksum a file of many
// gigabytes without reading it back. When WriteSafetensorsTee returns an error, tee may have seen
// part of the file.
func WriteSafetensorsTee(path string, tensors []WriteTensor, metadata map[string]string, tee io.Writer) error {
	if metadata == nil {
		metadata = DefaultMetadata
	}
	header, order, err := buildHeader(path, tensors, metadata)
	if err != nil {
		return err
	}
	return writeAtomic(path, tee, func(w *bufio.Writer) error {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
		w.Write(n[:])
		w.Write(header)
		buf := make([]byte, chunkBytes)
		var tmp []float32
		for _, t := range order {
			es := t.DType.Size()
			if t.F32 == nil && t.Read != nil {
				numel, _ := checkShape(t.Shape)
				if tmp == nil {
					tmp = make([]float32, chunkBytes/4)
				}
				for off := 0; off < int(numel); {
					k := min(int(numel)-off, chunkBytes/4)
					t.Read(off, tmp[:k])
					encodeF32(buf[:k*es], tmp[:k], t.DType)
					if _, err := w.Write(buf[:k*es]); err != nil {
						return err
					}
					off += k
				}
				continue
			}
			for data := t.F32; len(data) > 0; {
				k := min(len(data), chunkBytes/es)
				encodeF32(buf[:k*es], data[:k], t.DType)
				if _, err := w.Write(buf[:k*es]); err != nil {
					return err
				}
				data = data[k:]
			}
		}
		return nil
	})
}

// buildHeader validates tensors and returns the padded header and the tensors in file order.
func buildHeader(path string, tensors []WriteTensor, metadata map[string]string) ([]byte, []*WriteTensor, error) {
	order := make([]*WriteTensor, len(tensors))
	seen := make(map[string]bool, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		switch {
		case t.Name == "" || t.Name == "__metadata__":
			return nil, nil, tensorErr(path, t.Name, "invalid tensor name")
		case !utf8.ValidString(t.Name):
			return nil, nil, tensorErr(path, t.Name, "tensor name is not valid UTF-8")
		case seen[t.Name]:
			return nil, nil, tensorErr(path, t.Name, "duplicate tensor name")
		case t.DType != F32 && t.DType != F16 && t.DType != BF16:
			return nil, nil, tensorErr(path, t.Name, "cannot write dtype %q (want F32, F16 or BF16)", t.DType)
		}
		seen[t.Name] = true
		numel, err := checkShape(t.Shape)
		if err != nil {
			return nil, nil, &Error{File: path, Tensor: t.Name, Err: err}
		}
		if (t.F32 != nil || t.Read == nil) && numel != int64(len(t.F32)) {
			return nil, nil, tensorErr(path, t.Name, "shape %v has %d elements but %d values were given",
				t.Shape, numel, len(t.F32))
		}
		order[i] = t
	}
	slices.SortFunc(order, func(a, b *WriteTensor) int {
		return cmp.Or(cmp.Compare(dtypes[b.DType].rank, dtypes[a.DType].rank), cmp.Compare(a.Name, b.Name))
	})
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, nil, fileErr(path, "metadata %q: not valid UTF-8", k)
		}
	}

	h := []byte{'{'}
	if len(metadata) > 0 {
		h = appendJSONString(h, "__metadata__")
		h = append(h, ':', '{')
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				h = append(h, ',')
			}
			h = appendJSONString(h, k)
			h = append(h, ':')
			h = appendJSONString(h, metadata[k])
		}
		h = append(h, '}')
	}
	var off uint64
	for i, t := range order {
		if i > 0 || len(metadata) > 0 {
			h = append(h, ',')
		}
		h = appendJSONString(h, t.Name)
		h = append(h, `:{"dtype":`...)
		h = appendJSONString(h, string(t.DType))
		h = append(h, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				h = append(h, ',')
			}
			h = strconv.AppendInt(h, int64(d), 10)
		}
		numel, _ := checkShape(t.Shape) // validated above
		end := off + uint64(numel)*uint64(t.DType.Size())
		h = append(h, `],"data_offsets":[`...)
		h = strconv.AppendUint(h, off, 10)
		h = append(h, ',')
		h = strconv.AppendUint(h, end, 10)
		h = append(h, "]}"...)
		off = end
	}
	h = append(h, '}')
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	return h, order, nil
}

// appendJSONString appends s as a JSON string the way serde_json (and Python's json with
// ensure_ascii=False) writes it: '"' and '\\' escaped, control characters as \b \f \n \r \t or
// \u00xx, everything else (all of UTF-8) as is.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

// writeAtomic writes a file through fill into a temporary file beside path, syncs it and renames
// it over path; tee, when not nil, gets the same bytes. On any error the temporary file is removed
// and path is untouched.
func writeAtomic(path string, tee io.Writer, fill func(w *bufio.Writer) error) error {
	err := atomicfile.Write(path, func(f io.Writer) error {
		if tee != nil {
			f = io.MultiWriter(f, tee)
		}
		w := bufio.NewWriterSize(f, chunkBytes)
		if err := fill(w); err != nil {
			return err
		}
		return w.Flush()
	})
	if err != nil {
		return &Error{File: path, Err: err}
	}
	return nil
}
