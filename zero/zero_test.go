package zero

import "testing"

func TestPlanCoversExactlyOnce(t *testing.T) {
	for _, c := range []struct{ n, size, align int }{{0, 1, 1}, {10, 1, 1}, {10, 3, 1}, {10, 3, 4}, {125239296, 8, 16}, {5, 8, 16}} {
		p, err := NewPlan(c.n, c.size, c.align)
		if err != nil {
			t.Fatal(err)
		}
		if p.Padded < c.n || p.Shard%c.align != 0 || p.Padded != p.Shard*c.size {
			t.Errorf("%+v: plan %+v", c, p)
		}
		next := 0
		for r := range c.size {
			lo, hi := p.Range(r)
			if lo != next || hi < lo {
				t.Fatalf("%+v: rank %d owns [%d,%d), want to start at %d", c, r, lo, hi, next)
			}
			next = hi
		}
		if next != c.n {
			t.Errorf("%+v: ranks cover %d of %d elements", c, next, c.n)
		}
	}
	if _, err := NewPlan(10, 0, 1); err == nil {
		t.Error("zero ranks accepted")
	}
}

func TestStages(t *testing.T) {
	want := [][3]bool{{false, false, false}, {true, false, false}, {true, true, false}, {true, true, true}}
	for s, w := range want {
		st := Stage(s)
		if err := st.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := [3]bool{st.PartitionsOptimizer(), st.PartitionsGrads(), st.PartitionsParams()}; got != w {
			t.Errorf("stage %d: %v, want %v", s, got, w)
		}
	}
	if Stage(4).Validate() == nil {
		t.Error("stage 4 accepted")
	}
}
