package model

import "github.com/gochat-ai/gochat/kernels"

// The accessors below give a model's fields as methods, so that the
// packages that use a model can name what they use of it in an interface
// of their own (hybridengine.Model, ppo.Policy, train.Model, ...). The
// fields stay; the methods read and write them.

// ModelConfig returns m.Config, the decoder's configuration.
func (m *Model) ModelConfig() *Config { return m.Config }

// Device returns m.Dev, the device the model lives and computes on.
func (m *Model) Device() kernels.Device { return m.Dev }

// Parameters returns m.Params: the flat parameter buffer (Params.Flat,
// NumParams elements in the model's DType) and its named views.
func (m *Model) Parameters() *Params { return m.Params }

// Gradients returns m.Grads: nil before AllocGrads; with FreezeBase set,
// only Gradients().VHead (possibly nil) exists and Flat is nil.
func (m *Model) Gradients() *Params { return m.Grads }

// BaseFrozen reports m.FreezeBase (see Model.FreezeBase).
func (m *Model) BaseFrozen() bool { return m.FreezeBase }

// SetFreezeBase sets m.FreezeBase; set it before AllocGrads (see
// Model.FreezeBase).
func (m *Model) SetFreezeBase(frozen bool) { m.FreezeBase = frozen }

// ParamHook returns m.Hook (nil: none).
func (m *Model) ParamHook() ParamHook { return m.Hook }

// SetParamHook sets m.Hook (nil: none).
func (m *Model) SetParamHook(h ParamHook) { m.Hook = h }
