package jinja

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Template is a parsed template. It is safe for concurrent use.
type Template struct {
	body []node
}

// Parse parses template source as jinja2 does under transformers' settings.
// A template that does not parse gives a *SyntaxError.
func Parse(src string) (*Template, error) {
	body, err := parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// UsesGeneration reports whether the template has {% generation %} blocks.
func (t *Template) UsesGeneration() bool {
	found := false
	var walk func([]node)
	walk = func(ns []node) {
		for _, n := range ns {
			switch n := n.(type) {
			case *generationNode:
				found = true
			case *ifNode:
				for _, b := range n.bodies {
					walk(b)
				}
				walk(n.els)
			case *forNode:
				walk(n.body)
				walk(n.els)
			case *macroNode:
				walk(n.body)
			case *withNode:
				walk(n.body)
			case *filterBlockNode:
				walk(n.body)
			case *setBlockNode:
				walk(n.body)
			}
		}
	}
	walk(t.body)
	return found
}

// Env is what a render sees besides its variables.
type Env struct {
	// Now is the clock of strftime_now; nil means time.Now.
	Now func() time.Time
}

// Span is a byte range [Start, End) of rendered output.
type Span struct{ Start, End int }

// TemplateError is raised by the template itself, through raise_exception(msg).
type TemplateError struct{ Msg string }

func (e *TemplateError) Error() string { return e.Msg }

// Render renders the template with vars (the render variables, shadowing the
// globals range, dict, namespace, raise_exception and strftime_now). It also
// returns the output spans of {% generation %} blocks, in order.
func (t *Template) Render(vars map[string]Value, env Env) (string, []Span, error) {
	ev := &evaluator{env: env, out: &strings.Builder{}}
	top := &scope{vars: map[string]Value{}, parent: &scope{vars: globals()}}
	for k, v := range vars {
		top.vars[k] = v
	}
	err := ev.exec(t.body, top)
	if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
		err = fmt.Errorf("break or continue outside a loop")
	}
	if err != nil {
		return "", nil, err
	}
	return ev.out.String(), ev.spans, nil
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

type scope struct {
	vars   map[string]Value
	parent *scope
}

func (s *scope) child() *scope { return &scope{vars: map[string]Value{}, parent: s} }

func (s *scope) lookup(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

type evaluator struct {
	env     Env
	out     *strings.Builder
	capture int // > 0 while output goes to a macro's or block's buffer
	depth   int // macro call depth
	spans   []Span
}

func (ev *evaluator) now() time.Time {
	if ev.env.Now != nil {
		return ev.env.Now()
	}
	return time.Now()
}

// captured runs f with output going to a fresh buffer and returns that output.
func (ev *evaluator) captured(f func() error) (string, error) {
	saved := ev.out
	ev.out = &strings.Builder{}
	ev.capture++
	err := f()
	ev.capture--
	s := ev.out.String()
	ev.out = saved
	return s, err
}

func (ev *evaluator) exec(body []node, s *scope) error {
	for _, n := range body {
		if err := ev.execOne(n, s); err != nil {
			return err
		}
	}
	return nil
}

func (ev *evaluator) execOne(n node, s *scope) error {
	switch n := n.(type) {
	case *textNode:
		ev.out.WriteString(n.s)
	case *outputNode:
		v, err := ev.eval(n.e, s)
		if err != nil {
			return err
		}
		ev.out.WriteString(str(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := ev.eval(c, s)
			if err != nil {
				return err
			}
			if truth(v) {
				return ev.exec(n.bodies[i], s)
			}
		}
		return ev.exec(n.els, s)
	case *forNode:
		return ev.execFor(n, s)
	case *setNode:
		v, err := ev.eval(n.value, s)
		if err != nil {
			return err
		}
		return ev.assign(n.target, v, s)
	case *setBlockNode:
		v, err := ev.filteredBody(n.body, n.filters, s)
		if err != nil {
			return err
		}
		return ev.assign(n.target, v, s)
	case *macroNode:
		s.vars[n.name] = ev.macro(n, s)
	case *withNode:
		inner := s.child()
		for i, t := range n.targets {
			v, err := ev.eval(n.values[i], s)
			if err != nil {
				return err
			}
			if err := ev.assign(t, v, inner); err != nil {
				return err
			}
		}
		return ev.exec(n.body, inner)
	case *filterBlockNode:
		v, err := ev.filteredBody(n.body, n.filters, s)
		if err != nil {
			return err
		}
		ev.out.WriteString(str(v))
	case *generationNode:
		start := ev.out.Len()
		if err := ev.exec(n.body, s); err != nil {
			return err
		}
		if ev.capture == 0 {
			ev.spans = append(ev.spans, Span{start, ev.out.Len()})
		}
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	default:
		return fmt.Errorf("unknown statement %T", n)
	}
	return nil
}

// assign binds target (a name, a tuple of names, or ns.attr) to v in s.
func (ev *evaluator) assign(target expr, v Value, s *scope) error {
	switch t := target.(type) {
	case *nameExpr:
		s.vars[t.name] = v
		return nil
	case *tupleExpr:
		items, err := iterate(v)
		if err != nil {
			return typeErrorf("cannot unpack non-iterable %s object", typeName(v))
		}
		if len(items) != len(t.items) {
			if len(items) < len(t.items) {
				return fmt.Errorf("not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
			}
			return fmt.Errorf("too many values to unpack (expected %d)", len(t.items))
		}
		for i, it := range t.items {
			if err := ev.assign(it, items[i], s); err != nil {
				return err
			}
		}
		return nil
	case *getattrExpr:
		name := t.obj.(*nameExpr).name
		obj, ok := s.lookup(name)
		ns, isNS := obj.(*Namespace)
		if !ok || !isNS {
			return &TemplateError{Msg: "cannot assign attribute on non-namespace object"}
		}
		return ns.attrs.Set(t.name, v)
	}
	return fmt.Errorf("cannot assign to %T", target)
}

func (ev *evaluator) execFor(n *forNode, s *scope) error {
	seq, err := ev.eval(n.iter, s)
	if err != nil {
		return err
	}
	if u, ok := seq.(Undefined); ok && u.security {
		return u.err()
	}
	items, err := iterate(seq)
	if err != nil {
		return err
	}
	if n.cond != nil {
		var kept []Value
		for _, it := range items {
			inner := s.child()
			if err := ev.assign(n.target, it, inner); err != nil {
				return err
			}
			c, err := ev.eval(n.cond, inner)
			if err != nil {
				return err
			}
			if truth(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return ev.exec(n.els, s.child())
	}
	loop := &loopValue{items: items}
	for i, it := range items {
		inner := s.child()
		if err := ev.assign(n.target, it, inner); err != nil {
			return err
		}
		loop.index = i
		inner.vars["loop"] = loop
		err := ev.exec(n.body, inner)
		if errors.Is(err, errBreak) {
			break
		}
		if err != nil && !errors.Is(err, errContinue) {
			return err
		}
	}
	return nil
}

// loopValue is the loop variable of a for loop.
type loopValue struct {
	items   []Value
	index   int
	changed *Value // the last value given to loop.changed, nil before the first call
}

func (l *loopValue) attr(name string) (Value, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return l.index + 1, true
	case "index0":
		return l.index, true
	case "revindex":
		return n - l.index, true
	case "revindex0":
		return n - l.index - 1, true
	case "first":
		return l.index == 0, true
	case "last":
		return l.index == n-1, true
	case "length":
		return n, true
	case "depth":
		return 1, true
	case "depth0":
		return 0, true
	case "previtem":
		if l.index == 0 {
			return Undefined{msg: "there is no previous item"}, true
		}
		return l.items[l.index-1], true
	case "nextitem":
		if l.index == n-1 {
			return Undefined{msg: "there is no next item"}, true
		}
		return l.items[l.index+1], true
	case "cycle":
		return &Callable{Name: "cycle", Fn: func(_ *evaluator, args []Value, _ *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, typeErrorf("no items for cycling given")
			}
			return args[l.index%len(args)], nil
		}}, true
	case "changed":
		return &Callable{Name: "changed", Fn: func(_ *evaluator, args []Value, _ *Dict) (Value, error) {
			var v Value = newTuple(args...)
			if l.changed == nil || !equal(*l.changed, v) {
				l.changed = &v
				return true, nil
			}
			return false, nil
		}}, true
	}
	return nil, false
}

func (ev *evaluator) macro(n *macroNode, defScope *scope) *Callable {
	return &Callable{Name: n.name, Fn: func(ev *evaluator, args []Value, kwargs *Dict) (Value, error) {
		if ev.depth > 100 {
			return nil, fmt.Errorf("macro %s: maximum recursion depth exceeded", pyRepr(n.name))
		}
		inner := defScope.child()
		for i, p := range n.params {
			switch {
			case i < len(args):
				inner.vars[p] = args[i]
			default:
				if v, ok := kwargs.Get(p); ok {
					inner.vars[p] = v
					continue
				}
				if n.defaults[i] != nil {
					v, err := ev.eval(n.defaults[i], inner)
					if err != nil {
						return nil, err
					}
					inner.vars[p] = v
					continue
				}
				inner.vars[p] = Undefined{msg: fmt.Sprintf("parameter %s was not provided", pyRepr(p))}
			}
		}
		var extra []Value
		if len(args) > len(n.params) {
			extra = args[len(n.params):]
		}
		inner.vars["varargs"] = newTuple(extra...)
		rest := NewDict()
		for i, k := range kwargs.keys {
			known := false
			for _, p := range n.params {
				known = known || k == p
			}
			if !known {
				if err := rest.Set(k, kwargs.vals[i]); err != nil {
					return nil, err
				}
			}
		}
		inner.vars["kwargs"] = rest
		ev.depth++
		out, err := ev.captured(func() error { return ev.exec(n.body, inner) })
		ev.depth--
		return out, err
	}}
}

func (ev *evaluator) eval(e expr, s *scope) (Value, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := s.lookup(e.name); ok {
			return v, nil
		}
		return undefinedName(e.name), nil
	case *listExpr:
		items, err := ev.evalAll(e.items, s)
		return NewList(items...), err
	case *tupleExpr:
		items, err := ev.evalAll(e.items, s)
		return newTuple(items...), err
	case *dictExpr:
		d := NewDict()
		for i := range e.keys {
			k, err := ev.eval(e.keys[i], s)
			if err != nil {
				return nil, err
			}
			v, err := ev.eval(e.vals[i], s)
			if err != nil {
				return nil, err
			}
			if err := d.Set(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *getattrExpr:
		obj, err := ev.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		return getattr(obj, e.name)
	case *getitemExpr:
		obj, err := ev.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		idx, err := ev.eval(e.index, s)
		if err != nil {
			return nil, err
		}
		return getitem(obj, idx)
	case *sliceExpr:
		return ev.evalSlice(e, s)
	case *callExpr:
		fn, err := ev.eval(e.fn, s)
		if err != nil {
			return nil, err
		}
		args, kwargs, err := ev.evalArgs(e.args, s)
		if err != nil {
			return nil, err
		}
		return call(ev, fn, args, kwargs)
	case *filterExpr:
		v, err := ev.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		return ev.applyFilter(e, v, s)
	case *testExpr:
		v, err := ev.eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		args, kwargs, err := ev.evalArgs(e.args, s)
		if err != nil {
			return nil, err
		}
		ok, err := tests[e.name](ev, v, args, kwargs)
		return ok, err
	case *binExpr:
		l, err := ev.eval(e.l, s)
		if err != nil {
			return nil, err
		}
		r, err := ev.eval(e.r, s)
		if err != nil {
			return nil, err
		}
		return binary(e.op, l, r)
	case *cmpExpr:
		l, err := ev.eval(e.first, s)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			r, err := ev.eval(e.rest[i], s)
			if err != nil {
				return nil, err
			}
			ok, err := compareOp(op, l, r)
			if err != nil || !ok {
				return false, err
			}
			l = r
		}
		return true, nil
	case *andExpr:
		l, err := ev.eval(e.l, s)
		if err != nil || !truth(l) {
			return l, err
		}
		return ev.eval(e.r, s)
	case *orExpr:
		l, err := ev.eval(e.l, s)
		if err != nil || truth(l) {
			return l, err
		}
		return ev.eval(e.r, s)
	case *notExpr:
		v, err := ev.eval(e.e, s)
		return !truth(v), err
	case *negExpr, *posExpr:
		var inner expr
		neg := false
		if n, ok := e.(*negExpr); ok {
			inner, neg = n.e, true
		} else {
			inner = e.(*posExpr).e
		}
		v, err := ev.eval(inner, s)
		if err != nil {
			return nil, err
		}
		if u, ok := v.(Undefined); ok {
			return nil, u.err()
		}
		if i, ok := intOf(v); ok {
			if neg {
				return -i, nil
			}
			return i, nil
		}
		if f, ok := v.(float64); ok {
			if neg {
				return -f, nil
			}
			return f, nil
		}
		op := "+"
		if neg {
			op = "-"
		}
		return nil, typeErrorf("bad operand type for unary %s: %s", op, pyRepr(typeName(v)))
	case *condExpr:
		c, err := ev.eval(e.test, s)
		if err != nil {
			return nil, err
		}
		if truth(c) {
			return ev.eval(e.t, s)
		}
		if e.f == nil {
			return Undefined{msg: "the inline if-expression evaluated to false and no else section was defined."}, nil
		}
		return ev.eval(e.f, s)
	}
	return nil, fmt.Errorf("unknown expression %T", e)
}

func (ev *evaluator) evalAll(es []expr, s *scope) ([]Value, error) {
	out := make([]Value, len(es))
	for i, e := range es {
		v, err := ev.eval(e, s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (ev *evaluator) evalArgs(a argList, s *scope) ([]Value, *Dict, error) {
	args, err := ev.evalAll(a.pos, s)
	if err != nil {
		return nil, nil, err
	}
	if a.star != nil {
		v, err := ev.eval(a.star, s)
		if err != nil {
			return nil, nil, err
		}
		more, err := iterate(v)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, more...)
	}
	kw := NewDict()
	for i, name := range a.kwNames {
		v, err := ev.eval(a.kwVals[i], s)
		if err != nil {
			return nil, nil, err
		}
		kw.Set(name, v)
	}
	if a.star2 != nil {
		v, err := ev.eval(a.star2, s)
		if err != nil {
			return nil, nil, err
		}
		d, ok := v.(*Dict)
		if !ok {
			return nil, nil, typeErrorf("argument after ** must be a mapping, not %s", typeName(v))
		}
		for i, k := range d.keys {
			kw.Set(k, d.vals[i])
		}
	}
	return args, kw, nil
}

// filteredBody renders body into a string and passes it through filters
// in order: the value of a {% set x | f %} block and the output of a
// {% filter f %} block.
func (ev *evaluator) filteredBody(body []node, filters []*filterExpr, s *scope) (Value, error) {
	text, err := ev.captured(func() error { return ev.exec(body, s) })
	if err != nil {
		return nil, err
	}
	var v Value = text
	for _, f := range filters {
		if v, err = ev.applyFilter(f, v, s); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (ev *evaluator) applyFilter(f *filterExpr, v Value, s *scope) (Value, error) {
	args, kwargs, err := ev.evalArgs(f.args, s)
	if err != nil {
		return nil, err
	}
	return filters[f.name](ev, v, args, kwargs)
}

func call(ev *evaluator, fn Value, args []Value, kwargs *Dict) (Value, error) {
	switch f := fn.(type) {
	case *Callable:
		return f.Fn(ev, args, kwargs)
	case Undefined:
		return nil, f.err()
	}
	return nil, typeErrorf("%s object is not callable", pyRepr(typeName(fn)))
}

// getattr is the sandbox's getattr for x.name: a Python attribute (a method)
// first, then the item x[name].
func getattr(obj Value, name string) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, o.err()
	case *Namespace:
		if v, ok := o.attrs.Get(name); ok {
			return v, nil
		}
	case *loopValue:
		if v, ok := o.attr(name); ok {
			return v, nil
		}
	default:
		if m, ok := method(obj, name); ok {
			return m, nil
		}
		if d, ok := obj.(*Dict); ok {
			if v, ok := d.Get(name); ok {
				return v, nil
			}
		}
	}
	return undefinedAttr(obj, name), nil
}

// getitem is the sandbox's getitem for x[i]: the item first, then for a
// string i the attribute.
func getitem(obj, idx Value) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, o.err()
	case *Dict:
		if v, ok := o.Get(idx); ok {
			return v, nil
		}
	case *List:
		if o.Kind == kindList || o.Kind == kindTuple {
			if i, ok := intOf(idx); ok {
				if i < 0 {
					i += len(o.Items)
				}
				if i >= 0 && i < len(o.Items) {
					return o.Items[i], nil
				}
			}
		}
	case string:
		if i, ok := intOf(idx); ok {
			rs := []rune(o)
			if i < 0 {
				i += len(rs)
			}
			if i >= 0 && i < len(rs) {
				return string(rs[i]), nil
			}
		}
	}
	if name, ok := idx.(string); ok {
		return getattr(obj, name)
	}
	return undefinedAttr(obj, idx), nil
}

func (ev *evaluator) evalSlice(e *sliceExpr, s *scope) (Value, error) {
	obj, err := ev.eval(e.obj, s)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int
	for i, b := range []expr{e.start, e.stop, e.step} {
		if b == nil {
			continue
		}
		v, err := ev.eval(b, s)
		if err != nil {
			return nil, err
		}
		if _, ok := v.(NoneType); ok {
			continue
		}
		n, ok := intOf(v)
		if !ok {
			return nil, typeErrorf("slice indices must be integers or None or have an __index__ method")
		}
		bounds[i] = &n
	}
	var items []Value
	var rs []rune
	switch o := obj.(type) {
	case Undefined:
		return nil, o.err()
	case *List:
		items = o.Items
	case string:
		rs = []rune(o)
	default:
		return undefinedAttr(obj, "slice"), nil
	}
	n := len(items)
	if rs != nil || obj == "" {
		n = len(rs)
	}
	idx, err := sliceIndices(n, bounds)
	if err != nil {
		return nil, err
	}
	if l, ok := obj.(*List); ok {
		out := make([]Value, len(idx))
		for i, k := range idx {
			out[i] = items[k]
		}
		kind := kindList
		if l.Kind == kindTuple {
			kind = kindTuple
		}
		return &List{Items: out, Kind: kind}, nil
	}
	var b strings.Builder
	for _, k := range idx {
		b.WriteRune(rs[k])
	}
	return b.String(), nil
}

// sliceIndices is Python's slice(start, stop, step).indices(n), expanded.
func sliceIndices(n int, b [3]*int) ([]int, error) {
	step := 1
	if b[2] != nil {
		step = *b[2]
	}
	if step == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	clamp := func(p *int, def, lo, hi int) int {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += n
			if v < lo {
				v = lo
			}
		} else if v > hi {
			v = hi
		}
		return v
	}
	var start, stop int
	if step > 0 {
		start, stop = clamp(b[0], 0, 0, n), clamp(b[1], n, 0, n)
	} else {
		start, stop = clamp(b[0], n-1, -1, n-1), clamp(b[1], -1, -1, n-1)
	}
	var idx []int
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		idx = append(idx, i)
	}
	return idx, nil
}

// maxRepeat bounds the result of str * int and list * int, which Python
// would build however large.
const maxRepeat = 1 << 24

// binary evaluates l op r with Python's semantics.
func binary(op string, l, r Value) (Value, error) {
	if op == "~" {
		return str(l) + str(r), nil
	}
	if u, ok := l.(Undefined); ok {
		return nil, u.err()
	}
	if u, ok := r.(Undefined); ok {
		return nil, u.err()
	}
	li, lInt := intOf(l)
	ri, rInt := intOf(r)
	lf, lNum := number(l)
	rf, rNum := number(r)
	switch op {
	case "+":
		switch {
		case lInt && rInt:
			return li + ri, nil
		case lNum && rNum:
			return lf + rf, nil
		}
		if ls, ok := l.(string); ok {
			if rs, ok := r.(string); ok {
				return ls + rs, nil
			}
			return nil, typeErrorf("can only concatenate str (not %q) to str", typeName(r))
		}
		if ll, ok := l.(*List); ok {
			if rl, ok := r.(*List); ok && ll.Kind == rl.Kind && ll.Kind <= kindTuple {
				items := append(append([]Value{}, ll.Items...), rl.Items...)
				return &List{Items: items, Kind: ll.Kind}, nil
			}
			if ll.Kind == kindList {
				return nil, typeErrorf("can only concatenate list (not %q) to list", typeName(r))
			}
		}
	case "-":
		switch {
		case lInt && rInt:
			return li - ri, nil
		case lNum && rNum:
			return lf - rf, nil
		}
	case "*":
		switch {
		case lInt && rInt:
			return li * ri, nil
		case lNum && rNum:
			return lf * rf, nil
		}
		if rInt {
			if n, err := length(l); err == nil && n*max(ri, 0) > maxRepeat {
				return nil, fmt.Errorf("repetition result too large (over %d items)", maxRepeat)
			}
			if s, ok := l.(string); ok {
				return strings.Repeat(s, max(ri, 0)), nil
			}
			if ll, ok := l.(*List); ok && ll.Kind <= kindTuple {
				var items []Value
				for k := 0; k < ri; k++ {
					items = append(items, ll.Items...)
				}
				return &List{Items: items, Kind: ll.Kind}, nil
			}
		}
		if lInt {
			if _, ok := r.(string); ok {
				return binary(op, r, l)
			}
		}
	case "/":
		if lNum && rNum {
			if rf == 0 {
				return nil, fmt.Errorf("division by zero")
			}
			return lf / rf, nil
		}
	case "//":
		if lInt && rInt {
			if ri == 0 {
				return nil, fmt.Errorf("integer division or modulo by zero")
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		}
		if lNum && rNum {
			if rf == 0 {
				return nil, fmt.Errorf("float floor division by zero")
			}
			return math.Floor(lf / rf), nil
		}
	case "%":
		if lInt && rInt {
			if ri == 0 {
				return nil, fmt.Errorf("integer division or modulo by zero")
			}
			m := li % ri
			if m != 0 && ((m < 0) != (ri < 0)) {
				m += ri
			}
			return m, nil
		}
		if lNum && rNum {
			if rf == 0 {
				return nil, fmt.Errorf("float modulo")
			}
			m := math.Mod(lf, rf)
			if m != 0 && ((m < 0) != (rf < 0)) {
				m += rf
			}
			return m, nil
		}
	case "**":
		if lInt && rInt && ri >= 0 {
			out := 1
			for k := 0; k < ri; k++ {
				out *= li
			}
			return out, nil
		}
		if lNum && rNum {
			return math.Pow(lf, rf), nil
		}
	}
	return nil, typeErrorf("unsupported operand type(s) for %s: %s and %s", op, pyRepr(typeName(l)), pyRepr(typeName(r)))
}

func compareOp(op string, l, r Value) (bool, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in", "notin":
		ok, err := contains(r, l)
		if op == "notin" {
			ok = !ok
		}
		return ok, err
	}
	c, err := compare(op, l, r)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// contains is Python's `item in container`.
func contains(container, item Value) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if u, isU := item.(Undefined); isU {
				return false, u.err()
			}
			return false, typeErrorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case *Dict:
		_, ok := c.Get(item)
		return ok, nil
	case Undefined:
		return false, nil
	}
	items, err := iterate(container)
	if err != nil {
		return false, typeErrorf("argument of type %s is not iterable", pyRepr(typeName(container)))
	}
	for _, it := range items {
		if equal(it, item) {
			return true, nil
		}
	}
	return false, nil
}
