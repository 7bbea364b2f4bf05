package jinja

import (
	"fmt"
	"strings"
)

// Statements.
type (
	node any

	textNode   struct{ s string }
	outputNode struct{ e expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		target    expr // nameExpr or tupleExpr of nameExpr
		iter      expr
		cond      expr // the "if" filter, or nil
		body, els []node
	}
	setNode struct {
		target expr // nameExpr, tupleExpr of names, or getattrExpr on a namespace
		value  expr
	}
	setBlockNode struct {
		target  expr
		body    []node
		filters []*filterExpr
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // per param, nil when it has none
		body     []node
	}
	withNode struct {
		targets []expr
		values  []expr
		body    []node
	}
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	generationNode struct{ body []node }
	breakNode      struct{}
	continueNode   struct{}
)

// Expressions.
type (
	expr any

	constExpr struct{ v Value }
	nameExpr  struct {
		name string
		line int
	}
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, vals []expr }
	// getattrExpr is x.name; getitemExpr is x[i] (and x.0).
	getattrExpr struct {
		obj  expr
		name string
	}
	getitemExpr struct{ obj, index expr }
	sliceExpr   struct{ obj, start, stop, step expr }
	callExpr    struct {
		fn   expr
		args argList
	}
	argList struct {
		pos     []expr
		kwNames []string
		kwVals  []expr
		star    expr // *args
		star2   expr // **kwargs
	}
	filterExpr struct {
		obj  expr // nil in a filter block or set block (the body is the input)
		name string
		args argList
	}
	testExpr struct {
		obj  expr
		name string
		args argList
	}
	binExpr struct {
		op   string // + - * / // % ** ~
		l, r expr
	}
	cmpExpr struct {
		first expr
		ops   []string // == != < <= > >= in notin
		rest  []expr
	}
	andExpr  struct{ l, r expr }
	orExpr   struct{ l, r expr }
	notExpr  struct{ e expr }
	negExpr  struct{ e expr }
	posExpr  struct{ e expr }
	condExpr struct{ test, t, f expr } // f nil: Undefined when the test fails
)

type parser struct {
	toks []token
	pos  int
}

// parse turns template source into its statement list.
func parse(src string) ([]node, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, end, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errorf("Encountered unknown tag '%s'.", end)
	}
	return body, nil
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) next() token { t := p.toks[p.pos]; p.pos++; return t }
func (p *parser) peek(k int) token {
	if p.pos+k < len(p.toks) {
		return p.toks[p.pos+k]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) errorf(format string, a ...any) error {
	return &SyntaxError{Msg: fmt.Sprintf(format, a...), Line: p.cur().line}
}

func (p *parser) isOp(op string) bool   { t := p.cur(); return t.kind == tOp && t.val == op }
func (p *parser) isName(n string) bool  { t := p.cur(); return t.kind == tName && t.val == n }
func (p *parser) skipOp(op string) bool { ok := p.isOp(op); p.pos += b2i(ok); return ok }
func (p *parser) skipName(n string) bool {
	ok := p.isName(n)
	p.pos += b2i(ok)
	return ok
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errorf("expected token '%s', got %s", op, p.cur().describe())
	}
	return nil
}

func (p *parser) expectKind(k tokKind) (token, error) {
	t := p.cur()
	if t.kind != k {
		if t.kind == tEOF {
			return t, p.errorf("unexpected end of template, expected '%s'.", k)
		}
		return t, p.errorf("expected token '%s', got %s", k, t.describe())
	}
	p.pos++
	return t, nil
}

func (p *parser) expectName() (string, error) {
	t, err := p.expectKind(tName)
	return t.val, err
}

// subparse reads statements until a block tag named in ends (returned, with
// the parser just after its name) or the end of the template ("" returned).
func (p *parser) subparse(ends []string) ([]node, string, error) {
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if ends != nil {
				return nil, "", p.errorf("Unexpected end of template. Jinja was looking for the following tags: %s.", quoteTags(ends))
			}
			return body, "", nil
		case tData:
			p.pos++
			body = append(body, &textNode{t.val})
		case tVarBegin:
			p.pos++
			e, err := p.parseTuple(false)
			if err != nil {
				return nil, "", err
			}
			if _, err := p.expectKind(tVarEnd); err != nil {
				return nil, "", err
			}
			body = append(body, &outputNode{e})
		case tBlockBegin:
			p.pos++
			name := p.cur()
			if name.kind != tName {
				return nil, "", p.errorf("tag name expected")
			}
			for _, e := range ends {
				if name.val == e {
					p.pos++
					return body, e, nil
				}
			}
			n, err := p.statement()
			if err != nil {
				return nil, "", err
			}
			body = append(body, n)
		default:
			return nil, "", p.errorf("unexpected %s", t.describe())
		}
	}
}

