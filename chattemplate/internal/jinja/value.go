package jinja

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Value is a template value with Python semantics. Its dynamic type is one of:
//
//	Undefined, NoneType, bool, int, float64, string, *List, *Dict,
//	*Namespace, *loopValue, *Callable
//
// Integers are Go ints (64-bit; Python's big integers are not modelled).
// Lists and dicts are shared by reference as in Python; the sandbox keeps
// templates from mutating them, except through namespaces.
type Value any

// NoneType is Python's None.
type NoneType struct{}

// None is the None value.
var None Value = NoneType{}

// Undefined is jinja2's default Undefined: it renders as "", is false, iterates
// as empty and has length 0; any other use (attribute or item access,
// arithmetic, comparison by order) is an error carrying its message.
type Undefined struct {
	msg      string // the error message
	security bool   // an attribute the immutable sandbox refuses (dict.update): a SecurityError
}

func undefinedName(name string) Undefined {
	return Undefined{msg: fmt.Sprintf("%s is undefined", pyRepr(name))}
}

// undefinedAttr is jinja2's Undefined(obj=obj, name=name).
func undefinedAttr(obj Value, name Value) Undefined {
	if s, ok := name.(string); ok {
		return Undefined{msg: fmt.Sprintf("%s has no attribute %s", pyRepr(typeRepr(obj)), pyRepr(s))}
	}
	return Undefined{msg: fmt.Sprintf("%s has no element %s", typeRepr(obj), pyRepr(name))}
}

func (u Undefined) err() error {
	if u.security {
		return &SecurityError{Msg: u.msg}
	}
	return &UndefinedError{Msg: u.msg}
}

// unsafeAttr is jinja2's unsafe_undefined for a method of obj the immutable
// sandbox refuses.
func unsafeAttr(obj Value, name string) Undefined {
	return Undefined{msg: fmt.Sprintf("access to attribute %s of %s object is unsafe.", pyRepr(name), pyRepr(typeName(obj))), security: true}
}

// UndefinedError is jinja2's UndefinedError: an undefined value was used in a
// way that needs a value.
type UndefinedError struct{ Msg string }

func (e *UndefinedError) Error() string { return e.Msg }

// List is a Python list, or a tuple or another sequence by Kind.
type List struct {
	Items []Value
	Kind  listKind
}

type listKind uint8

const (
	kindList listKind = iota
	kindTuple
	kindDictKeys
	kindDictValues
	kindDictItems
)

// NewList returns a Python list of items.
func NewList(items ...Value) *List { return &List{Items: items} }

func newTuple(items ...Value) *List { return &List{Items: items, Kind: kindTuple} }

// Dict is a Python dict: keys in insertion order.
type Dict struct {
	keys  []Value
	vals  []Value
	index map[hashKey]int
}

type hashKey struct {
	kind byte // 's' string, 'n' number (int, bool, integral float), 'f' other float, 'N' None
	s    string
	n    int
	f    float64
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{index: map[hashKey]int{}} }

func keyOf(k Value) (hashKey, error) {
	switch k := k.(type) {
	case string:
		return hashKey{kind: 's', s: k}, nil
	case int:
		return hashKey{kind: 'n', n: k}, nil
	case bool:
		if k {
			return hashKey{kind: 'n', n: 1}, nil
		}
		return hashKey{kind: 'n'}, nil
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return hashKey{kind: 'n', n: int(k)}, nil
		}
		return hashKey{kind: 'f', f: k}, nil
	case NoneType:
		return hashKey{kind: 'N'}, nil
	case *List:
		if k.Kind == kindTuple {
			parts := make([]string, len(k.Items))
			for i, it := range k.Items {
				h, err := keyOf(it)
				if err != nil {
					return hashKey{}, err
				}
				parts[i] = fmt.Sprintf("%c%s|%d|%v", h.kind, h.s, h.n, h.f)
			}
			return hashKey{kind: 't', s: strings.Join(parts, "\x00")}, nil
		}
	}
	return hashKey{}, fmt.Errorf("unhashable type: %s", pyRepr(typeName(k)))
}

