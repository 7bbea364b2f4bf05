package jinja

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// bind matches call arguments to params as Python does; defaults belong to
// the last len(defaults) params. A param without a value or default is an error.
func bind(fname string, args []Value, kw *Dict, params []string, defaults ...Value) ([]Value, error) {
	if len(args) > len(params) {
		return nil, typeErrorf("%s() takes at most %d arguments (%d given)", fname, len(params), len(args))
	}
	out := make([]Value, len(params))
	set := make([]bool, len(params))
	for i, a := range args {
		out[i], set[i] = a, true
	}
	if kw != nil {
		for i, k := range kw.keys {
			name, _ := k.(string)
			found := false
			for j, p := range params {
				if p == name {
					if set[j] {
						return nil, typeErrorf("%s() got multiple values for argument %s", fname, pyRepr(name))
					}
					out[j], set[j], found = kw.vals[i], true, true
				}
			}
			if !found {
				return nil, typeErrorf("%s() got an unexpected keyword argument %s", fname, pyRepr(name))
			}
		}
	}
	first := len(params) - len(defaults)
	for j := range params {
		if !set[j] {
			if j < first {
				return nil, typeErrorf("%s() missing required argument %s", fname, pyRepr(params[j]))
			}
			out[j] = defaults[j-first]
		}
	}
	return out, nil
}

func globals() map[string]Value {
	return map[string]Value{
		"range": &Callable{Name: "range", Fn: func(_ *evaluator, args []Value, kw *Dict) (Value, error) {
			if kw.Len() > 0 || len(args) == 0 || len(args) > 3 {
				return nil, typeErrorf("range expected 1 to 3 integer arguments")
			}
			var n [3]int
			for i, a := range args {
				v, ok := intOf(a)
				if !ok {
					return nil, typeErrorf("%s object cannot be interpreted as an integer", pyRepr(typeName(a)))
				}
				n[i] = v
			}
			start, stop, step := 0, n[0], 1
			if len(args) >= 2 {
				start, stop = n[0], n[1]
			}
			if len(args) == 3 {
				step = n[2]
			}
			if step == 0 {
				return nil, fmt.Errorf("range() arg 3 must not be zero")
			}
			var out []Value
			for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
				if len(out) >= 100000 {
					return nil, fmt.Errorf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).")
				}
				out = append(out, i)
			}
			return NewList(out...), nil
		}},
		"dict": &Callable{Name: "dict", Fn: func(_ *evaluator, args []Value, kw *Dict) (Value, error) {
			return mergeMappings("dict", args, kw)
		}},
		"namespace": &Callable{Name: "namespace", Fn: func(_ *evaluator, args []Value, kw *Dict) (Value, error) {
			d, err := mergeMappings("namespace", args, kw)
			if err != nil {
				return nil, err
			}
			return &Namespace{attrs: d}, nil
		}},
		"raise_exception": &Callable{Name: "raise_exception", Fn: func(_ *evaluator, args []Value, kw *Dict) (Value, error) {
			a, err := bind("raise_exception", args, kw, []string{"message"})
			if err != nil {
				return nil, err
			}
			return nil, &TemplateError{Msg: str(a[0])}
		}},
		"strftime_now": &Callable{Name: "strftime_now", Fn: func(ev *evaluator, args []Value, kw *Dict) (Value, error) {
			a, err := bind("strftime_now", args, kw, []string{"format"})
			if err != nil {
				return nil, err
			}
			f, ok := a[0].(string)
			if !ok {
				return nil, typeErrorf("strftime() argument 1 must be str, not %s", typeName(a[0]))
			}
			return strftime(ev.now(), f), nil
		}},
	}
}

