package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// manifestFile is the checksum manifest of a checkpoint: the SHA-256 of
// every other file of the checkpoint folder, one "HEX  NAME" line each in
// the format of GNU sha256sum, so `cd checkpoint && sha256sum -c SHA256SUMS`
// checks a checkpoint by hand. Its first line is a comment saying so, and
// its last line a comment holding the SHA-256 of the lines before it
// (sha256sum skips lines that start with '#'), so a damaged manifest is
// told apart from a damaged file it lists.
const manifestFile = "SHA256SUMS"

const (
	manifestHead    = "# gochat checkpoint: the SHA-256 of each file; check with `sha256sum -c SHA256SUMS` in this folder\n"
	manifestTrailer = "# sha256 of the lines above: "
)

// encodeManifest writes the manifest of sums (file name -> SHA-256).
func encodeManifest(sums map[string][]byte) []byte {
	b := []byte(manifestHead)
	for _, name := range sortedKeys(sums) {
		b = fmt.Appendf(b, "%x  %s\n", sums[name], name)
	}
	self := sha256.Sum256(b)
	return fmt.Appendf(b, "%s%x\n", manifestTrailer, self)
}

// parseManifest reads the manifest b (of the file path) into file name ->
// lower-case hex SHA-256. It checks the manifest's own checksum first, and
// refuses names that are not plain file names of the folder.
func parseManifest(path string, b []byte) (map[string]string, error) {
	bad := func(format string, args ...any) error {
		return &corruptError{File: path, Why: "is corrupt (" + fmt.Sprintf(format, args...) + ")"}
	}
	body, trailer, ok := cutLastLine(b)
	if !ok {
		return nil, bad("it does not end in a newline: truncated?")
	}
	if !strings.HasPrefix(trailer, manifestTrailer) {
		return nil, bad("its last line, %q, is not its own checksum", trailer)
	}
	want := strings.TrimPrefix(trailer, manifestTrailer)
	if got := sha256.Sum256(body); !isHexSum(want) || want != hex.EncodeToString(got[:]) {
		return nil, bad("its own checksum does not match: %q recorded, %x computed", want, got)
	}
	sums := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		switch {
		case !ok || !isHexSum(sum):
			return nil, bad("line %d is not \"SHA256  NAME\": %q", i+1, line)
		case name == "" || name == "." || name == ".." || name == manifestFile || strings.ContainsAny(name, "/\\\x00"):
			return nil, bad("line %d names %q, not a file of the checkpoint", i+1, name)
		case sums[name] != "":
			return nil, bad("line %d lists %s a second time", i+1, name)
		}
		sums[name] = sum
	}
	if sums[stateRecord] == "" {
		return nil, bad("it does not list %s", stateRecord)
	}
	return sums, nil
}

// cutLastLine splits b, which must end in a newline, into everything
// before its last line and that line (without the newline).
func cutLastLine(b []byte) (body []byte, last string, ok bool) {
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, "", false
	}
	i := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1
	return b[:i], string(b[i : len(b)-1]), true
}

