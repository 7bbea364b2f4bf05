package tensor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Error reports a problem with a checkpoint file, or with one tensor in it. Every error this
// package returns about file contents is an *Error, so a message always names the file.
type Error struct {
	File   string // path of the file
	Tensor string // name of the tensor, or "" when the problem is the file as a whole
	Err    error  // what is wrong
}

func (e *Error) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("%s: tensor %q: %v", e.File, e.Tensor, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrNotFound is wrapped by the error ReadF32 and ReadI64 return for a name the checkpoint lacks.
var ErrNotFound = errors.New("no such tensor")

func fileErr(file string, format string, args ...any) error {
	return &Error{File: file, Err: fmt.Errorf(format, args...)}
}

func tensorErr(file, name string, format string, args ...any) error {
	return &Error{File: file, Tensor: name, Err: fmt.Errorf(format, args...)}
}

// Info describes one tensor of a checkpoint.
type Info struct {
	Name  string
	DType DType
	Shape []int  // row-major dimensions; empty for a 0-d (scalar) tensor
	File  string // path of the file that holds the data
}

// Numel returns the number of elements, the product of Shape (1 for a scalar).
func (i Info) Numel() int {
	n := 1
	for _, d := range i.Shape {
		n *= d
	}
	return n
}

// region is a run of bytes in a file: a safetensors tensor's data, or one .bin storage.
type region struct {
	r    io.ReaderAt
	off  int64     // absolute file offset of the first byte, when stored uncompressed
	size int64     // length in bytes
	zf   *zipEntry // non-nil when the bytes are a compressed zip entry
}

// reader returns a reader of the n bytes at offset off in the region.
func (r *region) reader(off, n int64) (io.ReadCloser, error) {
	if off < 0 || n < 0 || off > r.size || n > r.size-off {
		return nil, fmt.Errorf("byte range [%d,%d) outside a %d-byte region", off, off+n, r.size)
	}
	if r.zf == nil {
		return io.NopCloser(io.NewSectionReader(r.r, r.off+off, n)), nil
	}
	return r.zf.openRange(off, n)
}

// entry is one tensor: where its bytes are and how its elements are laid out.
type entry struct {
	info    Info
	numel   int64
	src     *region
	elemOff int64   // offset of element 0 in src, in elements
	strides []int64 // element strides for a non-contiguous .bin view; nil when row-major contiguous
}

// Checkpoint is a set of named tensors read lazily from one or more safetensors or
// pytorch_model.bin files. Opening parses and validates the headers; each ReadF32 or ReadI64 then
// reads just that tensor's bytes. Its methods are safe for concurrent use, except Close.
type Checkpoint struct {
	files   []*os.File
	entries map[string]*entry
	names   []string
}

// Open opens a checkpoint: a .safetensors file, a pytorch_model.bin file (the zip format written
// by torch>=1.6, or the older legacy format), or a sharded set through its *.index.json file.
// The format is recognised from the file's first bytes, not its name, except for the index.
// Every header is parsed and validated now; tensor data is read later, by ReadF32 and ReadI64.
// The caller must Close the Checkpoint.
func Open(path string) (*Checkpoint, error) {
	c := &Checkpoint{entries: map[string]*entry{}}
	var err error
	if strings.HasSuffix(path, ".index.json") {
		err = c.addIndex(path)
	} else {
		var es []*entry
		if es, err = c.openFile(path); err == nil {
			for _, e := range es {
				c.entries[e.info.Name] = e
			}
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	for name := range c.entries {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	return c, nil
}

// Checkpoint file names in a Hugging Face model directory, in order of preference.
var dirCandidates = []string{
	"model.safetensors",
	"model.safetensors.index.json",
	"pytorch_model.bin",
	"pytorch_model.bin.index.json",
}

// OpenDir opens the weights of a Hugging Face model directory: model.safetensors if present, else
// model.safetensors.index.json, else pytorch_model.bin, else pytorch_model.bin.index.json. If none
// exists the error lists what was looked for and wraps fs.ErrNotExist.
func OpenDir(dir string) (*Checkpoint, error) {
	for _, name := range dirCandidates {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return Open(p)
		}
	}
	return nil, fmt.Errorf("%s: no checkpoint found (looked for %s): %w",
		dir, strings.Join(dirCandidates, ", "), fs.ErrNotExist)
}

// openFile opens one checkpoint file, recognising its format, and returns its tensors.
func (c *Checkpoint) openFile(path string) ([]*entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	c.files = append(c.files, f)
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fileErr(path, "is a directory (use OpenDir for a model directory)")
	}
	return readFile(path, f, st.Size())
}

// readFile recognises the format of the checkpoint file r (size bytes, at path) from its first
// bytes and returns its tensors.
func readFile(path string, r io.ReaderAt, size int64) ([]*entry, error) {
	var head [16]byte
	n, err := r.ReadAt(head[:], 0)
	if err != nil && err != io.EOF {
		return nil, &Error{File: path, Err: err}
	}
	switch {
	case n >= 4 && (string(head[:4]) == "PK\x03\x04" || string(head[:4]) == "PK\x05\x06"):
		return readZipBin(path, r, size)
	case isLegacyMagic(head[:n]):
		return readLegacyBin(path, r, size)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".bin", ".pt", ".pth", ".ckpt":
		return nil, fileErr(path, "not a PyTorch checkpoint: neither a zip archive (torch>=1.6) "+
			"nor a legacy torch.save file")
	}
	return readSafetensors(path, r, size)
}

// legacyMagic is the pickled magic number that starts a legacy (pre-zip) torch.save file:
// PROTO n, LONG1 of 10 bytes 0x1950a86a20f9469cfc6c, STOP.
var legacyMagic = []byte{0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, '.'}

func isLegacyMagic(b []byte) bool {
	return len(b) >= 15 && b[0] == 0x80 && bytes.Equal(b[2:15], legacyMagic)
}

// Names returns the names of all tensors, sorted.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Info returns the description of the named tensor and whether it exists.
func (c *Checkpoint) Info(name string) (Info, bool) {
	e, ok := c.entries[name]
	if !ok {
		return Info{}, false
	}
	i := e.info
	i.Shape = slices.Clone(i.Shape)
	return i, true
}

func (c *Checkpoint) lookup(name string) (*entry, error) {
	e, ok := c.entries[name]
	if !ok {
		return nil, fmt.Errorf("tensor %q: %w in checkpoint (%d tensors)", name, ErrNotFound, len(c.names))
	}
	return e, nil
}

// ReadF32 reads the named tensor into dst in row-major order, converting from its float DType
// (F32, F16, BF16, F64, F8_E4M3, F8_E5M2) to float32: exactly, except that F64 rounds to the
// nearest float32. len(dst) must equal the tensor's element count (Info.Numel). On error dst may
// be partly written.
func (c *Checkpoint) ReadF32(name string, dst []float32) error {
	e, err := c.lookup(name)
	if err != nil {
		return err
	}
	if !e.info.DType.IsFloat() {
		return tensorErr(e.info.File, name, "dtype %s is not a float type (use ReadI64)", e.info.DType)
	}
	if int64(len(dst)) != e.numel {
		return tensorErr(e.info.File, name, "destination has %d elements, tensor %v has %d",
			len(dst), e.info.Shape, e.numel)
	}
	dt := e.info.DType
	return e.read(func(start int64, raw []byte) {
		decodeF32(dst[start:start+int64(len(raw)/dt.Size())], raw, dt)
	})
}

// ReadI64 reads the named tensor of an integer DType (I64, I32, I16, I8, U64, U32, U16, U8) or BOOL
// (as 0/1) and returns its elements in row-major order. U64 values above MaxInt64 wrap.
func (c *Checkpoint) ReadI64(name string) ([]int64, error) {
	e, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	dt := e.info.DType
	if dt.IsFloat() {
		return nil, tensorErr(e.info.File, name, "dtype %s is not an integer type (use ReadF32)", dt)
	}
	dst := make([]int64, e.numel)
	err = e.read(func(start int64, raw []byte) {
		decodeI64(dst[start:start+int64(len(raw)/dt.Size())], raw, dt)
	})
	if err != nil {
		return nil, err
	}
	return dst, nil
}

// chunkBytes is how many bytes a contiguous read converts at a time.
const chunkBytes = 1 << 20

// read delivers the tensor's raw little-endian elements in row-major order to fn, in chunks of
// whole elements; start is the index of the chunk's first element.
func (e *entry) read(fn func(start int64, raw []byte)) error {
	es := int64(e.info.DType.Size())
	if e.numel == 0 {
		return nil
	}
	if e.strides != nil {
		return e.readStrided(fn)
	}
	rc, err := e.src.reader(e.elemOff*es, e.numel*es)
	if err != nil {
		return tensorErr(e.info.File, e.info.Name, "%v", err)
	}
	defer rc.Close()
	per := max(chunkBytes/es, 1)
	buf := make([]byte, min(per, e.numel)*es)
	for start := int64(0); start < e.numel; start += per {
		k := min(per, e.numel-start)
		if _, err := io.ReadFull(rc, buf[:k*es]); err != nil {
			return e.readErr(err)
		}
		fn(start, buf[:k*es])
	}
	return nil
}

func (e *entry) readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return tensorErr(e.info.File, e.info.Name, "data truncated: file ends inside the tensor")
	}
	return &Error{File: e.info.File, Tensor: e.info.Name, Err: err}
}

