package data

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file holds the seeded shuffling and the phase split. Both mirror
// DeepSpeed-Chat's data_utils.py exactly, so that a gochat run with the same
// --seed and --data-split selects the same rows, in the same order, as
// DeepSpeed-Chat does: get_shuffle_idx is numpy's legacy
// RandomState(seed).shuffle(arange(n)), a Fisher-Yates shuffle driven by
// MT19937, and get_raw_dataset_split_index cuts that permutation into slices
// whose sizes are rounded with Python's round (half to even).

// mt19937 is the 32-bit Mersenne Twister as numpy's legacy RandomState uses it.
type mt19937 struct {
	key [624]uint32
	pos int
}

// newMT19937 seeds the generator the way RandomState(seed) does for an
// integer seed (Matsumoto and Nishimura's init_genrand).
func newMT19937(seed uint32) *mt19937 {
	m := &mt19937{}
	m.key[0] = seed
	for i := 1; i < len(m.key); i++ {
		prev := m.key[i-1]
		m.key[i] = 1812433253*(prev^(prev>>30)) + uint32(i)
	}
	m.pos = len(m.key)
	return m
}

// uint32 returns the next tempered 32-bit output.
func (m *mt19937) uint32() uint32 {
	const n, k = 624, 397
	if m.pos >= n {
		for i := 0; i < n; i++ {
			y := (m.key[i] & 0x80000000) | (m.key[(i+1)%n] & 0x7fffffff)
			v := m.key[(i+k)%n] ^ (y >> 1)
			if y&1 != 0 {
				v ^= 0x9908b0df
			}
			m.key[i] = v
		}
		m.pos = 0
	}
	y := m.key[m.pos]
	m.pos++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// interval returns a uniform integer in [0, max] by masked rejection
// sampling (numpy's random_interval).
func (m *mt19937) interval(max uint64) uint64 {
	if max == 0 {
		return 0
	}
	mask := max
	mask |= mask >> 1
	mask |= mask >> 2
	mask |= mask >> 4
	mask |= mask >> 8
	mask |= mask >> 16
	mask |= mask >> 32
	if max <= math.MaxUint32 {
		for {
			if v := uint64(m.uint32()) & mask; v <= max {
				return v
			}
		}
	}
	for {
		hi := uint64(m.uint32())
		v := (hi<<32 | uint64(m.uint32())) & mask
		if v <= max {
			return v
		}
	}
}

// Permutation returns a seeded permutation of 0..n-1: the same array as
// numpy.random.RandomState(seed).shuffle(numpy.arange(n)), which is
// DeepSpeed-Chat's get_shuffle_idx(seed, n).
func Permutation(seed uint32, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	m := newMT19937(seed)
	for i := n - 1; i > 0; i-- {
		j := int(m.interval(uint64(i)))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// Split holds the relative sizes of the slices a dataset is cut into, such as
// 2,4,4 for the three training phases (--data-split) or 9,1 for a train/eval
// split made from a train-only dataset.
type Split []float64

// ParseSplit parses a comma-separated split such as "2,4,4". The parts must
// be finite, non-negative and not all zero.
func ParseSplit(s string) (Split, error) {
	parts := strings.Split(s, ",")
	sp := make(Split, len(parts))
	sum := 0.0
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("data split %q: part %d (%q) is not a non-negative number", s, i+1, p)
		}
		sp[i] = v
		sum += v
	}
	if sum <= 0 {
		return nil, fmt.Errorf("data split %q: the parts sum to zero", s)
	}
	return sp, nil
}

// String formats the split as DeepSpeed-Chat writes it ("2,4,4").
func (s Split) String() string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// Bounds returns the len(s)+1 slice boundaries for n rows: slice i is
// [b[i], b[i+1]). Sizes are round(fraction·n) with Python's round (half to
// even), and all boundaries are shifted so the last one is n, exactly as
// DeepSpeed-Chat's get_raw_dataset_split_index computes them.
func (s Split) Bounds(n int) []int {
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	b := make([]int, len(s)+1)
	for i, v := range s {
		frac := v / sum
		b[i+1] = b[i] + int(math.RoundToEven(frac*float64(n)))
	}
	diff := b[len(s)] - n
	for i := 1; i < len(b); i++ {
		b[i] -= diff
	}
	return b
}

// Slice returns the rows of slice i (0-based) of a dataset of n rows: the
// seeded permutation of 0..n-1 cut at Bounds, in permutation order.
func (s Split) Slice(seed uint32, n, i int) []int {
	if i < 0 || i >= len(s) {
		panic(fmt.Sprintf("data: split slice %d out of range [0,%d)", i, len(s)))
	}
	b := s.Bounds(n)
	lo, hi := max(b[i], 0), min(b[i+1], n)
	if hi <= lo {
		return nil
	}
	return Permutation(seed, n)[lo:hi]
}