// isHexSum reports whether s is a SHA-256 in lower-case hex.
func isHexSum(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// corruptError says that a file of a checkpoint is damaged or missing.
type corruptError struct {
	File string // path of the file
	Why  string // "is corrupt (...)", "is missing ..."
}

func (e *corruptError) Error() string { return e.File + " " + e.Why }

// verifyCheckpoint checks every file the manifest of the checkpoint folder
// cdir lists against its SHA-256, reading each once, and returns the
// names of the safetensors files it lists, sorted. Files the manifest does
// not list are not looked at. verified is false, with no error, for a
// checkpoint without a manifest (written by a gochat before checksums):
// tensors then are its state*.safetensors files, unchecked.
func verifyCheckpoint(cdir string) (tensors []string, verified bool, err error) {
	path := filepath.Join(cdir, manifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		files, _ := filepath.Glob(filepath.Join(cdir, "state*.safetensors"))
		for _, f := range files {
			tensors = append(tensors, filepath.Base(f))
		}
		return tensors, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read checkpoint: %w", err)
	}
	sums, err := parseManifest(path, b)
	if err != nil {
		return nil, false, err
	}
	for _, name := range sortedKeys(sums) {
		if err := checkSum(filepath.Join(cdir, name), sums[name]); err != nil {
			return nil, false, err
		}
		if strings.HasSuffix(name, ".safetensors") {
			tensors = append(tensors, name)
		}
	}
	if len(tensors) == 0 {
		return nil, false, &corruptError{File: path, Why: "is corrupt (it lists no .safetensors file)"}
	}
	return tensors, true, nil
}

// checkSum checks the SHA-256 of the file at path against want (hex).
func checkSum(path, want string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &corruptError{File: path, Why: "is missing, though " + manifestFile + " lists it"}
	}
	if err != nil {
		return fmt.Errorf("read checkpoint: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
		return fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return &corruptError{File: path, Why: fmt.Sprintf("is corrupt (sha256 mismatch: expected %s, got %s)", want, got)}
	}
	return nil
}

// readVerified reads the file name of the checkpoint folder cdir,
// checking it against the manifest when there is one.
func readVerified(cdir, name string) ([]byte, error) {
	path := filepath.Join(cdir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	mpath := filepath.Join(cdir, manifestFile)
	m, err := os.ReadFile(mpath)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	sums, err := parseManifest(mpath, m)
	if err != nil {
		return nil, err
	}
	want := sums[name]
	if want == "" {
		return nil, &corruptError{File: path, Why: "is not covered by " + manifestFile}
	}
	if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != want {
		return nil, &corruptError{File: path, Why: fmt.Sprintf("is corrupt (sha256 mismatch: expected %s, got %x)", want, got)}
	}
	return b, nil
}

// sumFile is the side file in which a rank of a sharded save hands the
// SHA-256 of its state-rank-R.safetensors to rank 0 (one manifest line);
// rank 0 folds them into the manifest and removes them before the commit.
const sumFile = "state-rank-%d.sha256"

// readRankSums reads the side files of ranks ranks in tmp into sums and
// removes them.
func readRankSums(tmp string, ranks int, sums map[string][]byte) error {
	for r := range ranks {
		path := filepath.Join(tmp, fmt.Sprintf(sumFile, r))
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("write checkpoint: rank %d's checksum: %w", r, err)
		}
		want := fmt.Sprintf(rankTensors, r)
		sum, name, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "  ")
		d, err := hex.DecodeString(sum)
		if !ok || name != want || !isHexSum(sum) || err != nil {
			return fmt.Errorf("write checkpoint: %s is not \"SHA256  %s\": %q", path, want, b)
		}
		sums[name] = d
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("write checkpoint: %w", err)
		}
	}
	return nil
}

// asyncHash is a SHA-256 computed on its own goroutine from the bytes
// written to it, so that hashing a checkpoint file as it is streamed out
// overlaps the reads from the device and the writes to disk instead of
// adding to them. Write copies p (the writer may reuse it). Sum must be
// called once, even after a failed write, to end the goroutine.
type asyncHash struct {
	h    hash.Hash
	full chan []byte // chunks to hash
	free chan []byte // chunks hashed, to reuse
	done chan struct{}
}

func newAsyncHash() *asyncHash {
	const depth = 4 // chunks in flight
	a := &asyncHash{h: sha256.New(), full: make(chan []byte, depth), free: make(chan []byte, depth), done: make(chan struct{})}
	for range depth {
		a.free <- nil
	}
	go func() {
		for b := range a.full {
			a.h.Write(b)
			a.free <- b
		}
		close(a.done)
	}()
	return a
}

func (a *asyncHash) Write(p []byte) (int, error) {
	b := <-a.free
	a.full <- append(b[:0], p...)
	return len(p), nil
}

// Sum waits for the bytes written so far to be hashed and returns their
// SHA-256.
func (a *asyncHash) Sum() []byte {
	close(a.full)
	<-a.done
	return a.h.Sum(nil)
}
