package tokenizer

import (
	"math"
	"math/bits"
)

// mergeTable maps a pair of token ids (a, b) to the rank of the merge "a b"
// (its 0-based line in the merge list; lower merges first) and the id of
// the merged token. It is an open-addressing hash table with linear
// probing: lookups are the inner loop of BPE, and this is several times
// faster than a Go map. Read-only after construction.
type mergeTable struct {
	slots []mergeSlot
	shift uint // 64 - log2(len(slots))
}

// mergeSlot keeps key and value side by side: one cache line per probe.
type mergeSlot struct {
	key uint64 // a<<32 | b; emptyKey marks a free slot
	val uint64 // rank<<32 | merged id
}

const emptyKey = math.MaxUint64

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// newMergeTable sizes a table for n merges.
func newMergeTable(n int) *mergeTable {
	size := 16
	for size < 2*n {
		size *= 2
	}
	t := &mergeTable{slots: make([]mergeSlot, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
	for i := range t.slots {
		t.slots[i].key = emptyKey
	}
	return t
}

func (t *mergeTable) slot(k uint64) int {
	return int((k * 0x9E3779B97F4A7C15) >> t.shift)
}

// set records the merge a+b -> id with rank; a later set of the same pair
// replaces the earlier one, as Hugging Face's HashMap of merges does.
func (t *mergeTable) set(a, b int32, rank, id int32) {
	k := pairKey(a, b)
	mask := len(t.slots) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		if s := &t.slots[i]; s.key == k || s.key == emptyKey {
			*s = mergeSlot{k, uint64(uint32(rank))<<32 | uint64(uint32(id))}
			return
		}
	}
}

// get returns the rank of merging a and b and the merged id; rank is
// noMerge when there is no such merge.
func (t *mergeTable) get(a, b int32) (rank, id int32) {
	k := pairKey(a, b)
	mask := len(t.slots) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		s := t.slots[i]
		switch s.key {
		case k:
			return int32(s.val >> 32), int32(uint32(s.val))
		case emptyKey:
			return noMerge, -1
		}
	}
}

// noMerge is the rank of a pair that has no merge; it sorts after all ranks.
const noMerge = math.MaxInt32

// shortWord is the longest word (in symbols) merged by the quadratic scan;
// longer words use the heap, which is O(n log n).
const shortWord = 48

// merge applies the merges to the symbol ids in syms (modified in place) and
// returns the merged ids, a prefix of syms. Of all adjacent pairs that have
// a merge, the one with the lowest rank is merged first, and among equal
// ranks the leftmost: Hugging Face's Word::merge_all, whose priority queue
// orders by (rank, position).
func (t *mergeTable) merge(syms []int32, sc *mergeScratch) []int32 {
	if len(syms) < 2 {
		return syms
	}
	if len(syms) > shortWord {
		return t.mergeLong(syms, sc)
	}
	var rankBuf, idBuf [shortWord]int32
	n := len(syms)
	ranks, ids := rankBuf[:n-1], idBuf[:n-1]
	for i := range ranks {
		ranks[i], ids[i] = t.get(syms[i], syms[i+1])
	}
	for n > 1 {
		best, bi := int32(noMerge), -1
		for i, r := range ranks[:n-1] {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		syms[bi] = ids[bi]
		copy(syms[bi+1:n], syms[bi+2:n])
		copy(ranks[bi:n-1], ranks[bi+1:n-1])
		copy(ids[bi:n-1], ids[bi+1:n-1])
		n--
		if bi > 0 {
			ranks[bi-1], ids[bi-1] = t.get(syms[bi-1], syms[bi])
		}
		if bi < n-1 {
			ranks[bi], ids[bi] = t.get(syms[bi], syms[bi+1])
		}
	}
	return syms[:n]
}

// mergeScratch holds the buffers of mergeLong, reused between words.
type mergeScratch struct {
	next, prev []int32
	heap       []uint64 // rank<<32 | position of the pair's left symbol
}

// mergeLong is merge for long words: a doubly linked list of symbols and a
// binary min-heap of candidate pairs keyed by (rank, left position), with
// stale entries skipped when popped (an entry is stale when the pair at its
// position no longer has its rank).
func (t *mergeTable) mergeLong(syms []int32, sc *mergeScratch) []int32 {
	n := len(syms)
	sc.next = grow(sc.next, n)
	sc.prev = grow(sc.prev, n)
	next, prev := sc.next, sc.prev
	h := sc.heap[:0]
	for i := range n {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1
	for i := 0; i < n-1; i++ {
		if r, _ := t.get(syms[i], syms[i+1]); r != noMerge {
			h = heapPush(h, uint64(r)<<32|uint64(i))
		}
	}
	for len(h) > 0 {
		var top uint64
		top, h = heapPop(h)
		rank, pos := int32(top>>32), int32(uint32(top))
		if syms[pos] < 0 {
			continue
		}
		nx := next[pos]
		if nx < 0 {
			continue
		}
		r, id := t.get(syms[pos], syms[nx])
		if r != rank {
			continue
		}
		syms[pos], syms[nx] = id, -1
		next[pos] = next[nx]
		if q := next[pos]; q >= 0 {
			prev[q] = pos
			if r, _ := t.get(id, syms[q]); r != noMerge {
				h = heapPush(h, uint64(r)<<32|uint64(pos))
			}
		}
		if p := prev[pos]; p >= 0 {
			if r, _ := t.get(syms[p], id); r != noMerge {
				h = heapPush(h, uint64(r)<<32|uint64(p))
			}
		}
	}
	sc.heap = h
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func heapPop(h []uint64) (uint64, []uint64) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r] < h[l] {
			m = r
		}
		if h[i] <= h[m] {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top, h
}