type filterFunc func(ev *evaluator, v Value, args []Value, kw *Dict) (Value, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			switch x := v.(type) {
			case bool, int:
				i, _ := intOf(x)
				if i < 0 {
					i = -i
				}
				return i, nil
			case float64:
				return math.Abs(x), nil
			}
			return nil, typeErrorf("bad operand type for abs(): %s", pyRepr(typeName(v)))
		},
		"attr": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			a, err := bind("attr", args, kw, []string{"name"})
			if err != nil {
				return nil, err
			}
			name := str(a[0])
			if m, ok := method(v, name); ok {
				return m, nil
			}
			if ns, ok := v.(*Namespace); ok {
				if x, ok := ns.attrs.Get(name); ok {
					return x, nil
				}
			}
			if l, ok := v.(*loopValue); ok {
				if x, ok := l.attr(name); ok {
					return x, nil
				}
			}
			return undefinedAttr(v, name), nil
		},
		"capitalize": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			return pyCapitalize(str(v)), nil
		},
		"count":   filterLength,
		"length":  filterLength,
		"default": filterDefault,
		"d":       filterDefault,
		"dictsort": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			a, err := bind("dictsort", args, kw, []string{"case_sensitive", "by", "reverse"}, false, "key", false)
			if err != nil {
				return nil, err
			}
			d, ok := v.(*Dict)
			if !ok {
				return nil, typeErrorf("dictsort: %s object has no attribute 'items'", pyRepr(typeName(v)))
			}
			pos := 0
			switch a[1] {
			case "key":
			case "value":
				pos = 1
			default:
				return nil, fmt.Errorf("You can only sort by either 'key' or 'value'")
			}
			items := dictItems(d).Items
			err = sortValues(items, func(it Value) Value {
				return ignoreCase(it.(*List).Items[pos], truth(a[0]))
			}, truth(a[2]))
			return NewList(items...), err
		},
		"escape": filterEscape,
		"e":      filterEscape,
		"first":  func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return firstLast(v, true) },
		"last":   func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return firstLast(v, false) },
		"float":  filterFloat,
		"int":    filterInt,
		"indent": filterIndent,
		"items":  filterItems,
		"join":   filterJoin,
		"list":   func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return toList(v) },
		"lower":  func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return pyLower(str(v)), nil },
		"upper":  func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return pyUpper(str(v)), nil },
		"map":    filterMap,
		"max":    func(ev *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return minMax(v, args, kw, "max") },
		"min":    func(ev *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return minMax(v, args, kw, "min") },
		"select": func(ev *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			return selectReject(ev, v, args, kw, false, true)
		},
		"reject": func(ev *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			return selectReject(ev, v, args, kw, false, false)
		},
		"selectattr": func(ev *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			return selectReject(ev, v, args, kw, true, true)
		},
		"rejectattr": func(ev *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			return selectReject(ev, v, args, kw, true, false)
		},
		"replace": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			a, err := bind("replace", args, kw, []string{"old", "new", "count"}, None)
			if err != nil {
				return nil, err
			}
			n := -1
			if c, ok := intOf(a[2]); ok {
				n = c
			}
			return pyReplace(str(v), str(a[0]), str(a[1]), n), nil
		},
		"reverse": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			if s, ok := v.(string); ok {
				rs := []rune(s)
				for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
					rs[i], rs[j] = rs[j], rs[i]
				}
				return string(rs), nil
			}
			items, err := iterate(v)
			if err != nil {
				return nil, typeErrorf("argument to reverse() must be a sequence")
			}
			out := make([]Value, len(items))
			for i, it := range items {
				out[len(items)-1-i] = it
			}
			return NewList(out...), nil
		},
		"round":  filterRound,
		"safe":   func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return str(v), nil },
		"string": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) { return str(v), nil },
		"sort": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			a, err := bind("sort", args, kw, []string{"reverse", "case_sensitive", "attribute"}, false, false, None)
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			items = append([]Value(nil), items...)
			get := attrGetter(a[2], nil)
			var kerr error
			err = sortValues(items, func(it Value) Value {
				k, e := get(it)
				if e != nil && kerr == nil {
					kerr = e
				}
				return ignoreCase(k, truth(a[1]))
			}, truth(a[0]))
			if kerr != nil {
				return nil, kerr
			}
			return NewList(items...), err
		},
		"sum": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			a, err := bind("sum", args, kw, []string{"attribute", "start"}, None, 0)
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			get := attrGetter(a[0], nil)
			total := a[1]
			for _, it := range items {
				x, err := get(it)
				if err != nil {
					return nil, err
				}
				if total, err = binary("+", total, x); err != nil {
					return nil, err
				}
			}
			return total, nil
		},
		"title": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			// jinja2's do_title: each piece after [-\s({\[<]+ gets its first
			// character upper-cased and the rest lower-cased.
			parts := wordBeginning.Split(str(v), -1)
			seps := wordBeginning.FindAllString(str(v), -1)
			var b strings.Builder
			for i, p := range parts {
				if p != "" {
					r, w := utf8.DecodeRuneInString(p)
					b.WriteString(pyUpper(string(r)) + pyLower(p[w:]))
				}
				if i < len(seps) {
					b.WriteString(seps[i])
				}
			}
			return b.String(), nil
		},
		"tojson": filterToJSON,
		"trim": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			a, err := bind("trim", args, kw, []string{"chars"}, None)
			if err != nil {
				return nil, err
			}
			return pyStrip(str(v), a[0], true, true), nil
		},
		"unique": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			a, err := bind("unique", args, kw, []string{"case_sensitive", "attribute"}, false, None)
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			get := attrGetter(a[1], nil)
			var out, seen []Value
			for _, it := range items {
				k, err := get(it)
				if err != nil {
					return nil, err
				}
				k = ignoreCase(k, truth(a[0]))
				dup := false
				for _, s := range seen {
					dup = dup || equal(s, k)
				}
				if !dup {
					seen = append(seen, k)
					out = append(out, it)
				}
			}
			return NewList(out...), nil
		},
		"wordcount": func(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
			return len(wordRE.FindAllString(str(v), -1)), nil
		},
	}
}

