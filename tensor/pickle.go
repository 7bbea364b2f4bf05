package tensor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/nlpodyssey/gopickle/pickle"
)

// Pickles are decoded by gopickle's Unpickler with our own find_class and persistent_load hooks.
// gopickle trusts its input: it allocates whatever a length field says before reading, and it
// panics on some malformed streams. So every pickle is first split out of the file by
// splitPickle, which walks the opcodes and checks each length against the bytes that are really
// there, and the unpickler then runs on that in-memory copy under recover.

const (
	maxPickle     = 1 << 30 // bytes in one pickle (a state dict's data.pkl is KBs to a few MB)
	maxPickleLine = 1 << 16 // bytes in one text argument (GLOBAL names, protocol-0 numbers)
)

// Argument encodings of pickle opcodes (pickletools' ArgumentDescriptors, grouped by layout).
const (
	argNone   = iota + 1
	argFixed1 // 1 byte
	argFixed2
	argFixed4
	argFixed8
	argFrame // 8-byte frame length
	argLine  // text up to '\n'
	argLine2 // two such lines
	argLen1  // 1-byte length, then that many bytes
	argLen4  // 4-byte unsigned length
	argLen4s // 4-byte signed length
	argLen8  // 8-byte length
)

var pickleArgs = func() [256]uint8 {
	var t [256]uint8
	for _, op := range []byte("(.012N\x88\x89)t\x85\x86\x87]ael}dsu\x8f\x90\x91Rbo\x81\x92\x93Q\x94\x97\x98") {
		t[op] = argNone
	}
	for _, op := range []byte("\x80Khq\x82") {
		t[op] = argFixed1
	}
	for _, op := range []byte("M\x83") {
		t[op] = argFixed2
	}
	for _, op := range []byte("Jjr\x84") {
		t[op] = argFixed4
	}
	t['G'] = argFixed8
	t[0x95] = argFrame
	for _, op := range []byte("ILFSVPgp") {
		t[op] = argLine
	}
	t['c'], t['i'] = argLine2, argLine2
	for _, op := range []byte("UC\x8c\x8a") {
		t[op] = argLen1
	}
	t['B'], t['X'] = argLen4, argLen4
	t['T'], t[0x8b] = argLen4s, argLen4s
	for _, op := range []byte("\x8d\x8e\x96") {
		t[op] = argLen8
	}
	return t
}()

// pickleSource is what splitPickle reads from.
type pickleSource interface {
	io.Reader
	io.ByteReader
}

// splitPickle reads one pickle from r, up to and including its STOP opcode, and returns its bytes.
// left is the number of bytes r can still deliver. Every opcode must be known and every length
// argument must fit in what is left, so the unpickler never allocates more than the input holds.
func splitPickle(r pickleSource, left int64) ([]byte, error) {
	out := make([]byte, 0, 4096)
	var frames [][2]int64 // (frame length, offset where the frame's content starts)
	take := func(n int64) error {
		if n < 0 || n > left-int64(len(out)) {
			return fmt.Errorf("pickle: argument of %d bytes at offset %d runs past the end of the data", n, len(out))
		}
		if int64(len(out))+n > maxPickle {
			return fmt.Errorf("pickle: larger than %d bytes", maxPickle)
		}
		start := len(out)
		out = append(out, make([]byte, n)...)
		if _, err := io.ReadFull(r, out[start:]); err != nil {
			return fmt.Errorf("pickle: truncated at offset %d: %w", start, err)
		}
		return nil
	}
	line := func() error {
		for n := 0; ; n++ {
			if n > maxPickleLine {
				return fmt.Errorf("pickle: text argument longer than %d bytes", maxPickleLine)
			}
			if int64(len(out)) >= left {
				return errors.New("pickle: truncated inside a text argument")
			}
			c, err := r.ReadByte()
			if err != nil {
				return fmt.Errorf("pickle: truncated inside a text argument: %w", err)
			}
			out = append(out, c)
			if c == '\n' {
				return nil
			}
		}
	}
	le := binary.LittleEndian
	for {
		if int64(len(out)) >= left {
			return nil, errors.New("pickle: data ends before the STOP opcode")
		}
		op, err := r.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("pickle: data ends before the STOP opcode: %w", err)
		}
		out = append(out, op)
		at := len(out)
		switch pickleArgs[op] {
		case argNone:
		case argFixed1:
			err = take(1)
		case argFixed2:
			err = take(2)
		case argFixed4:
			err = take(4)
		case argFixed8:
			err = take(8)
		case argFrame:
			if err = take(8); err == nil {
				frames = append(frames, [2]int64{int64(le.Uint64(out[at:])), int64(len(out))})
			}
		case argLine:
			err = line()
		case argLine2:
			if err = line(); err == nil {
				err = line()
			}
		case argLen1:
			if err = take(1); err == nil {
				err = take(int64(out[at]))
			}
		case argLen4:
			if err = take(4); err == nil {
				err = take(int64(le.Uint32(out[at:])))
			}
		case argLen4s:
			if err = take(4); err == nil {
				err = take(int64(int32(le.Uint32(out[at:]))))
			}
		case argLen8:
			if err = take(8); err == nil {
				n := le.Uint64(out[at:])
				if n > math.MaxInt64 {
					return nil, fmt.Errorf("pickle: length %d too large", n)
				}
				err = take(int64(n))
			}
		default:
			return nil, fmt.Errorf("pickle: unknown opcode 0x%02x at offset %d", op, at-1)
		}
		if err != nil {
			return nil, err
		}
		if op == '.' {
			break
		}
	}
	for _, fr := range frames {
		if fr[0] < 0 || fr[0] > int64(len(out))-fr[1] {
			return nil, fmt.Errorf("pickle: frame of %d bytes at offset %d runs past the end", fr[0], fr[1])
		}
	}
	return out, nil
}

// unpickle decodes one pickle (as returned by splitPickle) with the given hooks, turning a panic
// inside gopickle into an error.
func unpickle(data []byte, findClass func(module, name string) (any, error),
	persistentLoad func(any) (any, error)) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("pickle: malformed (decoder panicked: %v)", r)
		}
	}()
	u := pickle.NewUnpickler(bytes.NewReader(data))
	u.FindClass = findClass
	u.PersistentLoad = persistentLoad
	v, err = u.Load()
	if err != nil {
		return nil, fmt.Errorf("pickle: %w", err)
	}
	return v, nil
}
