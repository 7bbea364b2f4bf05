package tensor

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strings"

	"github.com/nlpodyssey/gopickle/types"
)

// zipEntry is a compressed zip entry, read by decompressing from its start.
type zipEntry struct {
	f *zip.File
}

type readCloser struct {
	io.Reader
	io.Closer
}

// openRange returns a reader of the n decompressed bytes at offset off.
func (z *zipEntry) openRange(off, n int64) (io.ReadCloser, error) {
	rc, err := z.f.Open()
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, rc, off); err != nil {
		rc.Close()
		return nil, err
	}
	return readCloser{io.LimitReader(rc, n), rc}, nil
}

// readZipBin reads the tensor index of a torch.save zip archive (torch>=1.6): the pickled state
// dict in <archive>/data.pkl and the storages in <archive>/data/<key>.
func readZipBin(file string, f io.ReaderAt, size int64) ([]*entry, error) {
	zr, err := zip.NewReader(f, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fileErr(file, "not a valid zip archive: %v", err)
	}
	byName := make(map[string]*zip.File, len(zr.File))
	var pkl *zip.File
	for _, zf := range zr.File {
		if byName[zf.Name] != nil {
			return nil, fileErr(file, "zip archive has two entries named %q", zf.Name)
		}
		byName[zf.Name] = zf
		dir, base := path.Split(zf.Name)
		switch {
		case base == "constants.pkl":
			return nil, fileErr(file, "a TorchScript archive (torch.jit.save), not a state dict")
		case base == "data.pkl" && dir != "" && !strings.Contains(strings.TrimSuffix(dir, "/"), "/"):
			if pkl != nil {
				return nil, fileErr(file, "zip archive has more than one data.pkl (%s, %s)", pkl.Name, zf.Name)
			}
			pkl = zf
		}
	}
	if pkl == nil {
		return nil, fileErr(file, "zip archive has no <archive>/data.pkl: not a torch.save checkpoint")
	}
	prefix := strings.TrimSuffix(pkl.Name, "data.pkl")
	if bo := byName[prefix+"byteorder"]; bo != nil {
		b, err := readZipFile(bo, 16)
		if err != nil {
			return nil, fileErr(file, "reading %s: %v", bo.Name, err)
		}
		if s := strings.TrimSpace(string(b)); s != "little" {
			return nil, fileErr(file, "byte order %q is not supported (only little-endian)", s)
		}
	}
	data, err := readZipFile(pkl, maxPickle)
	if err != nil {
		return nil, fileErr(file, "reading %s: %v", pkl.Name, err)
	}
	p, err := splitPickle(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fileErr(file, "%s: %v", pkl.Name, err)
	}

	storages := map[string]*binStorage{}
	load := func(pid any) (any, error) {
		id, err := parseStorageID(pid)
		if err != nil {
			return nil, err
		}
		if st := storages[id.key]; st != nil {
			if st.dtype != id.dtype || st.numel != id.numel {
				return nil, fmt.Errorf("storage %q is used as %d×%s and as %d×%s", id.key, st.numel, st.dtype, id.numel, id.dtype)
			}
			return st, nil
		}
		st := &binStorage{key: id.key, dtype: id.dtype, numel: id.numel}
		storages[id.key] = st
		return st, nil
	}
	obj, err := unpickle(p, torchFindClass, load)
	if err != nil {
		return nil, fileErr(file, "%s: %v", pkl.Name, err)
	}
	resolve := func(st *binStorage) error {
		if st.src != nil {
			return nil
		}
		name := prefix + "data/" + st.key
		zf := byName[name]
		if zf == nil {
			return fmt.Errorf("storage %q is missing from the archive (no entry %s)", st.key, name)
		}
		r, err := zipRegion(f, size, zf)
		if err != nil {
			return fmt.Errorf("storage %q: %v", st.key, err)
		}
		if need := st.numel * int64(st.dtype.Size()); r.size < need {
			return fmt.Errorf("storage %q (entry %s) has %d bytes, want %d (%d × %s): truncated",
				st.key, name, r.size, need, st.numel, st.dtype)
		}
		st.src = r
		return nil
	}
	return stateDictEntries(file, obj, resolve)
}

// zipRegion locates the bytes of a zip entry: directly in the file when stored (torch writes
// stored, 64-byte aligned entries), or through decompression when deflated.
func zipRegion(f io.ReaderAt, size int64, zf *zip.File) (*region, error) {
	if zf.UncompressedSize64 > math.MaxInt64/2 {
		return nil, fmt.Errorf("entry %s: size %d out of range", zf.Name, zf.UncompressedSize64)
	}
	n := int64(zf.UncompressedSize64)
	off, err := zf.DataOffset()
	if err != nil {
		return nil, fmt.Errorf("entry %s: %v", zf.Name, err)
	}
	if zf.CompressedSize64 > uint64(size) || off < 0 || off > size-int64(zf.CompressedSize64) {
		return nil, fmt.Errorf("entry %s: %d bytes at offset %d run past the end of the %d-byte file (truncated?)",
			zf.Name, zf.CompressedSize64, off, size)
	}
	switch zf.Method {
	case zip.Store:
		if zf.CompressedSize64 != zf.UncompressedSize64 {
			return nil, fmt.Errorf("stored entry %s has compressed size %d != size %d",
				zf.Name, zf.CompressedSize64, zf.UncompressedSize64)
		}
		return &region{r: f, off: off, size: n}, nil
	case zip.Deflate:
		// Deflate cannot compress by more than about 1032:1; a larger claim is a corrupt header
		// and would make a strided read allocate for data that is not there.
		if zf.UncompressedSize64/1100 > zf.CompressedSize64 {
			return nil, fmt.Errorf("entry %s: %d bytes claimed from %d compressed bytes", zf.Name,
				zf.UncompressedSize64, zf.CompressedSize64)
		}
		return &region{r: f, size: n, zf: &zipEntry{zf}}, nil
	}
	return nil, fmt.Errorf("entry %s: unsupported zip compression method %d", zf.Name, zf.Method)
}