var (
	wordBeginning = regexp.MustCompile(`[-\s({\[<]+`)
	wordRE        = regexp.MustCompile(`[\p{L}\p{N}_]+`)
)

func filterLength(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	return length(v)
}

func filterDefault(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	a, err := bind("default", args, kw, []string{"default_value", "boolean"}, "", false)
	if err != nil {
		return nil, err
	}
	if _, undef := v.(Undefined); undef || (truth(a[1]) && !truth(v)) {
		return a[0], nil
	}
	return v, nil
}

func filterEscape(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")
	return r.Replace(str(v)), nil
}

func firstLast(v Value, first bool) (Value, error) {
	if s, ok := v.(string); ok && s != "" {
		if first {
			r, _ := utf8.DecodeRuneInString(s)
			return string(r), nil
		}
		r, _ := utf8.DecodeLastRuneInString(s)
		return string(r), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		if first {
			return Undefined{msg: "No first item, sequence was empty."}, nil
		}
		return Undefined{msg: "No last item, sequence was empty."}, nil
	}
	if first {
		return items[0], nil
	}
	return items[len(items)-1], nil
}

func filterFloat(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	a, err := bind("float", args, kw, []string{"default"}, 0.0)
	if err != nil {
		return nil, err
	}
	if f, ok := pyFloatOf(v); ok {
		return f, nil
	}
	return a[0], nil
}

// pyFloatOf is Python's float(v) where it succeeds.
func pyFloatOf(v Value) (float64, bool) {
	if f, ok := number(v); ok {
		return f, true
	}
	if s, ok := v.(string); ok {
		t := strings.ToLower(strings.TrimFunc(s, isPySpace))
		t = strings.ReplaceAll(t, "_", "")
		switch strings.TrimLeft(t, "+-") {
		case "inf", "infinity", "nan":
			f, err := strconv.ParseFloat(t, 64)
			return f, err == nil
		}
		f, err := strconv.ParseFloat(t, 64)
		if err == nil || strings.Contains(err.Error(), "range") {
			return f, true
		}
	}
	return 0, false
}

func filterInt(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	a, err := bind("int", args, kw, []string{"default", "base"}, 0, 10)
	if err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		base, _ := intOf(a[1])
		t := strings.ReplaceAll(strings.TrimFunc(s, isPySpace), "_", "")
		if n, err := strconv.ParseInt(t, base, 64); err == nil {
			return int(n), nil
		}
	} else if i, ok := intOf(v); ok {
		return i, nil
	}
	if f, ok := pyFloatOf(v); ok && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return int(f), nil
	}
	return a[0], nil
}

func filterIndent(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	a, err := bind("indent", args, kw, []string{"width", "first", "blank"}, 4, false, false)
	if err != nil {
		return nil, err
	}
	ind := ""
	if w, ok := a[0].(string); ok {
		ind = w
	} else if n, ok := intOf(a[0]); ok {
		ind = strings.Repeat(" ", max(n, 0))
	}
	lines := pySplitlines(str(v) + "\n")
	var rv string
	if truth(a[2]) {
		rv = strings.Join(lines, "\n"+ind)
	} else {
		rv = lines[0]
		if len(lines) > 1 {
			rest := make([]string, len(lines)-1)
			for i, l := range lines[1:] {
				if l != "" {
					l = ind + l
				}
				rest[i] = l
			}
			rv += "\n" + strings.Join(rest, "\n")
		}
	}
	if truth(a[1]) {
		rv = ind + rv
	}
	return rv, nil
}

func dictItems(d *Dict) *List {
	items := make([]Value, d.Len())
	for i, k := range d.keys {
		items[i] = newTuple(k, d.vals[i])
	}
	return &List{Items: items, Kind: kindDictItems}
}

func filterItems(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	switch d := v.(type) {
	case Undefined:
		return NewList(), nil
	case *Dict:
		return NewList(dictItems(d).Items...), nil
	}
	return nil, typeErrorf("Can only get item pairs from a mapping.")
}

func filterJoin(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	a, err := bind("join", args, kw, []string{"d", "attribute"}, "", None)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := attrGetter(a[1], nil)
	parts := make([]string, len(items))
	for i, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		parts[i] = str(x)
	}
	return strings.Join(parts, str(a[0])), nil
}

func toList(v Value) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return NewList(append([]Value(nil), items...)...), nil
}

