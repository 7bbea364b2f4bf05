package tokenizer

import (
	"slices"
	"testing"
)

// naiveMerge is the reference merge: repeatedly merge the adjacent pair with
// the lowest rank, the leftmost among equal ranks.
func naiveMerge(t *mergeTable, syms []int32) []int32 {
	syms = slices.Clone(syms)
	for {
		best, bi, bid := int32(noMerge), -1, int32(0)
		for i := 0; i+1 < len(syms); i++ {
			if r, id := t.get(syms[i], syms[i+1]); r < best {
				best, bi, bid = r, i, id
			}
		}
		if bi < 0 {
			return syms
		}
		syms = slices.Replace(syms, bi, bi+2, bid)
	}
}

// randomMerges builds a merge table over a small alphabet from fuzz bytes:
// each triple (a, b, c) is the merge a+b -> c with the next rank.
func randomMerges(data []byte) *mergeTable {
	t := newMergeTable(len(data) / 3)
	for i := 0; i+2 < len(data); i += 3 {
		t.set(int32(data[i]%8), int32(data[i+1]%8), int32(i/3), int32(data[i+2]%8))
	}
	return t
}

// FuzzMerge checks the quadratic and the heap merge against the naive one.
func FuzzMerge(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 0, 2}, []byte{0, 0, 0, 0})
	f.Add([]byte{1, 2, 3, 2, 3, 4, 3, 1, 5, 0, 0, 0}, []byte{1, 2, 3, 1, 2, 3, 2, 3, 1, 0, 0})
	f.Fuzz(func(t *testing.T, table, word []byte) {
		// Long inputs add nothing but time: naiveMerge is quadratic.
		word, table = word[:min(len(word), 1000)], table[:min(len(table), 3000)]
		m := randomMerges(table)
		syms := make([]int32, len(word))
		for i, b := range word {
			syms[i] = int32(b % 8)
		}
		want := naiveMerge(m, syms)
		var sc mergeScratch
		if len(syms) <= shortWord {
			if got := m.merge(slices.Clone(syms), &sc); !slices.Equal(got, want) {
				t.Fatalf("merge(%v) = %v, want %v", syms, got, want)
			}
		}
		if len(syms) > 0 {
			if got := m.mergeLong(slices.Clone(syms), &sc); !slices.Equal(got, want) {
				t.Fatalf("mergeLong(%v) = %v, want %v", syms, got, want)
			}
		}
	})
}

func TestMergeTable(t *testing.T) {
	m := newMergeTable(3)
	m.set(1, 2, 0, 10)
	m.set(2, 3, 1, 11)
	m.set(1, 2, 2, 12) // a later duplicate replaces the earlier merge
	for _, c := range []struct{ a, b, rank, id int32 }{{1, 2, 2, 12}, {2, 3, 1, 11}, {3, 2, noMerge, -1}, {0, 0, noMerge, -1}} {
		if r, id := m.get(c.a, c.b); r != c.rank || id != c.id {
			t.Errorf("get(%d, %d) = %d, %d; want %d, %d", c.a, c.b, r, id, c.rank, c.id)
		}
	}
	// A long word goes through the heap; the result must not depend on it.
	word := make([]int32, 3*shortWord)
	for i := range word {
		word[i] = int32(1 + i%3)
	}
	var sc mergeScratch
	if got, want := m.merge(slices.Clone(word), &sc), naiveMerge(m, word); !slices.Equal(got, want) {
		t.Errorf("long word: %v, want %v", got, want)
	}
}
