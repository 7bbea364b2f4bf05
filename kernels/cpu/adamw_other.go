//go:build !amd64

package cpu

// adamWVec reports false: no vector AdamW here.
func (d *Device) adamWVec(u *adamWUpdate, pf []float32, ph, lo []uint16, g, m, v []float32) bool {
	return false
}

// sumSquaresVec reports false: no vector sum of squares here.
func (d *Device) sumSquaresVec(x []float32, s *float64) bool { return false }