// attrGetter is jinja2's make_attrgetter: attribute "a.b.0" looked up with
// getitem part by part; nil/None attribute gives the item itself.
func attrGetter(attribute Value, def Value) func(Value) (Value, error) {
	if _, ok := attribute.(NoneType); ok || attribute == nil {
		return func(v Value) (Value, error) { return v, nil }
	}
	var parts []Value
	if s, ok := attribute.(string); ok {
		for _, p := range strings.Split(s, ".") {
			if n, err := strconv.Atoi(p); err == nil && p != "" && strings.TrimLeft(p, "0123456789") == "" {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	} else {
		parts = []Value{attribute}
	}
	return func(v Value) (Value, error) {
		var err error
		for _, p := range parts {
			if v, err = getitem(v, p); err != nil {
				return nil, err
			}
		}
		if _, undef := v.(Undefined); undef && def != nil {
			return def, nil
		}
		return v, nil
	}
}

func ignoreCase(v Value, caseSensitive bool) Value {
	if s, ok := v.(string); ok && !caseSensitive {
		return pyLower(s)
	}
	return v
}

func filterMap(ev *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var f func(Value) (Value, error)
	if attr, ok := kw.Get("attribute"); ok && len(args) == 0 {
		def, hasDef := kw.Get("default")
		if !hasDef {
			def = nil
		}
		f = attrGetter(attr, def)
	} else {
		if len(args) == 0 {
			return nil, typeErrorf("map requires a filter argument")
		}
		name := str(args[0])
		flt, ok := filters[name]
		if !ok {
			return nil, fmt.Errorf("No filter named %s.", pyRepr(name))
		}
		f = func(x Value) (Value, error) { return flt(ev, x, args[1:], kw) }
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if out[i], err = f(it); err != nil {
			return nil, err
		}
	}
	return NewList(out...), nil
}

func minMax(v Value, args []Value, kw *Dict, which string) (Value, error) {
	a, err := bind(which, args, kw, []string{"case_sensitive", "attribute"}, false, None)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{msg: "No aggregated item, sequence was empty."}, nil
	}
	get := attrGetter(a[1], nil)
	best := items[0]
	bk, err := get(best)
	if err != nil {
		return nil, err
	}
	bk = ignoreCase(bk, truth(a[0]))
	for _, it := range items[1:] {
		k, err := get(it)
		if err != nil {
			return nil, err
		}
		k = ignoreCase(k, truth(a[0]))
		c, err := compare("<", k, bk)
		if err != nil {
			return nil, err
		}
		if (which == "min" && c < 0) || (which == "max" && c > 0) {
			best, bk = it, k
		}
	}
	return best, nil
}

// selectReject is select/reject/selectattr/rejectattr.
func selectReject(ev *evaluator, v Value, args []Value, kw *Dict, byAttr, keep bool) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := attrGetter(nil, nil)
	if byAttr {
		if len(args) == 0 {
			return nil, typeErrorf("Missing parameter for attribute name")
		}
		get = attrGetter(args[0], nil)
		args = args[1:]
	}
	test := func(x Value) (bool, error) { return truth(x), nil }
	if len(args) > 0 {
		name := str(args[0])
		t, ok := tests[name]
		if !ok {
			return nil, fmt.Errorf("No test named %s.", pyRepr(name))
		}
		targs := args[1:]
		test = func(x Value) (bool, error) { return t(ev, x, targs, kw) }
	}
	var out []Value
	for _, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		ok, err := test(x)
		if err != nil {
			return nil, err
		}
		if ok == keep {
			out = append(out, it)
		}
	}
	return NewList(out...), nil
}

func filterRound(_ *evaluator, v Value, args []Value, kw *Dict) (Value, error) {
	a, err := bind("round", args, kw, []string{"precision", "method"}, 0, "common")
	if err != nil {
		return nil, err
	}
	prec, _ := intOf(a[0])
	f, ok := number(v)
	if !ok {
		return nil, typeErrorf("type %s doesn't define __round__ method", typeName(v))
	}
	switch a[1] {
	case "common":
		if _, isInt := intOf(v); isInt && prec >= 0 {
			return v, nil
		}
		s := strconv.FormatFloat(f, 'f', max(prec, 0), 64)
		r, _ := strconv.ParseFloat(s, 64)
		if prec < 0 {
			p := math.Pow(10, float64(-prec))
			r = math.RoundToEven(f/p) * p
		}
		return r, nil
	case "floor", "ceil":
		p := math.Pow(10, float64(prec))
		if a[1] == "floor" {
			return math.Floor(f*p) / p, nil
		}
		return math.Ceil(f*p) / p, nil
	}
	return nil, typeErrorf("method must be common, ceil or floor")
}

