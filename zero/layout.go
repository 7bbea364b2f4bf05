package zero

import "fmt"

// Align is the element alignment of every shard inside its unit: 16
// elements, a 64-byte cache line of F32 (and an even number, so the two
// BF16 master halves packed per I32 never straddle two owners).
const Align = 16

// Unit is one contiguous range [Off, Off+N) of a flat buffer that is
// sharded on its own: every rank owns an equal slice of it (Plan), so a
// unit is gathered or reduce-scattered by one collective (in chunks).
// ZeRO-3 makes each decoder layer a unit, so a layer's parameters can be
// gathered just before it runs.
type Unit struct {
	Off, N int
	Plan   Plan
}

// Range is a run [Lo, Hi) of a flat buffer's elements.
type Range struct{ Lo, Hi int }

// Len is the number of elements in the range.
func (r Range) Len() int { return r.Hi - r.Lo }

// Layout shards a flat buffer of N elements, cut into consecutive units,
// over Size ranks; this process is Rank.
type Layout struct {
	N, Size, Rank int
	Units         []Unit
}

// NewLayout cuts a buffer into units of the given sizes (consecutive,
// covering it) and shards each over size ranks. Every unit must start at
// an even element, so that BF16 masters packed two per I32 split cleanly.
func NewLayout(sizes []int, size, rank int) (Layout, error) {
	if size < 1 || rank < 0 || rank >= size {
		return Layout{}, fmt.Errorf("zero: rank %d of %d", rank, size)
	}
	l := Layout{Size: size, Rank: rank}
	for i, n := range sizes {
		if l.N%2 != 0 {
			return Layout{}, fmt.Errorf("zero: unit %d starts at odd element %d", i, l.N)
		}
		p, err := NewPlan(n, size, Align)
		if err != nil {
			return Layout{}, err
		}
		l.Units = append(l.Units, Unit{Off: l.N, N: n, Plan: p})
		l.N += n
	}
	return l, nil
}

// Piece is the range of unit u that rank owns (possibly empty), in the
// buffer's coordinates.
func (l Layout) Piece(u, rank int) Range {
	un := l.Units[u]
	lo, hi := un.Plan.Range(rank)
	return Range{un.Off + lo, un.Off + hi}
}

// Owned is every non-empty range this rank owns, in buffer order.
func (l Layout) Owned() []Range {
	var out []Range
	for u := range l.Units {
		if p := l.Piece(u, l.Rank); p.Len() > 0 {
			out = append(out, p)
		}
	}
	return out
}

// OwnedElems is the number of elements this rank owns.
func (l Layout) OwnedElems() int {
	n := 0
	for _, r := range l.Owned() {
		n += r.Len()
	}
	return n
}

// Intersect returns the parts of [lo, hi) that rank owns, in order.
func (l Layout) Intersect(lo, hi int) []Range {
	var out []Range
	for _, r := range l.Owned() {
		a, b := max(lo, r.Lo), min(hi, r.Hi)
		if a < b {
			out = append(out, Range{a, b})
		}
	}
	return out
}
