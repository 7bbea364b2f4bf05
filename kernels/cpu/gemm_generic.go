package cpu

import "unsafe"

// The portable micro-kernel: plain Go, used for isaGeneric and on every
// architecture without an assembly kernel. A 4×4 tile keeps its sixteen
// accumulators in registers on amd64 (16 XMM) and arm64 (32 V registers).

const (
	gemmGenericMR = 4
	gemmGenericNR = 4
)

var gemmGeneric = gemmKernel{
	name: "generic",
	mr:   gemmGenericMR, nr: gemmGenericNR,
	kc: 256, mc: 128, nc: 1024,
	tile:  gemmTileGeneric,
	dot:   gemmDotGeneric,
	axpy:  gemmAxpyGeneric,
	packA: gemmPackAPanel,
	packB: gemmPackBPanel,
}

// gemmTileGeneric is the generic 4×4 micro-kernel (see gemmKernel.tile).
func gemmTileGeneric(k int, a, b, c *float32, ldc int, beta float32) {
	ap := unsafe.Slice(a, k*gemmGenericMR)
	bp := unsafe.Slice(b, k*gemmGenericNR)
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	var c20, c21, c22, c23 float32
	var c30, c31, c32, c33 float32
	for p := 0; p < k; p++ {
		av := ap[p*4 : p*4+4 : p*4+4]
		bv := bp[p*4 : p*4+4 : p*4+4]
		b0, b1, b2, b3 := bv[0], bv[1], bv[2], bv[3]
		a0 := av[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := av[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := av[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		a3 := av[3]
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	cs := unsafe.Slice(c, 3*ldc+4)
	gemmStore4(cs[0:4:4], beta, c00, c01, c02, c03)
	gemmStore4(cs[ldc:ldc+4:ldc+4], beta, c10, c11, c12, c13)
	gemmStore4(cs[2*ldc:2*ldc+4:2*ldc+4], beta, c20, c21, c22, c23)
	gemmStore4(cs[3*ldc:3*ldc+4:3*ldc+4], beta, c30, c31, c32, c33)
}

// gemmStore4 does row = v + beta·row over four elements (beta 0 overwrites).
func gemmStore4(row []float32, beta, v0, v1, v2, v3 float32) {
	if beta != 0 {
		v0 += beta * row[0]
		v1 += beta * row[1]
		v2 += beta * row[2]
		v3 += beta * row[3]
	}
	row[0], row[1], row[2], row[3] = v0, v1, v2, v3
}

// gemmDotGeneric returns Σ x[i]·y[i].
func gemmDotGeneric(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// gemmAxpyGeneric does y[i] += alpha·x[i].
func gemmAxpyGeneric(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}