type testFunc func(ev *evaluator, v Value, args []Value, kw *Dict) (bool, error)

var tests map[string]testFunc

func init() {
	isType := func(f func(Value) bool) testFunc {
		return func(_ *evaluator, v Value, _ []Value, _ *Dict) (bool, error) { return f(v), nil }
	}
	cmpTest := func(op string) testFunc {
		return func(_ *evaluator, v Value, args []Value, kw *Dict) (bool, error) {
			a, err := bind(op, args, kw, []string{"other"})
			if err != nil {
				return false, err
			}
			return compareOp(op, v, a[0])
		}
	}
	tests = map[string]testFunc{
		"defined":   isType(func(v Value) bool { _, u := v.(Undefined); return !u }),
		"undefined": isType(func(v Value) bool { _, u := v.(Undefined); return u }),
		"none":      isType(func(v Value) bool { _, ok := v.(NoneType); return ok }),
		"boolean":   isType(func(v Value) bool { _, ok := v.(bool); return ok }),
		"false":     isType(func(v Value) bool { b, ok := v.(bool); return ok && !b }),
		"true":      isType(func(v Value) bool { b, ok := v.(bool); return ok && b }),
		"integer":   isType(func(v Value) bool { _, ok := v.(int); return ok }),
		"float":     isType(func(v Value) bool { _, ok := v.(float64); return ok }),
		"number":    isType(func(v Value) bool { _, ok := number(v); return ok }),
		"string":    isType(func(v Value) bool { _, ok := v.(string); return ok }),
		"mapping":   isType(func(v Value) bool { _, ok := v.(*Dict); return ok }),
		"iterable": isType(func(v Value) bool {
			switch v.(type) {
			case Undefined, string, *List, *Dict:
				return true
			}
			return false
		}),
		"sequence": isType(func(v Value) bool {
			switch v.(type) {
			case Undefined, string, *List, *Dict:
				return true
			}
			return false
		}),
		"callable": isType(func(v Value) bool { _, ok := v.(*Callable); return ok }),
		"odd": func(_ *evaluator, v Value, _ []Value, _ *Dict) (bool, error) {
			i, ok := intOf(v)
			if !ok {
				return false, typeErrorf("odd: not an integer")
			}
			return i%2 != 0, nil
		},
		"even": func(_ *evaluator, v Value, _ []Value, _ *Dict) (bool, error) {
			i, ok := intOf(v)
			if !ok {
				return false, typeErrorf("even: not an integer")
			}
			return i%2 == 0, nil
		},
		"divisibleby": func(_ *evaluator, v Value, args []Value, kw *Dict) (bool, error) {
			a, err := bind("divisibleby", args, kw, []string{"num"})
			if err != nil {
				return false, err
			}
			m, err := binary("%", v, a[0])
			if err != nil {
				return false, err
			}
			return equal(m, 0), nil
		},
		"eq": cmpTest("=="), "equalto": cmpTest("=="), "==": cmpTest("=="),
		"ne": cmpTest("!="), "!=": cmpTest("!="),
		"lt": cmpTest("<"), "lessthan": cmpTest("<"), "<": cmpTest("<"),
		"le": cmpTest("<="), "<=": cmpTest("<="),
		"gt": cmpTest(">"), "greaterthan": cmpTest(">"), ">": cmpTest(">"),
		"ge": cmpTest(">="), ">=": cmpTest(">="),
		"in": func(_ *evaluator, v Value, args []Value, kw *Dict) (bool, error) {
			a, err := bind("in", args, kw, []string{"seq"})
			if err != nil {
				return false, err
			}
			return contains(a[0], v)
		},
		"sameas": func(_ *evaluator, v Value, args []Value, kw *Dict) (bool, error) {
			a, err := bind("sameas", args, kw, []string{"other"})
			if err != nil {
				return false, err
			}
			switch x := v.(type) {
			case NoneType, bool:
				return v == a[0], nil
			case *List, *Dict, *Namespace, *Callable:
				return x == a[0], nil
			}
			return false, nil
		},
		"lower":   isType(func(v Value) bool { s, ok := v.(string); return ok && pyIsCase(s, false) }),
		"upper":   isType(func(v Value) bool { s, ok := v.(string); return ok && pyIsCase(s, true) }),
		"escaped": isType(func(Value) bool { return false }),
		"filter":  isType(func(v Value) bool { s, ok := v.(string); _, f := filters[s]; return ok && f }),
		"test":    isType(func(v Value) bool { s, ok := v.(string); _, f := tests[s]; return ok && f }),
	}
}

