package cpu

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/kernels"
)

// BF16 is a CPU buffer of bfloat16 values stored as their bit patterns: the
// upper 16 bits of the float32 of the same value.
type BF16 []uint16

// DType implements kernels.Buffer.
func (BF16) DType() kernels.DType { return kernels.BF16 }

// Len implements kernels.Buffer.
func (b BF16) Len() int { return len(b) }

// Slice implements kernels.Buffer.
func (b BF16) Slice(off, n int) kernels.Buffer { return b[off : off+n : off+n] }

// bf16 returns the slice behind a BF16 buffer; nil stays nil.
func bf16(b kernels.Buffer) []uint16 {
	if b == nil {
		return nil
	}
	s, ok := b.(BF16)
	if !ok {
		panic(fmt.Sprintf("cpu: want a BF16 buffer, got %T", b))
	}
	return s
}

// isBF16 reports whether b is a BF16 buffer (false for nil).
func isBF16(b kernels.Buffer) bool {
	_, ok := b.(BF16)
	return ok
}

// ToBF16 rounds f to the nearest bfloat16, ties to even (what PyTorch's
// .to(torch.bfloat16) and VCVTNEPS2BF16 do). NaNs stay NaN (quiet);
// infinities and signed zeros are kept; values past the largest finite
// bfloat16 round to infinity.
func ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// FromBF16 widens a bfloat16 to float32 (exact).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// roundSliceBF16 writes dst[i] = ToBF16(src[i]).
func roundSliceBF16(dst []uint16, src []float32) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("cpu: conversion of %d elements into %d", len(src), len(dst)))
	}
	if roundBF16Vec(dst, src) {
		return
	}
	for i, f := range src {
		dst[i] = ToBF16(f)
	}
}

// widenSliceBF16 writes dst[i] = FromBF16(src[i]).
func widenSliceBF16(dst []float32, src []uint16) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("cpu: conversion of %d elements into %d", len(src), len(dst)))
	}
	if widenBF16Vec(dst, src) {
		return
	}
	for i, h := range src {
		dst[i] = FromBF16(h)
	}
}

// asF32 returns the values of an F32 or BF16 buffer as float32: the F32
// slice itself, or a widened copy of a BF16 one. For small operands (biases,
// LayerNorm weights) that kernels read as float32.
func asF32(b kernels.Buffer) []float32 {
	switch s := b.(type) {
	case nil:
		return nil
	case F32:
		return s
	case BF16:
		out := make([]float32, len(s))
		widenSliceBF16(out, s)
		return out
	}
	panic(fmt.Sprintf("cpu: want an F32 or BF16 buffer, got %T", b))
}