// Set sets d[k] = v; a new key goes last, an existing one keeps its place and
// its first spelling (as in Python, where 1 and True are the same key).
func (d *Dict) Set(k, v Value) error {
	h, err := keyOf(k)
	if err != nil {
		return err
	}
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// Get returns d[k].
func (d *Dict) Get(k Value) (Value, bool) {
	h, err := keyOf(k)
	if err != nil {
		return nil, false
	}
	i, ok := d.index[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Len is len(d).
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in order.
func (d *Dict) Keys() []Value { return d.keys }

// Namespace is jinja2's namespace(): the one object a template may assign
// attributes on.
type Namespace struct{ attrs *Dict }

// Callable is a function value: a global, a filter-like builtin, a bound
// method or a macro.
type Callable struct {
	Name string
	Fn   func(ev *evaluator, args []Value, kwargs *Dict) (Value, error)
}

// SecurityError is jinja2's SecurityError (a refused attribute in the sandbox).
type SecurityError struct{ Msg string }

func (e *SecurityError) Error() string { return e.Msg }

// TypeError is an operation on values of the wrong type, as Python's TypeError.
type TypeError struct{ Msg string }

func (e *TypeError) Error() string { return e.Msg }

func typeErrorf(format string, a ...any) error { return &TypeError{Msg: fmt.Sprintf(format, a...)} }

// typeName is Python's type(v).__name__.
func typeName(v Value) string {
	switch v := v.(type) {
	case Undefined:
		return "Undefined"
	case NoneType:
		return "NoneType"
	case bool:
		return "bool"
	case int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		switch v.Kind {
		case kindTuple:
			return "tuple"
		case kindDictKeys:
			return "dict_keys"
		case kindDictValues:
			return "dict_values"
		case kindDictItems:
			return "dict_items"
		}
		return "list"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *loopValue:
		return "LoopContext"
	case *Callable:
		return "function"
	}
	return fmt.Sprintf("%T", v)
}

// typeRepr is jinja2's object_type_repr: "None", or "<type> object".
func typeRepr(v Value) string {
	if _, ok := v.(NoneType); ok {
		return "None"
	}
	if _, ok := v.(*Namespace); ok {
		return "jinja2.utils.Namespace object"
	}
	return typeName(v) + " object"
}

// truth is Python's bool(v).
func truth(v Value) bool {
	switch v := v.(type) {
	case Undefined, NoneType:
		return false
	case bool:
		return v
	case int:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case *List:
		return len(v.Items) > 0
	case *Dict:
		return v.Len() > 0
	}
	return true
}

// str is Python's str(v) as jinja2 prints it.
func str(v Value) string {
	switch v := v.(type) {
	case string:
		return v
	case Undefined:
		return ""
	}
	return pyRepr(v)
}

// pyRepr is Python's repr(v).
func pyRepr(v Value) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v Value) {
	switch v := v.(type) {
	case Undefined:
		b.WriteString("Undefined")
	case NoneType:
		b.WriteString("None")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int:
		b.WriteString(strconv.Itoa(v))
	case float64:
		b.WriteString(pyFloat(v))
	case string:
		writeStrRepr(b, v)
	case *List:
		open, close := "[", "]"
		switch v.Kind {
		case kindTuple:
			open, close = "(", ")"
		case kindDictKeys:
			open, close = "dict_keys([", "])"
		case kindDictValues:
			open, close = "dict_values([", "])"
		case kindDictItems:
			open, close = "dict_items([", "])"
		}
		b.WriteString(open)
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, it)
		}
		if v.Kind == kindTuple && len(v.Items) == 1 {
			b.WriteString(",")
		}
		b.WriteString(close)
	case *Dict:
		b.WriteString("{")
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k)
			b.WriteString(": ")
			writeRepr(b, v.vals[i])
		}
		b.WriteString("}")
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, v.attrs)
		b.WriteString(">")
	case *loopValue:
		fmt.Fprintf(b, "<LoopContext %d/%d>", v.index+1, len(v.items))
	case *Callable:
		fmt.Fprintf(b, "<function %s>", v.Name)
	default:
		fmt.Fprintf(b, "%v", v)
	}
}

// writeStrRepr writes Python's repr of a str: single quotes unless the text
// has a single quote and no double quote; \\, the quote, \t \n \r escaped;
// other non-printable characters as \xhh, \uhhhh or \Uhhhhhhhh.
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r == utf8.RuneError || !unicode.IsPrint(r):
			switch {
			case r < 0x100:
				fmt.Fprintf(b, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}

// pyFloat is Python's repr(float): the shortest text that reads back to f,
// in positional notation for exponents -4..15 (with ".0" when integral),
// else scientific with a sign and at least two exponent digits.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	ei := strings.IndexByte(s, 'e')
	digits := strings.Replace(s[:ei], ".", "", 1)
	exp, _ := strconv.Atoi(s[ei+1:])
	var out string
	if exp < -4 || exp >= 16 {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		out += fmt.Sprintf("e%s%02d", sign, exp)
	} else if exp < 0 {
		out = "0." + strings.Repeat("0", -exp-1) + digits
	} else if len(digits) <= exp+1 {
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	} else {
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		out = "-" + out
	}
	return out
}