// method returns the bound Python method name of obj (str, dict and list
// methods), or an unsafe Undefined for the mutating ones the immutable
// sandbox refuses.
func method(obj Value, name string) (Value, bool) {
	mk := func(fn func(args []Value, kw *Dict) (Value, error)) *Callable {
		return &Callable{Name: name, Fn: func(_ *evaluator, args []Value, kw *Dict) (Value, error) { return fn(args, kw) }}
	}
	switch o := obj.(type) {
	case string:
		if f, ok := strMethods[name]; ok {
			return mk(func(args []Value, kw *Dict) (Value, error) { return f(o, args, kw) }), true
		}
	case *Dict:
		switch name {
		case "items":
			return mk(func(args []Value, kw *Dict) (Value, error) { return dictItems(o), nil }), true
		case "keys":
			return mk(func(args []Value, kw *Dict) (Value, error) {
				return &List{Items: append([]Value(nil), o.keys...), Kind: kindDictKeys}, nil
			}), true
		case "values":
			return mk(func(args []Value, kw *Dict) (Value, error) {
				return &List{Items: append([]Value(nil), o.vals...), Kind: kindDictValues}, nil
			}), true
		case "get":
			return mk(func(args []Value, kw *Dict) (Value, error) {
				a, err := bind("get", args, kw, []string{"key", "default"}, None)
				if err != nil {
					return nil, err
				}
				if v, ok := o.Get(a[0]); ok {
					return v, nil
				}
				return a[1], nil
			}), true
		case "update", "pop", "popitem", "setdefault", "clear":
			return unsafeAttr(obj, name), true
		}
	case *List:
		if o.Kind > kindTuple {
			break
		}
		switch name {
		case "count":
			return mk(func(args []Value, kw *Dict) (Value, error) {
				a, err := bind("count", args, kw, []string{"value"})
				if err != nil {
					return nil, err
				}
				n := 0
				for _, it := range o.Items {
					if equal(it, a[0]) {
						n++
					}
				}
				return n, nil
			}), true
		case "index":
			return mk(func(args []Value, kw *Dict) (Value, error) {
				a, err := bind("index", args, kw, []string{"value"})
				if err != nil {
					return nil, err
				}
				for i, it := range o.Items {
					if equal(it, a[0]) {
						return i, nil
					}
				}
				return nil, fmt.Errorf("%s is not in list", pyRepr(a[0]))
			}), true
		case "append", "reverse", "insert", "sort", "extend", "remove":
			if o.Kind == kindList {
				return unsafeAttr(obj, name), true
			}
		}
	}
	return nil, false
}

type strMethod func(s string, args []Value, kw *Dict) (Value, error)

var strMethods map[string]strMethod