func quoteTags(ends []string) string {
	q := make([]string, len(ends))
	for i, e := range ends {
		q[i] = "'" + e + "'"
	}
	return strings.Join(q, " or ")
}

// body parses statements up to one of ends and the end of that tag.
func (p *parser) body(ends ...string) ([]node, string, error) {
	b, end, err := p.subparse(ends)
	if err != nil {
		return nil, "", err
	}
	return b, end, nil
}

func (p *parser) blockEnd() error {
	_, err := p.expectKind(tBlockEnd)
	return err
}

func (p *parser) statement() (node, error) {
	name := p.next().val
	switch name {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "with":
		return p.parseWith()
	case "filter":
		return p.parseFilterBlock()
	case "generation":
		if err := p.blockEnd(); err != nil {
			return nil, err
		}
		b, _, err := p.body("endgeneration")
		if err != nil {
			return nil, err
		}
		return &generationNode{b}, p.blockEnd()
	case "break":
		return &breakNode{}, p.blockEnd()
	case "continue":
		return &continueNode{}, p.blockEnd()
	}
	p.pos--
	return nil, p.errorf("Encountered unknown tag '%s'.", name)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		c, err := p.parseTuple(false)
		if err != nil {
			return nil, err
		}
		if err := p.blockEnd(); err != nil {
			return nil, err
		}
		b, end, err := p.body("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, c)
		n.bodies = append(n.bodies, b)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.blockEnd(); err != nil {
				return nil, err
			}
			n.els, _, err = p.body("endif")
			if err != nil {
				return nil, err
			}
		}
		return n, p.blockEnd()
	}
}