// readStrided materialises a non-contiguous view: it reads the span of storage the view touches,
// then gathers the elements in row-major order.
func (e *entry) readStrided(fn func(start int64, raw []byte)) error {
	es := int64(e.info.DType.Size())
	span := int64(1) // elements from the first to the last touched, inclusive
	for i, d := range e.info.Shape {
		span += int64(d-1) * e.strides[i]
	}
	rc, err := e.src.reader(e.elemOff*es, span*es)
	if err != nil {
		return tensorErr(e.info.File, e.info.Name, "%v", err)
	}
	defer rc.Close()
	raw := make([]byte, span*es)
	if _, err := io.ReadFull(rc, raw); err != nil {
		return e.readErr(err)
	}
	out := make([]byte, e.numel*es)
	idx := make([]int, len(e.info.Shape))
	var src int64
	for i := int64(0); i < e.numel; i++ {
		copy(out[i*es:(i+1)*es], raw[src*es:(src+1)*es])
		// Advance the multi-index, last dimension fastest.
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			src += e.strides[d]
			if idx[d] < e.info.Shape[d] {
				break
			}
			src -= int64(idx[d]) * e.strides[d]
			idx[d] = 0
		}
	}
	fn(0, out)
	return nil
}

// Close closes the checkpoint's files. Reads after Close fail.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files = nil
	return errors.Join(errs...)
}