func init() {
	noArgs := func(name string, f func(string) Value) strMethod {
		return func(s string, args []Value, kw *Dict) (Value, error) {
			if _, err := bind(name, args, kw, nil); err != nil {
				return nil, err
			}
			return f(s), nil
		}
	}
	strip := func(name string, left, right bool) strMethod {
		return func(s string, args []Value, kw *Dict) (Value, error) {
			a, err := bind(name, args, kw, []string{"chars"}, None)
			if err != nil {
				return nil, err
			}
			return pyStrip(s, a[0], left, right), nil
		}
	}
	affix := func(name string, f func(s, p string) bool) strMethod {
		return func(s string, args []Value, kw *Dict) (Value, error) {
			a, err := bind(name, args, kw, []string{"prefix"})
			if err != nil {
				return nil, err
			}
			switch p := a[0].(type) {
			case string:
				return f(s, p), nil
			case *List:
				if p.Kind == kindTuple {
					for _, it := range p.Items {
						ps, ok := it.(string)
						if !ok {
							return nil, typeErrorf("tuple for %s must only contain str", name)
						}
						if f(s, ps) {
							return true, nil
						}
					}
					return false, nil
				}
			}
			return nil, typeErrorf("%s first arg must be str or a tuple of str, not %s", name, typeName(a[0]))
		}
	}
	isAll := func(name string, f func(rune) bool) strMethod {
		return noArgs(name, func(s string) Value {
			if s == "" {
				return false
			}
			for _, r := range s {
				if !f(r) {
					return false
				}
			}
			return true
		})
	}
	find := func(name string, last, mustFind bool) strMethod {
		return func(s string, args []Value, kw *Dict) (Value, error) {
			a, err := bind(name, args, kw, []string{"sub"})
			if err != nil {
				return nil, err
			}
			sub, ok := a[0].(string)
			if !ok {
				return nil, typeErrorf("must be str, not %s", typeName(a[0]))
			}
			i := strings.Index(s, sub)
			if last {
				i = strings.LastIndex(s, sub)
			}
			if i < 0 {
				if mustFind {
					return nil, fmt.Errorf("substring not found")
				}
				return -1, nil
			}
			return utf8.RuneCountInString(s[:i]), nil
		}
	}
	strMethods = map[string]strMethod{
		"startswith": affix("startswith", strings.HasPrefix),
		"endswith":   affix("endswith", strings.HasSuffix),
		"strip":      strip("strip", true, true),
		"lstrip":     strip("lstrip", true, false),
		"rstrip":     strip("rstrip", false, true),
		"lower":      noArgs("lower", func(s string) Value { return pyLower(s) }),
		"upper":      noArgs("upper", func(s string) Value { return pyUpper(s) }),
		"title":      noArgs("title", func(s string) Value { return pyTitle(s) }),
		"capitalize": noArgs("capitalize", func(s string) Value { return pyCapitalize(s) }),
		"isdigit":    isAll("isdigit", unicode.IsDigit),
		"isnumeric":  isAll("isnumeric", unicode.IsNumber),
		"isalpha":    isAll("isalpha", unicode.IsLetter),
		"isalnum":    isAll("isalnum", func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }),
		"isspace":    isAll("isspace", isPySpace),
		"islower":    noArgs("islower", func(s string) Value { return pyIsCase(s, false) }),
		"isupper":    noArgs("isupper", func(s string) Value { return pyIsCase(s, true) }),
		"splitlines": func(s string, args []Value, kw *Dict) (Value, error) {
			if _, err := bind("splitlines", args, kw, nil); err != nil {
				return nil, err
			}
			parts := pySplitlines(s)
			out := make([]Value, len(parts))
			for i, p := range parts {
				out[i] = p
			}
			return NewList(out...), nil
		},
		"split":  func(s string, args []Value, kw *Dict) (Value, error) { return pySplit(s, args, kw, false) },
		"rsplit": func(s string, args []Value, kw *Dict) (Value, error) { return pySplit(s, args, kw, true) },
		"replace": func(s string, args []Value, kw *Dict) (Value, error) {
			a, err := bind("replace", args, kw, []string{"old", "new", "count"}, -1)
			if err != nil {
				return nil, err
			}
			old, ok1 := a[0].(string)
			nw, ok2 := a[1].(string)
			n, ok3 := intOf(a[2])
			if !ok1 || !ok2 || !ok3 {
				return nil, typeErrorf("replace() arguments must be str, str, int")
			}
			return pyReplace(s, old, nw, n), nil
		},
		"find":  find("find", false, false),
		"rfind": find("rfind", true, false),
		"index": find("index", false, true),
		"count": func(s string, args []Value, kw *Dict) (Value, error) {
			a, err := bind("count", args, kw, []string{"sub"})
			if err != nil {
				return nil, err
			}
			sub, ok := a[0].(string)
			if !ok {
				return nil, typeErrorf("must be str, not %s", typeName(a[0]))
			}
			if sub == "" {
				return utf8.RuneCountInString(s) + 1, nil
			}
			return strings.Count(s, sub), nil
		},
		"join": func(s string, args []Value, kw *Dict) (Value, error) {
			a, err := bind("join", args, kw, []string{"iterable"})
			if err != nil {
				return nil, err
			}
			items, err := iterate(a[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, typeErrorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return strings.Join(parts, s), nil
		},
		"removeprefix": func(s string, args []Value, kw *Dict) (Value, error) {
			a, err := bind("removeprefix", args, kw, []string{"prefix"})
			if err != nil {
				return nil, err
			}
			return strings.TrimPrefix(s, str(a[0])), nil
		},
		"removesuffix": func(s string, args []Value, kw *Dict) (Value, error) {
			a, err := bind("removesuffix", args, kw, []string{"suffix"})
			if err != nil {
				return nil, err
			}
			return strings.TrimSuffix(s, str(a[0])), nil
		},
		"format": pyFormat,
	}
}

var (
	upperCaser = cases.Upper(language.Und)
	lowerCaser = cases.Lower(language.Und)
)

func pyUpper(s string) string { return upperCaser.String(s) }
func pyLower(s string) string { return lowerCaser.String(s) }

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// pyTitle is Python's str.title.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteString(pyLower(string(r)))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = isCased(r)
	}
	return b.String()
}

// pyCapitalize is Python's str.capitalize.
func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, w := utf8.DecodeRuneInString(s)
	return string(unicode.ToTitle(r)) + pyLower(s[w:])
}

// pyIsCase is Python's islower (upper=false) or isupper.
func pyIsCase(s string, upper bool) bool {
	cased := false
	for _, r := range s {
		if unicode.IsTitle(r) || (upper && unicode.IsLower(r)) || (!upper && unicode.IsUpper(r)) {
			return false
		}
		cased = cased || isCased(r)
	}
	return cased
}

