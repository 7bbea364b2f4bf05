package model

import "github.com/gochat-ai/gochat/kernels"

// layerActs are the saved activations of one decoder layer for a [B,T]
// batch (N = B·T rows). Which buffers hold what depends on the LayerNorm
// placement; see layerForward.
type layerActs struct {
	ln1, ln1Mean, ln1Rstd kernels.Buffer // [N,H], [N], [N]
	qkv                   kernels.Buffer // [N,3H]
	att                   kernels.Buffer // [B,NH,T,T] probabilities
	atty                  kernels.Buffer // [N,H] attention output (before out_proj)
	attnOut               kernels.Buffer // [N,H] out_proj output (after dropout)
	s1                    kernels.Buffer // [N,H] r + attnOut
	ln2, ln2Mean, ln2Rstd kernels.Buffer // [N,H] (pre-LN only), [N], [N]
	fch                   kernels.Buffer // [N,F] fc1 output (pre-activation)
	fchAct                kernels.Buffer // [N,F] activation output (aliases fch for relu)
	fc2o                  kernels.Buffer // [N,H] fc2 output (after dropout)
	s2                    kernels.Buffer // [N,H] post-LN only: ln1 + fc2o
	drop1, drop2          kernels.Buffer // [N,H] dropout scales (training with dropout only)
}

// Acts are the buffers of one forward/backward pass over a [B,T] batch.
type Acts struct {
	B, T int
	opts ActsOptions

	ids, mask, pos, targets kernels.Buffer // I32 [B,T]
	hasMask, hasTargets     bool

	emb    kernels.Buffer   // [N,P] token embeddings
	embIn  kernels.Buffer   // [N,H] after project_in (emb when P == H)
	posEmb kernels.Buffer   // [N,H]
	resid  []kernels.Buffer // L+1 × [N,H]: the input of each layer and the decoder output
	layers []layerActs      // L, or 1 shared by all layers with gradient checkpointing

	fin               kernels.Buffer // [N,H] after the final LayerNorm (resid[L] without one)
	finMean, finRstd  kernels.Buffer // [N]
	y                 kernels.Buffer // [N,P] final hidden state (after project_out)
	logits            kernels.Buffer // [N,V]; overwritten by dlogits in Backward
	losses            kernels.Buffer // [N] per-position cross-entropy
	values            kernels.Buffer // [N] value head outputs
	dA, dB, dC        kernels.Buffer // [N,H] gradient scratch
	dqkv              kernels.Buffer // [N,3H]
	dfch              kernels.Buffer // [N,F]
	dy, demb          kernels.Buffer // [N,P]
	dlosses, dvalues  kernels.Buffer // [N]
	seed              uint64
	train, logitsLive bool
	hostTargets       []int32
}

// ActsOptions configure activation buffers.
type ActsOptions struct {
	// Train allocates the gradient scratch Backward needs.
	Train bool
	// Dropout applies Config.Dropout to the residual branches (training
	// mode); without it the pass is deterministic (evaluation mode).
	Dropout bool
	// Checkpoint keeps only each layer's input and recomputes the layer
	// during Backward (gradient checkpointing).
	Checkpoint bool
	// NoLogits skips the lm_head (value-only models: reward and critic).
	NoLogits bool
}

// NewActs allocates the activation buffers for batches of shape [B,T].
func (m *Model) NewActs(b, t int, opts ActsOptions) *Acts {
	c, d := m.Config, m.Dev
	H, F, P, V, NH := c.HiddenSize, c.FFNDim, c.WordEmbedProjDim, c.VocabSize, c.NumHeads
	n := b * t
	f32 := func(k int) kernels.Buffer { return d.Alloc(kernels.F32, k) }
	a := &Acts{B: b, T: t, opts: opts}
	a.ids, a.mask, a.pos, a.targets = d.Alloc(kernels.I32, n), d.Alloc(kernels.I32, n), d.Alloc(kernels.I32, n), d.Alloc(kernels.I32, n)
	a.emb = f32(n * P)
	a.embIn = a.emb
	if c.HasProjections() {
		a.embIn = f32(n * H)
	}
	a.posEmb = f32(n * H)
	a.resid = make([]kernels.Buffer, c.NumLayers+1)
	for i := range a.resid {
		a.resid[i] = f32(n * H)
	}
	dropout := opts.Dropout && c.Dropout > 0
	nl := c.NumLayers
	if opts.Checkpoint {
		nl = 1
	}
	a.layers = make([]layerActs, nl)
	for i := range a.layers {
		la := &a.layers[i]
		la.qkv, la.att, la.atty, la.attnOut, la.s1 = f32(3*n*H), f32(b*NH*t*t), f32(n*H), f32(n*H), f32(n*H)
		la.ln1, la.ln1Mean, la.ln1Rstd = f32(n*H), f32(n), f32(n)
		la.ln2Mean, la.ln2Rstd = f32(n), f32(n)
		if c.DoLayerNormBefore {
			la.ln2 = f32(n * H)
		} else {
			la.s2 = f32(n * H)
		}
		la.fch = f32(n * F)
		la.fchAct = la.fch
		if c.Activation != "relu" {
			la.fchAct = f32(n * F)
		}
		la.fc2o = f32(n * H)
		if dropout {
			la.drop1, la.drop2 = f32(n*H), f32(n*H)
		}
	}
	a.fin = a.resid[c.NumLayers]
	if c.HasFinalLayerNorm() {
		a.fin, a.finMean, a.finRstd = f32(n*H), f32(n), f32(n)
	}
	a.y = a.fin
	if c.HasProjections() {
		a.y = f32(n * P)
	}
	if !opts.NoLogits {
		a.logits, a.losses = f32(n*V), f32(n)
	}
	if m.opts.ValueHead {
		a.values = f32(n)
	}
	if opts.Train {
		a.dA, a.dB, a.dC, a.dqkv, a.dfch = f32(n*H), f32(n*H), f32(n*H), f32(3*n*H), f32(n*F)
		a.dy = f32(n * P)
		if c.HasProjections() {
			a.demb = f32(n * P)
		}
		a.dlosses, a.dvalues = f32(n), f32(n)
	}
	return a
}

// layer returns the saved activations of layer l.
func (a *Acts) layer(l int) *layerActs {
	if a.opts.Checkpoint {
		return &a.layers[0]
	}
	return &a.layers[l]
}