func (p *parser) parseAssignTarget(allowNamespace bool) (expr, error) {
	first := p.cur()
	if allowNamespace && first.kind == tName && p.peek(1).kind == tOp && p.peek(1).val == "." && p.peek(2).kind == tName {
		p.pos += 3
		return &getattrExpr{obj: &nameExpr{name: first.val, line: first.line}, name: p.toks[p.pos-1].val}, nil
	}
	var names []expr
	paren := p.skipOp("(")
	for {
		t, err := p.expectKind(tName)
		if err != nil {
			return nil, err
		}
		names = append(names, &nameExpr{name: t.val, line: t.line})
		if !p.skipOp(",") {
			break
		}
		if p.cur().kind != tName {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
	}
	if len(names) == 1 && !paren {
		return names[0], nil
	}
	return &tupleExpr{items: names}, nil
}

func (p *parser) parseFor() (node, error) {
	target, err := p.parseAssignTarget(false)
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errorf("expected token 'in', got %s", p.cur().describe())
	}
	iter, err := p.parseTuple(true)
	if err != nil {
		return nil, err
	}
	n := &forNode{target: target, iter: iter}
	if p.skipName("if") {
		if n.cond, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errorf("recursive for loops are not supported")
	}
	if err := p.blockEnd(); err != nil {
		return nil, err
	}
	b, end, err := p.body("endfor", "else")
	if err != nil {
		return nil, err
	}
	n.body = b
	if end == "else" {
		if err := p.blockEnd(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.body("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.blockEnd()
}

func (p *parser) parseSet() (node, error) {
	target, err := p.parseAssignTarget(true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		v, err := p.parseTuple(false)
		if err != nil {
			return nil, err
		}
		return &setNode{target: target, value: v}, p.blockEnd()
	}
	n := &setBlockNode{target: target}
	for p.skipOp("|") {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.blockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.body("endset"); err != nil {
		return nil, err
	}
	return n, p.blockEnd()
}

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &macroNode{name: name}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(n.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		pn, err := p.expectName()
		if err != nil {
			return nil, err
		}
		var def expr
		if p.skipOp("=") {
			if def, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		} else if len(n.defaults) > 0 && n.defaults[len(n.defaults)-1] != nil {
			return nil, p.errorf("non-default argument follows default argument")
		}
		n.params = append(n.params, pn)
		n.defaults = append(n.defaults, def)
	}
	p.pos++
	if err := p.blockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.body("endmacro"); err != nil {
		return nil, err
	}
	if p.cur().kind == tName && p.cur().val == name {
		p.pos++
	}
	return n, p.blockEnd()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for p.cur().kind != tBlockEnd {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseAssignTarget(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, t)
		n.values = append(n.values, v)
	}
	p.pos++
	var err error
	if n.body, _, err = p.body("endwith"); err != nil {
		return nil, err
	}
	return n, p.blockEnd()
}

func (p *parser) parseFilterBlock() (node, error) {
	n := &filterBlockNode{}
	for {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
		if !p.skipOp("|") {
			break
		}
	}
	if err := p.blockEnd(); err != nil {
		return nil, err
	}
	var err error
	if n.body, _, err = p.body("endfilter"); err != nil {
		return nil, err
	}
	return n, p.blockEnd()
}

// parseTuple is jinja2's parse_tuple: an expression, or several separated by
// commas (a tuple). simplified means no conditional expressions (for targets).
func (p *parser) parseTuple(simplified bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			isTuple = true
		}
		if p.tupleEnds() {
			break
		}
		e, err := p.parseExpr(!simplified)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if !isTuple {
		if len(items) == 0 {
			return nil, p.errorf("Expected an expression, got %s", p.cur().describe())
		}
		return items[0], nil
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) tupleEnds() bool {
	t := p.cur()
	switch t.kind {
	case tVarEnd, tBlockEnd, tEOF:
		return true
	case tOp:
		return t.val == ")" || t.val == "]" || t.val == "}"
	case tName:
		return t.val == "in" || t.val == "if" || t.val == "recursive"
	}
	return false
}

func (p *parser) parseExpr(withCond bool) (expr, error) {
	if !withCond {
		return p.parseOr()
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var f expr
		if p.skipName("else") {
			if f, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		}
		e = &condExpr{test: test, t: e, f: f}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.skipName("or") {
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &orExpr{l, r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.skipName("and") {
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &andExpr{l, r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{e}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	n := &cmpExpr{first: first}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.pos++
		case t.kind == tName && t.val == "in":
			op = "in"
			p.pos++
		case t.kind == tName && t.val == "not" && p.peek(1).kind == tName && p.peek(1).val == "in":
			op = "notin"
			p.pos += 2
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		n.ops = append(n.ops, op)
		n.rest = append(n.rest, r)
	}
	if len(n.ops) == 0 {
		return first, nil
	}
	return n, nil
}

func (p *parser) parseBinary(next func() (expr, error), ops ...string) (expr, error) {
	l, err := next()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		op := ""
		if t.kind == tOp {
			for _, o := range ops {
				if t.val == o {
					op = o
				}
			}
		}
		if op == "" {
			return l, nil
		}
		p.pos++
		r, err := next()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: op, l: l, r: r}
	}
}

func (p *parser) parseMath1() (expr, error)  { return p.parseBinary(p.parseConcat, "+", "-") }
func (p *parser) parseConcat() (expr, error) { return p.parseBinary(p.parseMath2, "~") }
func (p *parser) parseMath2() (expr, error) {
	return p.parseBinary(p.parsePow, "*", "/", "//", "%")
}
func (p *parser) parsePow() (expr, error) {
	return p.parseBinary(func() (expr, error) { return p.parseUnary(true) }, "**")
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var e expr
	var err error
	switch {
	case p.skipOp("-"):
		if e, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		e = &negExpr{e}
	case p.skipOp("+"):
		if e, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		e = &posExpr{e}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.pos++
		switch t.val {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{None}, nil
		}
		return &nameExpr{name: t.val, line: t.line}, nil
	case tString:
		p.pos++
		s := t.val
		for p.cur().kind == tString {
			s += p.next().val
		}
		return &constExpr{s}, nil
	case tInt:
		p.pos++
		return &constExpr{t.ival}, nil
	case tFloat:
		p.pos++
		return &constExpr{t.fval}, nil
	case tOp:
		switch t.val {
		case "(":
			p.pos++
			if p.skipOp(")") {
				return &tupleExpr{}, nil
			}
			e, err := p.parseTuple(false)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.pos++
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				e, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
			}
			p.pos++
			return l, nil
		case "{":
			p.pos++
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.pos++
			return d, nil
		}
	}
	return nil, p.errorf("unexpected %s", t.describe())
}

// tupleParens wraps parseTuple for "(a, b)" used as a value; kept simple.

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		t := p.cur()
		if t.kind != tOp {
			return e, nil
		}
		var err error
		switch t.val {
		case ".":
			p.pos++
			a := p.next()
			switch a.kind {
			case tName:
				e = &getattrExpr{obj: e, name: a.val}
			case tInt:
				e = &getitemExpr{obj: e, index: &constExpr{a.ival}}
			default:
				return nil, p.errorf("expected name or number")
			}
		case "[":
			p.pos++
			if e, err = p.parseSubscript(e); err != nil {
				return nil, err
			}
		case "(":
			p.pos++
			args, err := p.parseArgs()
			if err != nil {
				return nil, err
			}
			e = &callExpr{fn: e, args: args}
		default:
			return e, nil
		}
	}
}

// parseSubscript parses after "[": an index, a slice, or several (a tuple).
func (p *parser) parseSubscript(obj expr) (expr, error) {
	var items []expr
	var slice *sliceExpr
	for !p.isOp("]") {
		if len(items) > 0 || slice != nil {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			return nil, p.errorf("multi-dimensional subscripts are not supported")
		}
		var first expr
		var err error
		if !p.isOp(":") {
			if first, err = p.parseExpr(true); err != nil {
				return nil, err
			}
			if !p.isOp(":") {
				items = append(items, first)
				continue
			}
		}
		p.pos++ // ':'
		s := &sliceExpr{obj: obj, start: first}
		if !p.isOp("]") && !p.isOp(",") && !p.isOp(":") {
			if s.stop, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		}
		if p.skipOp(":") {
			if !p.isOp("]") && !p.isOp(",") {
				if s.step, err = p.parseExpr(true); err != nil {
					return nil, err
				}
			}
		}
		slice = s
	}
	p.pos++
	if slice != nil {
		return slice, nil
	}
	if len(items) == 0 {
		return nil, p.errorf("expected subscript expression")
	}
	return &getitemExpr{obj: obj, index: items[0]}, nil
}

// parseArgs parses call arguments after "(" through ")".
func (p *parser) parseArgs() (argList, error) {
	var a argList
	first := true
	for !p.isOp(")") {
		if !first {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.isOp(")") {
				break
			}
		}
		first = false
		switch {
		case p.skipOp("*"):
			e, err := p.parseExpr(true)
			if err != nil {
				return a, err
			}
			a.star = e
		case p.skipOp("**"):
			e, err := p.parseExpr(true)
			if err != nil {
				return a, err
			}
			a.star2 = e
		case p.cur().kind == tName && p.peek(1).kind == tOp && p.peek(1).val == "=":
			name := p.next().val
			p.pos++
			e, err := p.parseExpr(true)
			if err != nil {
				return a, err
			}
			a.kwNames = append(a.kwNames, name)
			a.kwVals = append(a.kwVals, e)
		default:
			if len(a.kwNames) > 0 || a.star != nil || a.star2 != nil {
				return a, p.errorf("Invalid argument syntax")
			}
			e, err := p.parseExpr(true)
			if err != nil {
				return a, err
			}
			a.pos = append(a.pos, e)
		}
	}
	p.pos++
	return a, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.skipOp("|"):
			f, err := p.parseFilter(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.skipName("is"):
			t, err := p.parseTest(e)
			if err != nil {
				return nil, err
			}
			e = t
		case p.isOp("("):
			p.pos++
			args, err := p.parseArgs()
			if err != nil {
				return nil, err
			}
			e = &callExpr{fn: e, args: args}
		default:
			return e, nil
		}
	}
}

func (p *parser) parseDottedName() (string, error) {
	name, err := p.expectName()
	if err != nil {
		return "", err
	}
	for p.isOp(".") && p.peek(1).kind == tName {
		p.pos++
		name += "." + p.next().val
	}
	return name, nil
}

func (p *parser) parseFilter(obj expr) (*filterExpr, error) {
	name, err := p.parseDottedName()
	if err != nil {
		return nil, err
	}
	if _, ok := filters[name]; !ok {
		return nil, p.errorf("No filter named '%s'.", name)
	}
	f := &filterExpr{obj: obj, name: name}
	if p.skipOp("(") {
		if f.args, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(obj expr) (expr, error) {
	negated := p.skipName("not")
	name, err := p.parseDottedName()
	if err != nil {
		return nil, err
	}
	if _, ok := tests[name]; !ok {
		return nil, p.errorf("No test named '%s'.", name)
	}
	t := &testExpr{obj: obj, name: name}
	cur := p.cur()
	switch {
	case p.skipOp("("):
		if t.args, err = p.parseArgs(); err != nil {
			return nil, err
		}
	case cur.kind == tString || cur.kind == tInt || cur.kind == tFloat ||
		(cur.kind == tOp && (cur.val == "(" || cur.val == "[" || cur.val == "{")) ||
		(cur.kind == tName && cur.val != "else" && cur.val != "or" && cur.val != "and"):
		if cur.kind == tName && cur.val == "is" {
			return nil, p.errorf("You cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		t.args.pos = []expr{arg}
	}
	if negated {
		return &notExpr{t}, nil
	}
	return t, nil
}
