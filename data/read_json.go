package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonFormat reads a JSON file holding a list of objects (lines false; a
// .json file holding JSON lines is accepted too, as Hugging Face's json
// loader does) or a JSON lines file, one object per line (lines true).
type jsonFormat struct{ lines bool }

// sniff reports the layout of a .json file: its first non-space byte ('['
// for a list, '{' for JSON lines) after checking that a '{' file holds more
// than one top-level value.
func sniffJSON(path string) (listMode bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	skipBOM(br)
	first, err := firstNonSpace(br)
	if err == io.EOF {
		return false, &RowError{File: path, Err: ErrEmptyFile}
	}
	if err != nil {
		return false, err
	}
	switch first {
	case '[':
		return true, nil
	case '{':
	default:
		return false, &RowError{File: path, Line: 1, Err: fmt.Errorf("top-level JSON value starts with %q, want a list of objects", first)}
	}
	// One object alone is a mistake (an object instead of a list); several
	// objects are JSON lines.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	br.Reset(f)
	skipBOM(br)
	dec := json.NewDecoder(br)
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return false, jsonSyntaxError(path, 0, err)
	}
	if _, err := dec.Token(); err == io.EOF {
		return false, &RowError{File: path, Line: 1, Col: 1, Err: errors.New("the file holds one JSON object, want a list of objects (or JSON lines, one object per line)")}
	}
	return false, nil
}

func skipBOM(br *bufio.Reader) {
	if b, err := br.Peek(3); err == nil && bytes.Equal(b, []byte{0xEF, 0xBB, 0xBF}) {
		br.Discard(3)
	}
}

func firstNonSpace(br *bufio.Reader) (byte, error) {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		br.UnreadByte()
		return c, nil
	}
}

// lineCounter converts byte offsets of a file into line:column positions,
// reading the file forward once for increasing offsets.
type lineCounter struct {
	path      string
	f         *os.File
	br        *bufio.Reader
	pos       int64 // bytes consumed
	line      int64 // 1-based line at pos
	lineStart int64 // offset of the start of the current line
}

func (lc *lineCounter) at(off int64) (line, col int64) {
	if lc.f == nil || off < lc.pos {
		if lc.f != nil {
			lc.f.Close()
		}
		f, err := os.Open(lc.path)
		if err != nil {
			return 0, 0
		}
		lc.f, lc.br, lc.pos, lc.line, lc.lineStart = f, bufio.NewReader(f), 0, 1, 0
	}
	for lc.pos < off {
		c, err := lc.br.ReadByte()
		if err != nil {
			break
		}
		lc.pos++
		if c == '\n' {
			lc.line++
			lc.lineStart = lc.pos
		}
	}
	return lc.line, off - lc.lineStart + 1
}

// atValue is at for the first byte at or after off that is not JSON
// whitespace or a comma: where the next list element starts.
func (lc *lineCounter) atValue(off int64) (line, col int64) {
	lc.at(off)
	if lc.br == nil {
		return 0, 0
	}
	for {
		b, err := lc.br.Peek(1)
		if err != nil || !strings.ContainsRune(" \t\r\n,", rune(b[0])) {
			break
		}
		lc.at(lc.pos + 1)
	}
	return lc.line, lc.pos - lc.lineStart + 1
}

func (lc *lineCounter) close() {
	if lc.f != nil {
		lc.f.Close()
	}
}

// jsonSyntaxError wraps a decoding error with the position it names, when it
// names one; base is the byte offset of the decoded text in the file.
func jsonSyntaxError(path string, base int64, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		lc := &lineCounter{path: path}
		defer lc.close()
		line, col := lc.at(base + se.Offset)
		return &RowError{File: path, Line: line, Col: col, Err: fmt.Errorf("invalid JSON: %w", err)}
	}
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return &RowError{File: path, Err: errors.New("invalid JSON: unexpected end of file (truncated?)")}
	}
	return &RowError{File: path, Err: fmt.Errorf("invalid JSON: %w", err)}
}

// listRows decodes the elements of a top-level JSON list one at a time,
// calling fn with each element's raw bytes and its byte offset.
func listRows(path string, fn func(row, off int64, raw json.RawMessage) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	bom := int64(0)
	if b, err := br.Peek(3); err == nil && bytes.Equal(b, []byte{0xEF, 0xBB, 0xBF}) {
		br.Discard(3)
		bom = 3
	}
	dec := json.NewDecoder(br)
	if _, err := dec.Token(); err != nil { // '['
		return jsonSyntaxError(path, bom, err)
	}
	row := int64(0)
	for dec.More() {
		off := bom + dec.InputOffset()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return jsonSyntaxError(path, bom, err)
		}
		if err := fn(row, off, raw); err != nil {
			return err
		}
		row++
	}
	if _, err := dec.Token(); err != nil { // ']'
		return jsonSyntaxError(path, bom, err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		lc := &lineCounter{path: path}
		defer lc.close()
		line, col := lc.at(bom + dec.InputOffset())
		if err != nil {
			return jsonSyntaxError(path, bom, err)
		}
		return &RowError{File: path, Line: line, Col: col, Err: fmt.Errorf("unexpected %v after the closing ']'", tok)}
	}
	if row == 0 {
		return &RowError{File: path, Err: ErrEmptyFile}
	}
	return nil
}

