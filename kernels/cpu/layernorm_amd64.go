//go:build amd64

package cpu

// The AVX-512 loops of layernorm_amd64.s; each processes len(x) (or
// len(dy)) elements, a multiple of 8, bit for bit as the Go loops of
// layernorm.go do.

// lnNormAVX512 sets o[j] = float32((float64(x[j])-m)*r)*w[j] + b[j].
//
//go:noescape
func lnNormAVX512(o, x, w, b []float32, m, r float64)

// lnDxAVX512 adds float32((float64(dy[j])*float64(w[j]) - sg -
// (float64(x[j])-m)*r*sgn) * r) to dx[j].
//
//go:noescape
func lnDxAVX512(dx, dy, x, w []float32, m, r, sg, sgn float64)

// lnColSumsAVX512 adds float64(dy[j])*(float64(x[j])-m)*r to accW[j] and
// float64(dy[j]) to accB[j].
//
//go:noescape
func lnColSumsAVX512(accW, accB []float64, dy, x []float32, m, r float64)
