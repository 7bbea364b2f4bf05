package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// filterToJSON is the tojson filter as transformers installs it:
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys): keys in insertion order, ", " and ": " separators
// ("," and ": " with an indent), no HTML escaping.
func filterToJSON(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	a, err := bind("tojson", args, kw, []string{"ensure_ascii", "indent", "separators", "sort_keys"}, false, None, None, false)
	if err != nil {
		return nil, err
	}
	e := jsonEncoder{ascii: truth(a[0]), sortKeys: truth(a[3]), itemSep: ", ", keySep: ": "}
	switch ind := a[1].(type) {
	case NoneType:
	case string:
		e.indent, e.indented = ind, true
	default:
		n, ok := intOf(ind)
		if !ok {
			return nil, typeErrorf("indent must be an int or a str")
		}
		e.indent, e.indented = strings.Repeat(" ", max(n, 0)), true
		e.itemSep = ","
	}
	if _, ok := a[1].(string); ok {
		e.itemSep = ","
	}
	if seps, ok := a[2].(*List); ok {
		if len(seps.Items) != 2 {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		e.itemSep, e.keySep = str(seps.Items[0]), str(seps.Items[1])
	}
	var b strings.Builder
	if err := e.encode(&b, v, 0); err != nil {
		return nil, err
	}
	return b.String(), nil
}

type jsonEncoder struct {
	ascii, sortKeys bool
	indented        bool
	indent          string
	itemSep, keySep string
}

func (e *jsonEncoder) newline(b *strings.Builder, level int) {
	if e.indented {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat(e.indent, level))
	}
}

func (e *jsonEncoder) encode(b *strings.Builder, v Value, level int) error {
	switch x := v.(type) {
	case NoneType:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case float64:
		b.WriteString(jsonFloat(x))
	case string:
		e.str(b, x)
	case *List:
		if len(x.Items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range x.Items {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, level+1)
			if err := e.encode(b, it, level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if e.sortKeys {
			var err error
			sort.SliceStable(order, func(i, j int) bool {
				c, cerr := compare("<", x.keys[order[i]], x.keys[order[j]])
				if cerr != nil && err == nil {
					err = cerr
				}
				return c < 0
			})
			if err != nil {
				return err
			}
		}
		b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, level+1)
			switch k := x.keys[i].(type) {
			case string:
				e.str(b, k)
			case NoneType:
				b.WriteString(`"null"`)
			case bool:
				if k {
					b.WriteString(`"true"`)
				} else {
					b.WriteString(`"false"`)
				}
			case int:
				b.WriteString(`"` + strconv.Itoa(k) + `"`)
			case float64:
				b.WriteString(`"` + jsonFloat(k) + `"`)
			default:
				return typeErrorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			b.WriteString(e.keySep)
			if err := e.encode(b, x.vals[i], level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte('}')
	default:
		return typeErrorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return pyFloat(f)
}

// str writes a JSON string as Python's json module does.
func (e *jsonEncoder) str(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (e.ascii && r >= 0x7f):
				if r > 0xffff {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// FromJSON decodes JSON into template values as Python's json.loads does:
// objects become dicts with their keys in document order, integers ints,
// other numbers floats.
func FromJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSON(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid JSON: data after the value")
	}
	return v, nil
}

func decodeJSON(dec *json.Decoder) (Value, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '[':
			l := NewList()
			for dec.More() {
				v, err := decodeJSON(dec)
				if err != nil {
					return nil, err
				}
				l.Items = append(l.Items, v)
			}
			_, err := dec.Token()
			return l, err
		case '{':
			d := NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeJSON(dec)
				if err != nil {
					return nil, err
				}
				d.Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return int(n), nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !strings.Contains(err.Error(), "range") {
			return nil, err
		}
		return f, nil
	case string:
		return t, nil
	case bool:
		return t, nil
	case nil:
		return None, nil
	}
	return nil, fmt.Errorf("invalid JSON token %v", t)
}

// FromGo converts a Go value to a template value: nil → None; bools, integers,
// floats and strings; slices → lists; maps with string keys → dicts with the
// keys sorted (Go maps have no order: pass a *Dict or JSON for an order);
// json.RawMessage → FromJSON; Values pass through.
func FromGo(v any) (Value, error) {
	switch x := v.(type) {
	case nil:
		return None, nil
	case Value:
		switch x.(type) {
		case Undefined, NoneType, bool, int, float64, string, *List, *Dict, *Namespace, *Callable:
			return x, nil
		}
	}
	if raw, ok := v.(json.RawMessage); ok {
		return FromJSON(raw)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int(rv.Uint()), nil
	case reflect.Float32, reflect.Float64:
		return rv.Float(), nil
	case reflect.String:
		return rv.String(), nil
	case reflect.Slice, reflect.Array:
		l := NewList()
		for i := 0; i < rv.Len(); i++ {
			it, err := FromGo(rv.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			l.Items = append(l.Items, it)
		}
		return l, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key type %s: only string keys are supported", rv.Type().Key())
		}
		keys := rv.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		d := NewDict()
		for _, k := range keys {
			it, err := FromGo(rv.MapIndex(k).Interface())
			if err != nil {
				return nil, err
			}
			d.Set(k.String(), it)
		}
		return d, nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return None, nil
		}
		return FromGo(rv.Elem().Interface())
	}
	return nil, fmt.Errorf("cannot use a %T as a template value", v)
}
