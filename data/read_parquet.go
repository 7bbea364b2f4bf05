package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// parquetBatchRows is the number of rows per Arrow record batch read from a
// Parquet file: the unit of streaming.
const parquetBatchRows = 4096

type parquetFormat struct{}

// openParquet opens a Parquet file for Arrow reading. The caller closes the
// returned file.Reader (which closes the os.File).
func openParquet(path string) (*file.Reader, *pqarrow.FileReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if st.Size() == 0 {
		f.Close()
		return nil, nil, &RowError{File: path, Err: ErrEmptyFile}
	}
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.BufferedStreamEnabled = true
	pr, err := file.NewParquetReader(f, file.WithReadProps(props))
	if err != nil {
		f.Close()
		return nil, nil, &RowError{File: path, Err: fmt.Errorf("not a readable Parquet file (truncated or corrupt?): %w", err)}
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: parquetBatchRows}, memory.DefaultAllocator)
	if err != nil {
		pr.Close()
		return nil, nil, &RowError{File: path, Err: fmt.Errorf("Parquet schema: %w", err)}
	}
	return pr, fr, nil
}

// recoverCorrupt turns a panic inside the Arrow/Parquet decoder (which it
// raises on some corrupt inputs) into an error naming the file.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		*err = &RowError{File: path, Err: fmt.Errorf("corrupt Parquet data: %v", r)}
	}
}

func (parquetFormat) count(path string) (n int64, err error) {
	defer recoverCorrupt(path, &err)
	pr, _, err := openParquet(path)
	if err != nil {
		return 0, err
	}
	defer pr.Close()
	n = pr.NumRows()
	if n == 0 {
		return 0, &RowError{File: path, Err: ErrEmptyFile}
	}
	return n, nil
}

func (parquetFormat) schema(path string) (fields []Field, err error) {
	defer recoverCorrupt(path, &err)
	pr, fr, err := openParquet(path)
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	sc, err := fr.Schema()
	if err != nil {
		return nil, &RowError{File: path, Err: fmt.Errorf("Parquet schema: %w", err)}
	}
	for _, f := range sc.Fields() {
		fields = append(fields, Field{Name: f.Name, Type: f.Type.String()})
	}
	return fields, nil
}

// kindAccepts reports whether an Arrow type can hold cells of kind k.
func kindAccepts(k Kind, t arrow.DataType) bool {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING:
		return k == String
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64:
		return k == Number
	}
	return false
}

// parquetLeaves finds the manifest node of a dotted column path and returns
// the leaf column indices under it and its Arrow type.
func parquetLeaves(fr *pqarrow.FileReader, path string) ([]int, arrow.DataType, error) {
	parts := strings.Split(path, ".")
	fields := fr.Manifest.Fields
	var node *pqarrow.SchemaField
	for depth, name := range parts {
		node = nil
		for i := range fields {
			if fields[i].Field.Name == name {
				node = &fields[i]
				break
			}
		}
		if node == nil {
			var have []string
			for _, f := range fields {
				have = append(have, f.Field.Name)
			}
			where := "the file"
			if depth > 0 {
				where = "struct " + strings.Join(parts[:depth], ".")
			}
			return nil, nil, fmt.Errorf("column not found in %s (it has %s)", where, strings.Join(have, ", "))
		}
		if depth < len(parts)-1 && node.Field.Type.ID() != arrow.STRUCT {
			return nil, nil, fmt.Errorf("%s is a %s, not a struct", strings.Join(parts[:depth+1], "."), node.Field.Type)
		}
		fields = node.Children
	}
	var leaves []int
	var walk func(f *pqarrow.SchemaField)
	walk = func(f *pqarrow.SchemaField) {
		if f.IsLeaf() {
			leaves = append(leaves, f.ColIndex)
		}
		for i := range f.Children {
			walk(&f.Children[i])
		}
	}
	walk(node)
	return leaves, node.Field.Type, nil
}