// isPySpace is Python's str.isspace for one character (also the \s of re).
func isPySpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// number returns v as a float64 and whether it is a number (bool included).
func number(v Value) (float64, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case int:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

// intOf returns v as an int when it is an int or a bool.
func intOf(v Value) (int, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case int:
		return v, true
	}
	return 0, false
}

// equal is Python's ==.
func equal(a, b Value) bool {
	switch a := a.(type) {
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case NoneType:
		_, ok := b.(NoneType)
		return ok
	case string:
		s, ok := b.(string)
		return ok && a == s
	case *List:
		l, ok := b.(*List)
		if !ok || (a.Kind == kindTuple) != (l.Kind == kindTuple) || len(a.Items) != len(l.Items) {
			return false
		}
		for i := range a.Items {
			if !equal(a.Items[i], l.Items[i]) {
				return false
			}
		}
		return true
	case *Dict:
		d, ok := b.(*Dict)
		if !ok || a.Len() != d.Len() {
			return false
		}
		for i, k := range a.keys {
			v, ok := d.Get(k)
			if !ok || !equal(a.vals[i], v) {
				return false
			}
		}
		return true
	}
	if x, ok := intOf(a); ok {
		if y, ok := intOf(b); ok {
			return x == y
		}
	}
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	return a == b
}

// compare is Python's ordering (<): -1, 0 or 1, or a TypeError naming op.
func compare(op string, a, b Value) (int, error) {
	if u, ok := a.(Undefined); ok {
		return 0, u.err()
	}
	if u, ok := b.(Undefined); ok {
		return 0, u.err()
	}
	if x, ok := intOf(a); ok {
		if y, ok := intOf(b); ok {
			return cmpOrdered(x, y), nil
		}
	}
	if x, ok := number(a); ok {
		if y, ok := number(b); ok {
			return cmpOrdered(x, y), nil
		}
	}
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	}
	if x, ok := a.(*List); ok {
		if y, ok := b.(*List); ok && (x.Kind == kindTuple) == (y.Kind == kindTuple) {
			for i := 0; i < len(x.Items) && i < len(y.Items); i++ {
				if equal(x.Items[i], y.Items[i]) {
					continue
				}
				return compare(op, x.Items[i], y.Items[i])
			}
			return cmpOrdered(len(x.Items), len(y.Items)), nil
		}
	}
	return 0, typeErrorf("'%s' not supported between instances of %s and %s", op, pyRepr(typeName(a)), pyRepr(typeName(b)))
}

func cmpOrdered[T int | float64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// sortValues sorts vs stably by key (Python's sorted).
func sortValues(vs []Value, key func(Value) Value, reverse bool) error {
	var err error
	keys := make([]Value, len(vs))
	for i, v := range vs {
		keys[i] = key(v)
	}
	idx := make([]int, len(vs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, b = b, a
		}
		c, e := compare("<", a, b)
		if e != nil && err == nil {
			err = e
		}
		return c < 0
	})
	out := make([]Value, len(vs))
	for i, k := range idx {
		out[i] = vs[k]
	}
	copy(vs, out)
	return err
}

// iterate returns the items a for loop over v visits: a list's or tuple's
// items, a dict's keys, a string's characters; Undefined is empty.
func iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case Undefined:
		return nil, nil
	case *List:
		return v.Items, nil
	case *Dict:
		return append([]Value(nil), v.keys...), nil
	case string:
		out := make([]Value, 0, len(v))
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case *Namespace:
		return nil, typeErrorf("'Namespace' object is not iterable")
	}
	return nil, typeErrorf("%s object is not iterable", pyRepr(typeName(v)))
}

// length is Python's len(v) (0 for Undefined).
func length(v Value) (int, error) {
	switch v := v.(type) {
	case Undefined:
		return 0, nil
	case string:
		return utf8.RuneCountInString(v), nil
	case *List:
		return len(v.Items), nil
	case *Dict:
		return v.Len(), nil
	}
	return 0, typeErrorf("object of type %s has no len()", pyRepr(typeName(v)))
}