// readZipFile reads a whole (small) zip entry, refusing entries larger than limit.
func readZipFile(zf *zip.File, limit int64) ([]byte, error) {
	if zf.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("entry is %d bytes, more than the %d-byte limit", zf.UncompressedSize64, limit)
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(zf.UncompressedSize64)+1))
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) != zf.UncompressedSize64 {
		return nil, fmt.Errorf("entry has %d bytes, its header says %d", len(b), zf.UncompressedSize64)
	}
	return b, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// readLegacyBin reads the tensor index of a legacy torch.save file (torch<1.6, or
// _use_new_zipfile_serialization=False): five pickles — magic number, protocol version, system
// info, the state dict, the list of storage keys — then each storage as an int64 element count
// followed by its raw little-endian elements, in key-list order.
func readLegacyBin(file string, f io.ReaderAt, size int64) ([]*entry, error) {
	cr := &countingReader{r: io.NewSectionReader(f, 0, size)}
	br := bufio.NewReader(cr)
	pos := func() int64 { return cr.n - int64(br.Buffered()) }
	next := func(what string, load func(any) (any, error)) (any, error) {
		p, err := splitPickle(br, size-pos())
		if err != nil {
			return nil, fileErr(file, "legacy format %s: %v", what, err)
		}
		v, err := unpickle(p, torchFindClass, load)
		if err != nil {
			return nil, fileErr(file, "legacy format %s: %v", what, err)
		}
		return v, nil
	}
	if _, err := next("magic number", nil); err != nil {
		return nil, err
	}
	v, err := next("protocol version", nil)
	if err != nil {
		return nil, err
	}
	if n, ok := pyInt(v); !ok || n != 1001 {
		return nil, fileErr(file, "legacy format protocol version %s is not supported (want 1001); "+
			"re-save the checkpoint with torch>=1.6", show(v))
	}
	v, err = next("system info", nil)
	if err != nil {
		return nil, err
	}
	if d, ok := v.(*types.Dict); ok {
		if le, ok := d.Get("little_endian"); ok && le != true {
			return nil, fileErr(file, "legacy format: written on a big-endian machine, not supported")
		}
	}

	storages := map[string]*binStorage{}
	load := func(pid any) (any, error) {
		id, err := parseStorageID(pid)
		if err != nil {
			return nil, err
		}
		if id.view != nil {
			return nil, errors.New("storage views (torch<1.0 files) are not supported; re-save with torch>=1.6")
		}
		if st := storages[id.key]; st != nil {
			if st.dtype != id.dtype || st.numel != id.numel {
				return nil, fmt.Errorf("storage %q is used as %d×%s and as %d×%s", id.key, st.numel, st.dtype, id.numel, id.dtype)
			}
			return st, nil
		}
		st := &binStorage{key: id.key, dtype: id.dtype, numel: id.numel}
		storages[id.key] = st
		return st, nil
	}
	obj, err := next("state dict", load)
	if err != nil {
		return nil, err
	}
	v, err = next("storage keys", nil)
	if err != nil {
		return nil, err
	}
	keys, ok := v.(*types.List)
	if !ok {
		return nil, fileErr(file, "legacy format: storage key list is %s", describe(v))
	}
	off := pos()
	for _, k := range *keys {
		key, ok := k.(string)
		st := storages[key]
		if !ok || st == nil {
			return nil, fileErr(file, "legacy format: storage key %s is not used by any tensor", show(k))
		}
		if st.src != nil {
			return nil, fileErr(file, "legacy format: storage key %q listed twice", key)
		}
		var nb [8]byte
		if off > size-8 {
			return nil, fileErr(file, "legacy format: storage %q: file truncated", key)
		}
		if _, err := f.ReadAt(nb[:], off); err != nil {
			return nil, fileErr(file, "legacy format: storage %q: %v", key, err)
		}
		if n := int64(binary.LittleEndian.Uint64(nb[:])); n != st.numel {
			return nil, fileErr(file, "legacy format: storage %q has %d elements in the file, %d in the pickle",
				key, n, st.numel)
		}
		nbytes := st.numel * int64(st.dtype.Size())
		off += 8
		if nbytes > size-off {
			return nil, fileErr(file, "legacy format: storage %q: %d bytes at offset %d run past the end "+
				"of the %d-byte file (truncated?)", key, nbytes, off, size)
		}
		st.src = &region{r: f, off: off, size: nbytes}
		off += nbytes
	}
	resolve := func(st *binStorage) error {
		if st.src == nil {
			return fmt.Errorf("storage %q has no data in the file", st.key)
		}
		return nil
	}
	return stateDictEntries(file, obj, resolve)
}
