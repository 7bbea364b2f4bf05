package data

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// RowError is a problem with a data file, located as precisely as the file
// allows: the file always, then the row, the text position (JSON) and the
// column where they apply.
type RowError struct {
	File string
	// Row is the 1-based row within the file; 0 when the problem is not in a
	// row (an empty file, a bad footer, a top-level object).
	Row int64
	// Line and Col locate the problem in a JSON or JSON lines file (1-based
	// line and byte column; 0 when unknown or not a text file).
	Line, Col int64
	// Column is the data column (dotted path for nested fields); "" when the
	// problem is not in one column.
	Column string
	Err    error
}

func (e *RowError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Row > 0 {
		fmt.Fprintf(&b, ": row %d", e.Row)
	}
	if e.Line > 0 {
		if e.Row > 0 {
			b.WriteString(" (")
		} else {
			b.WriteString(": ")
		}
		fmt.Fprintf(&b, "line %d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
		if e.Row > 0 {
			b.WriteString(")")
		}
	}
	if e.Column != "" {
		fmt.Fprintf(&b, ": column %q", e.Column)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *RowError) Unwrap() error { return e.Err }

// ErrEmptyFile is wrapped by the error for a file with no bytes or no rows.
var ErrEmptyFile = errors.New("empty file (no rows)")

// Field is one column of a file's schema, for display.
type Field struct {
	Name string
	Type string // Arrow type name (Parquet) or JSON kind (JSON files)
}

// rowFunc receives the rows of a file in order. row is the 0-based row within
// the file and cells hold the requested columns in order (the slice is reused
// between calls). bad is a *RowError when the row is malformed (a cell of the
// wrong type, invalid UTF-8, a missing key, a JSON lines syntax error); the
// caller decides whether to stop (return it) or count it and go on.
type rowFunc func(row int64, cells []Cell, bad error) error

// format is one file format's reader.
type format interface {
	// count returns the number of rows.
	count(path string) (int64, error)
	// scan streams the rows, reading only the requested columns.
	scan(path string, cols []Column, fn rowFunc) error
	// schema describes the columns.
	schema(path string) ([]Field, error)
}

// formatOf picks the reader by file extension; ok is false for files that are
// not data files.
func formatOf(path string) (format, bool) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".parquet":
		return parquetFormat{}, true
	case ".json":
		return jsonFormat{lines: false}, true
	case ".jsonl", ".ndjson":
		return jsonFormat{lines: true}, true
	}
	return nil, false
}

// CountRows returns the number of rows of a Parquet, JSON or JSON lines file.
func CountRows(path string) (int64, error) {
	f, ok := formatOf(path)
	if !ok {
		return 0, &RowError{File: path, Err: errors.New("unknown data file type (want .parquet, .json, .jsonl)")}
	}
	return f.count(path)
}

// ReadSchema describes the columns of a data file.
func ReadSchema(path string) ([]Field, error) {
	f, ok := formatOf(path)
	if !ok {
		return nil, &RowError{File: path, Err: errors.New("unknown data file type (want .parquet, .json, .jsonl)")}
	}
	return f.schema(path)
}

// ScanRows streams the rows of a data file, giving fn the requested columns
// of each row in order. It stops at the first error fn returns. Malformed
// rows are passed to fn with a non-nil bad error; structural problems (an
// unreadable or empty file, a missing column, a column of the wrong type)
// end the scan with a *RowError.
func ScanRows(path string, cols []Column, fn func(row int64, cells []Cell, bad error) error) error {
	f, ok := formatOf(path)
	if !ok {
		return &RowError{File: path, Err: errors.New("unknown data file type (want .parquet, .json, .jsonl)")}
	}
	return f.scan(path, cols, fn)
}

// ReadSamples reads a whole file through an adapter, stopping at the first
// malformed row; a row with a null cell comes back as a zero Sample. It is
// meant for small files and tests; training streams through Build.
func ReadSamples(path string, a *Adapter) ([]Sample, error) {
	var out []Sample
	err := ScanRows(path, a.Columns, func(row int64, cells []Cell, bad error) error {
		if bad != nil {
			return bad
		}
		for _, c := range cells {
			if c.Null {
				out = append(out, Sample{})
				return nil
			}
		}
		s, err := a.Convert(cells)
		if err != nil {
			return &RowError{File: path, Row: row + 1, Err: err}
		}
		out = append(out, s)
		return nil
	})
	return out, err
}
