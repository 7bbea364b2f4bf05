package model

import "github.com/gochat-ai/gochat/kernels"

// The functions below say what a model's allocations will take from its
// config alone, without allocating: a memory planner calls them before
// anything is loaded. Each one is the allocating code's own arithmetic
// (ActsBytes runs layoutActs itself) or is tested against it, so an
// estimate cannot drift from what the code does.

// ParamCount is the number of parameters of a model with config c (and a
// value head when valueHead): NumParams of New(dev, c, Options{ValueHead:
// valueHead}).
func ParamCount(c *Config, valueHead bool) int {
	n := 0
	for _, s := range c.paramSpecs(valueHead) {
		n += s.size()
	}
	return n
}

// LargestParam is the element count of the model's largest tensor (the
// token embedding, as a rule): the size of the host buffer LoadWeights reads
// every tensor through.
func LargestParam(c *Config, valueHead bool) int {
	most := 0
	for _, s := range c.paramSpecs(valueHead) {
		most = max(most, s.size())
	}
	return most
}

// ActsBytes is the device memory NewActs(b, t, opts) allocates for a model
// with config c (with a value head when valueHead) and weights w: Bytes of
// the result. Dropout buffers follow c.Dropout, as for the model.
func ActsBytes(c *Config, valueHead bool, b, t int, opts ActsOptions, w WeightsInfo) int {
	m := &Model{Config: c, opts: Options{ValueHead: valueHead}}
	n := 0
	m.layoutActs(&Acts{}, b, t, opts, w, func(dt kernels.DType, k int) kernels.Buffer {
		n += k * dt.Size()
		return nil
	})
	return n
}

// CacheBytes is the device memory NewCache(b, tmax, maxChunk) allocates for
// a model with config c: Bytes of the new cache (the [B·MaxChunk,V] logits
// buffer that the first AllLogits decode adds is not included; generation
// asks for LastLogits only).
func CacheBytes(c *Config, b, tmax, maxChunk int) int {
	kc := &Cache{B: b, Tmax: tmax, MaxChunk: maxChunk}
	n := 0
	c.family().layoutCache(c, kc, func(dt kernels.DType, k int) kernels.Buffer {
		n += k * dt.Size()
		return nil
	})
	return n
}

// ActsShape is one set of activation buffers: NewActs(B, T, Opts). Stages
// describe the sets they keep with it (a memory planner sums their
// ActsBytes).
type ActsShape struct {
	B, T int
	Opts ActsOptions
}

// Bytes is ActsBytes for the shape on a model with config c and weights w.
func (s ActsShape) Bytes(c *Config, valueHead bool, w WeightsInfo) int {
	return ActsBytes(c, valueHead, s.B, s.T, s.Opts, w)
}

// Units are the element counts of train.ModelUnits for a model with config
// c (and a value head when valueHead), from the config alone: the tensors
// laid out before the first decoder layer (embeddings, positions and, in
// OPT's layout, project_in, project_out and the final norm), each layer,
// and those after the last (an untied LM head, the value head).
func Units(c *Config, valueHead bool) []int {
	m := &Model{Config: c, specs: c.paramSpecs(valueHead)}
	n := 0
	for _, s := range m.specs {
		n += s.size()
	}
	first, _ := m.LayerRange(0)
	last, k := m.LayerRange(c.NumLayers - 1)
	units := []int{first}
	for l := range c.NumLayers {
		_, k := m.LayerRange(l)
		units = append(units, k)
	}
	return append(units, n-(last+k))
}
