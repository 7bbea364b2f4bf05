package model

import (
	"fmt"

	"github.com/gochat-ai/gochat/kernels"
)

// WithParams returns a view of m whose parameters are views over flat, an F32
// or BF16 buffer on m's device with m's layout (NumParams elements, as
// Params.Flat); the view computes in flat's precision. The view shares Config, Dev and the options (value head)
// with m; it has no gradients, no adapter and FreezeBase unset, so its
// Forward and Decode read only flat. m is not changed. The hybrid engine
// decodes on a fused inference workspace this way, leaving m's weights
// untouched. It panics when flat does not have m's layout.
func (m *Model) WithParams(flat kernels.Buffer) *Model {
	if (flat.DType() != kernels.F32 && flat.DType() != kernels.BF16) || flat.Len() != m.NumParams() {
		panic(fmt.Sprintf("model: WithParams wants an f32 or bf16 buffer of %d elements, got %v × %d", m.NumParams(), flat.DType(), flat.Len()))
	}
	opts := m.opts
	opts.DType = flat.DType()
	return &Model{
		Config:  m.Config,
		Dev:     m.Dev,
		Params:  newParams(m.Config, m.specs, flat),
		opts:    opts,
		specs:   m.specs,
		ropeInv: m.ropeInv,
	}
}