// lineRows calls fn with each non-blank line of a JSON lines file.
func lineRows(path string, fn func(row, line int64, raw []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	skipBOM(br)
	row, line := int64(0), int64(0)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			line++
			if t := bytes.TrimSpace(b); len(t) > 0 {
				if err := fn(row, line, t); err != nil {
					return err
				}
				row++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if row == 0 {
		return &RowError{File: path, Err: ErrEmptyFile}
	}
	return nil
}

func (j jsonFormat) listMode(path string) (bool, error) {
	if j.lines {
		return false, nil
	}
	return sniffJSON(path)
}

func (j jsonFormat) count(path string) (int64, error) {
	list, err := j.listMode(path)
	if err != nil {
		return 0, err
	}
	var n int64
	if list {
		err = listRows(path, func(int64, int64, json.RawMessage) error { n++; return nil })
	} else {
		err = lineRows(path, func(int64, int64, []byte) error { n++; return nil })
	}
	return n, err
}

func (j jsonFormat) scan(path string, cols []Column, fn rowFunc) error {
	list, err := j.listMode(path)
	if err != nil {
		return err
	}
	cells := make([]Cell, len(cols))
	if list {
		lc := &lineCounter{path: path}
		defer lc.close()
		return listRows(path, func(row, off int64, raw json.RawMessage) error {
			bad := jsonCells(raw, cols, cells)
			if bad != nil {
				bad.File, bad.Row = path, row+1
				bad.Line, bad.Col = lc.atValue(off)
				return fn(row, cells, bad)
			}
			return fn(row, cells, nil)
		})
	}
	return lineRows(path, func(row, line int64, raw []byte) error {
		var bad *RowError
		if !json.Valid(raw) {
			var v any
			err := json.Unmarshal(raw, &v)
			var se *json.SyntaxError
			col := int64(0)
			if errors.As(err, &se) {
				col = se.Offset
			}
			bad = &RowError{Col: col, Err: fmt.Errorf("invalid JSON: %v", err)}
			for i := range cells {
				cells[i] = Cell{Null: true}
			}
		} else {
			bad = jsonCells(raw, cols, cells)
		}
		if bad != nil {
			bad.File, bad.Row, bad.Line = path, row+1, line
			if bad.Col == 0 {
				bad.Col = 1
			}
			return fn(row, cells, bad)
		}
		return fn(row, cells, nil)
	})
}

// jsonCells fills cells from one row's JSON object; it returns the first
// problem (without the file and row, which the caller adds). Cells that could
// not be read are left null.
func jsonCells(raw []byte, cols []Column, cells []Cell) *RowError {
	for i := range cells {
		cells[i] = Cell{Null: true}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return &RowError{Err: fmt.Errorf("the row is %s, want an object", jsonKind(raw))}
	}
	var first *RowError
	for i, c := range cols {
		cell, err := jsonCell(obj, c)
		if err != nil {
			if first == nil {
				first = &RowError{Column: c.Name, Err: err}
			}
			continue
		}
		cells[i] = cell
	}
	return first
}

// jsonCell reads one (possibly nested) column from a decoded object.
func jsonCell(obj map[string]json.RawMessage, c Column) (Cell, error) {
	parts := strings.Split(c.Name, ".")
	var raw json.RawMessage
	for d, name := range parts {
		v, ok := obj[name]
		if !ok {
			keys := make([]string, 0, len(obj))
			for k := range obj {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return Cell{}, fmt.Errorf("missing (the object has keys %s)", strings.Join(keys, ", "))
		}
		raw = v
		if d < len(parts)-1 {
			if jsonKind(raw) == "null" {
				return Cell{Null: true}, nil
			}
			obj = nil
			if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
				return Cell{}, fmt.Errorf("%s is %s, want an object", strings.Join(parts[:d+1], "."), jsonKind(raw))
			}
		}
	}
	kind := jsonKind(raw)
	switch {
	case kind == "null":
		return Cell{Null: true}, nil
	case c.Kind == String && kind == "a string":
		if !utf8.Valid(raw) {
			return Cell{}, fmt.Errorf("invalid UTF-8 at byte %d of the value", invalidAt(string(raw))-1)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return Cell{}, fmt.Errorf("bad string: %v", err)
		}
		return Cell{Str: s}, nil
	case c.Kind == Number && kind == "a number":
		v, err := strconv.ParseFloat(string(raw), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return Cell{}, fmt.Errorf("bad number %s", raw)
		}
		return Cell{Num: v}, nil
	}
	return Cell{}, fmt.Errorf("%s, want a %s", kind, c.Kind)
}

// jsonKind names the kind of a raw JSON value by its first byte.
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "empty"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func (j jsonFormat) schema(path string) ([]Field, error) {
	list, err := j.listMode(path)
	if err != nil {
		return nil, err
	}
	var first []byte
	stop := errors.New("stop")
	if list {
		err = listRows(path, func(_, _ int64, raw json.RawMessage) error { first = raw; return stop })
	} else {
		err = lineRows(path, func(_, _ int64, raw []byte) error { first = bytes.Clone(raw); return stop })
	}
	if err != nil && err != stop {
		return nil, err
	}
	return objectFields(first), nil
}

// objectFields lists the keys of a JSON object in file order with the kind
// of each value (nested objects as "object{a,b}").
func objectFields(raw []byte) []Field {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return []Field{{Name: "(row)", Type: jsonKind(raw)}}
	}
	var out []Field
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		typ := strings.TrimPrefix(strings.TrimPrefix(jsonKind(v), "a "), "an ")
		if typ == "object" {
			var sub []string
			for _, f := range objectFields(v) {
				sub = append(sub, f.Name)
			}
			typ = "object{" + strings.Join(sub, ",") + "}"
		}
		out = append(out, Field{Name: fmt.Sprint(t), Type: typ})
	}
	return out
}
