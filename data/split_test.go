package data

import (
	"reflect"
	"testing"
)

// The permutations below were produced by numpy 1.24 (python3-numpy):
//
//	r = numpy.random.RandomState(seed); i = numpy.arange(n, dtype=numpy.uint32); r.shuffle(i)
//
// which is DeepSpeed-Chat's get_shuffle_idx(seed, n).
func TestPermutationMatchesNumpy(t *testing.T) {
	for _, c := range []struct {
		seed uint32
		n    int
		want []int
	}{
		{0, 10, []int{2, 8, 4, 9, 1, 6, 7, 3, 0, 5}},
		{42, 10, []int{8, 1, 5, 0, 7, 2, 9, 4, 3, 6}},
		{1234, 24, []int{7, 16, 2, 3, 1, 18, 5, 4, 0, 8, 13, 21, 10, 22, 20, 14, 11, 9, 17, 23, 12, 6, 19, 15}},
		{1234, 21, []int{3, 13, 2, 16, 14, 5, 4, 0, 8, 18, 17, 11, 10, 9, 7, 1, 20, 12, 6, 19, 15}},
		{4294967295, 7, []int{1, 5, 0, 6, 4, 2, 3}},
		{1234, 3, []int{0, 1, 2}},
		{1234, 1, []int{0}},
		{1234, 0, []int{}},
	} {
		if got := Permutation(c.seed, c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Permutation(%d, %d) = %v, numpy gives %v", c.seed, c.n, got, c.want)
		}
	}
	p := Permutation(1234, 1000)
	if first, last := p[:20], p[995:]; !reflect.DeepEqual(first, []int{681, 990, 155, 768, 438, 363, 688, 555, 620, 99, 756, 428, 888, 89, 982, 495, 29, 175, 466, 40}) ||
		!reflect.DeepEqual(last, []int{204, 53, 294, 723, 815}) {
		t.Errorf("Permutation(1234, 1000) = %v ... %v, differs from numpy", first, last)
	}
}

func TestMT19937Reference(t *testing.T) {
	// First outputs of the reference MT19937 for the default seed 5489.
	m := newMT19937(5489)
	for i, want := range []uint32{3499211612, 581869302, 3890346734, 3586334585} {
		if got := m.uint32(); got != want {
			t.Fatalf("output %d = %d, want %d", i, got, want)
		}
	}
}

// The bounds below come from DeepSpeed-Chat's get_raw_dataset_split_index
// arithmetic run in Python (round is half to even there).
func TestSplitBounds(t *testing.T) {
	for _, c := range []struct {
		split string
		n     int
		want  []int
	}{
		{"2,4,4", 24, []int{0, 4, 14, 24}},
		{"2,4,4", 10, []int{0, 2, 6, 10}},
		{"9,1", 24, []int{0, 22, 24}},
		{"1,1,1", 10, []int{0, 4, 7, 10}},
		{"2,4,4", 5, []int{0, 1, 3, 5}},
		{"1,2,1", 2, []int{0, 1, 2, 2}},
		{"6,2,2", 1, []int{0, 1, 1, 1}},
		{"10,0,0", 7, []int{0, 7, 7, 7}},
		{"2,4,4", 0, []int{0, 0, 0, 0}},
		{"0.5,0.5,1", 3, []int{0, 0, 1, 3}},
		{"2,4,4", 76256, []int{0, 15252, 45754, 76256}},
	} {
		s, err := ParseSplit(c.split)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Bounds(c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%s).Bounds(%d) = %v, want %v", c.split, c.n, got, c.want)
		}
	}
}

func TestSplitSlice(t *testing.T) {
	s := Split{2, 4, 4}
	perm := Permutation(1234, 24)
	want := [][]int{perm[0:4], perm[4:14], perm[14:24]}
	seen := map[int]bool{}
	for i := range 3 {
		got := s.Slice(1234, 24, i)
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("slice %d = %v, want %v", i, got, want[i])
		}
		for _, r := range got {
			if seen[r] {
				t.Errorf("row %d in two slices", r)
			}
			seen[r] = true
		}
	}
	if len(seen) != 24 {
		t.Errorf("slices cover %d of 24 rows", len(seen))
	}
}

func TestParseSplit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Split
		bad  bool
	}{
		{"2,4,4", Split{2, 4, 4}, false},
		{" 6, 2 ,2", Split{6, 2, 2}, false},
		{"10,0,0", Split{10, 0, 0}, false},
		{"0.5,0.25,0.25", Split{0.5, 0.25, 0.25}, false},
		{"", nil, true},
		{"2,x,4", nil, true},
		{"2,-1,4", nil, true},
		{"0,0,0", nil, true},
		{"NaN,1,1", nil, true},
		{"Inf,1,1", nil, true},
	} {
		got, err := ParseSplit(c.in)
		if (err != nil) != c.bad || (!c.bad && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("ParseSplit(%q) = %v, %v", c.in, got, err)
		}
	}
	if s := (Split{2, 4, 4}).String(); s != "2,4,4" {
		t.Errorf("String = %q", s)
	}
}

func TestAssignEvalFromTrain(t *testing.T) {
	// A train-only dataset: 9:1 cut first, then 2,4,4 over each part.
	n := 24
	nine := Permutation(7, n)
	b := Split{9, 1}.Bounds(n) // [0 22 24]
	for part, base := range [][]int{nine[b[0]:b[1]], nine[b[1]:b[2]]} {
		a, err := assign(int64(n), true, Part(part), Split{2, 4, 4}, 7)
		if err != nil {
			t.Fatal(err)
		}
		perm := Permutation(7, len(base))
		pb := Split{2, 4, 4}.Bounds(len(base))
		for k := range 3 {
			for i := pb[k]; i < pb[k+1]; i++ {
				g := base[perm[i]]
				if int(a.phase[g]) != k || int(a.pos[g]) != i-pb[k] {
					t.Errorf("part %d: row %d: phase %d pos %d, want %d %d", part, g, a.phase[g], a.pos[g], k, i-pb[k])
				}
			}
		}
		inPart := 0
		for _, p := range a.phase {
			if p >= 0 {
				inPart++
			}
		}
		if inPart != len(base) {
			t.Errorf("part %d has %d rows, want %d", part, inPart, len(base))
		}
	}
}