// pyStrip is Python's str.strip/lstrip/rstrip with chars None or a string.
func pyStrip(s string, chars Value, left, right bool) string {
	cut := isPySpace
	if c, ok := chars.(string); ok {
		cut = func(r rune) bool { return strings.ContainsRune(c, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, cut)
	}
	if right {
		s = strings.TrimRightFunc(s, cut)
	}
	return s
}

func pyReplace(s, old, nw string, n int) string {
	if old == "" {
		// Python inserts new between every character (and at both ends).
		var parts []string
		for _, r := range s {
			parts = append(parts, string(r))
		}
		out := nw
		for i, p := range parts {
			if n >= 0 && i+1 > n {
				out += strings.Join(parts[i:], "")
				return out
			}
			out += p + nw
		}
		return out
	}
	return strings.Replace(s, old, nw, n)
}

// pySplitlines is Python's str.splitlines() (line breaks dropped).
func pySplitlines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, s[start:i])
			i += w
			if r == '\r' && i < len(s) && s[i] == '\n' {
				i++
			}
			start = i
			continue
		}
		i += w
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// pySplit is Python's str.split / str.rsplit.
func pySplit(s string, args []Value, kw *Dict, fromRight bool) (Value, error) {
	a, err := bind("split", args, kw, []string{"sep", "maxsplit"}, None, -1)
	if err != nil {
		return nil, err
	}
	maxsplit, ok := intOf(a[1])
	if !ok {
		return nil, typeErrorf("maxsplit must be an integer")
	}
	var parts []string
	switch sep := a[0].(type) {
	case NoneType:
		parts = splitWhitespace(s, maxsplit, fromRight)
	case string:
		if sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		switch {
		case maxsplit < 0:
			parts = strings.Split(s, sep)
		case !fromRight:
			parts = strings.SplitN(s, sep, maxsplit+1)
		default:
			rest := s
			for k := 0; k < maxsplit; k++ {
				i := strings.LastIndex(rest, sep)
				if i < 0 {
					break
				}
				parts = append([]string{rest[i+len(sep):]}, parts...)
				rest = rest[:i]
			}
			parts = append([]string{rest}, parts...)
		}
	default:
		return nil, typeErrorf("must be str or None, not %s", typeName(a[0]))
	}
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return NewList(out...), nil
}

func splitWhitespace(s string, maxsplit int, fromRight bool) []string {
	if fromRight {
		// Split the reversed text and reverse the pieces back.
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		parts := splitWhitespace(string(rs), maxsplit, false)
		for k, p := range parts {
			pr := []rune(p)
			for i, j := 0, len(pr)-1; i < j; i, j = i+1, j-1 {
				pr[i], pr[j] = pr[j], pr[i]
			}
			parts[k] = string(pr)
		}
		for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
		return parts
	}
	var out []string
	i := 0
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			return out
		}
		if maxsplit >= 0 && len(out) == maxsplit {
			return append(out, s[i:])
		}
		j := i
		for j < len(s) {
			r, w := utf8.DecodeRuneInString(s[j:])
			if isPySpace(r) {
				break
			}
			j += w
		}
		out = append(out, s[i:j])
		i = j
	}
}

// pyFormat is str.format with "{}", "{0}" and "{name}" fields (no format specs
// or conversions).
func pyFormat(s string, args []Value, kw *Dict) (Value, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return nil, fmt.Errorf("Single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("Single '{' encountered in format string")
		}
		field := s[i+1 : i+end]
		i += end
		if strings.ContainsAny(field, ":!.[") {
			return nil, fmt.Errorf("format: field %q: format specs, conversions and attribute access are not supported", field)
		}
		var v Value
		switch n, err := strconv.Atoi(field); {
		case field == "":
			if auto >= len(args) {
				return nil, fmt.Errorf("Replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case err == nil:
			if n >= len(args) {
				return nil, fmt.Errorf("Replacement index %d out of range for positional args tuple", n)
			}
			v = args[n]
		default:
			x, ok := kw.Get(field)
			if !ok {
				return nil, fmt.Errorf("KeyError: %s", pyRepr(field))
			}
			v = x
		}
		b.WriteString(str(v))
	}
	return b.String(), nil
}

// mergeMappings is what dict(...) and namespace(...) start from: the
// positional mappings' items, then the keyword arguments, later keys
// replacing earlier ones in place (Python's dict update order). fn names
// the builtin in the error for a positional argument that is not a mapping.
func mergeMappings(fn string, args []Value, kw *Dict) (*Dict, error) {
	d := NewDict()
	for _, a := range args {
		src, ok := a.(*Dict)
		if !ok {
			return nil, typeErrorf("%s() takes a mapping", fn)
		}
		for i, k := range src.keys {
			d.Set(k, src.vals[i])
		}
	}
	for i, k := range kw.keys {
		d.Set(k, kw.vals[i])
	}
	return d, nil
}