// columnOf walks a dotted path through a record's struct columns. parentNull
// reports, per row, whether an enclosing struct is null.
func columnOf(rec arrow.Record, path string) (arr arrow.Array, parents []arrow.Array, err error) {
	parts := strings.Split(path, ".")
	idx := rec.Schema().FieldIndices(parts[0])
	if len(idx) == 0 {
		return nil, nil, errors.New("column missing from the record batch")
	}
	arr = rec.Column(idx[0])
	for _, name := range parts[1:] {
		st, ok := arr.(*array.Struct)
		if !ok {
			return nil, nil, fmt.Errorf("%s is not a struct", arr.DataType())
		}
		i, ok := st.DataType().(*arrow.StructType).FieldIdx(name)
		if !ok {
			return nil, nil, fmt.Errorf("struct field %q missing from the record batch", name)
		}
		parents = append(parents, arr)
		arr = st.Field(i)
	}
	return arr, parents, nil
}

// arrowCell reads row i of arr as a Cell of kind k.
func arrowCell(arr arrow.Array, i int, k Kind) (Cell, error) {
	if arr.IsNull(i) {
		return Cell{Null: true}, nil
	}
	var s string
	switch a := arr.(type) {
	case *array.String:
		s = a.Value(i)
	case *array.LargeString:
		s = a.Value(i)
	case *array.Int8:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Int16:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Int32:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Int64:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Uint8:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Uint16:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Uint32:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Uint64:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Float16:
		return Cell{Num: float64(a.Value(i).Float32())}, nil
	case *array.Float32:
		return Cell{Num: float64(a.Value(i))}, nil
	case *array.Float64:
		return Cell{Num: a.Value(i)}, nil
	default:
		return Cell{}, fmt.Errorf("a %s cell, want a %s", arr.DataType(), k)
	}
	if !utf8.ValidString(s) {
		return Cell{}, fmt.Errorf("invalid UTF-8 at byte %d", invalidAt(s))
	}
	return Cell{Str: s}, nil
}

// invalidAt returns the byte offset of the first invalid UTF-8 sequence.
func invalidAt(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return len(s)
}

func (parquetFormat) scan(path string, cols []Column, fn rowFunc) (err error) {
	defer recoverCorrupt(path, &err)
	pr, fr, err := openParquet(path)
	if err != nil {
		return err
	}
	defer pr.Close()
	if pr.NumRows() == 0 {
		return &RowError{File: path, Err: ErrEmptyFile}
	}
	var leaves []int
	seen := map[int]bool{}
	for _, c := range cols {
		ls, typ, err := parquetLeaves(fr, c.Name)
		if err != nil { // every row lacks it; name the first
			return &RowError{File: path, Row: 1, Column: c.Name, Err: err}
		}
		if !kindAccepts(c.Kind, typ) {
			return &RowError{File: path, Row: 1, Column: c.Name, Err: fmt.Errorf("a %s cell, want a %s (the column's type is %s)", typ, c.Kind, typ)}
		}
		for _, l := range ls {
			if !seen[l] {
				seen[l] = true
				leaves = append(leaves, l)
			}
		}
	}
	sort.Ints(leaves)
	rr, err := fr.GetRecordReader(context.Background(), leaves, nil)
	if err != nil {
		return &RowError{File: path, Err: fmt.Errorf("reading Parquet: %w", err)}
	}
	defer rr.Release()
	cells := make([]Cell, len(cols))
	arrs := make([]arrow.Array, len(cols))
	parents := make([][]arrow.Array, len(cols))
	row := int64(0)
	for rr.Next() {
		rec := rr.Record()
		for c, col := range cols {
			arrs[c], parents[c], err = columnOf(rec, col.Name)
			if err != nil {
				return &RowError{File: path, Row: row + 1, Column: col.Name, Err: err}
			}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			var bad error
			for c, col := range cols {
				null := false
				for _, p := range parents[c] {
					null = null || p.IsNull(i)
				}
				if null {
					cells[c] = Cell{Null: true}
					continue
				}
				cell, cerr := arrowCell(arrs[c], i, col.Kind)
				if cerr != nil && bad == nil {
					bad = &RowError{File: path, Row: row + 1, Column: col.Name, Err: cerr}
				}
				cells[c] = cell
			}
			if err := fn(row, cells, bad); err != nil {
				return err
			}
			row++
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return &RowError{File: path, Row: row + 1, Err: fmt.Errorf("reading Parquet: %w", err)}
	}
	if row != pr.NumRows() {
		return &RowError{File: path, Row: row + 1, Err: fmt.Errorf("read %d rows, the footer says %d", row, pr.NumRows())}
	}
	return nil
}
