// Package plan is gochat's memory planner. Given a step's settings and the
// models' config.json (nothing is loaded), it estimates what the step will
// hold, per model and in total: weights, master weights (bf16: the low
// halves of the fp32 masters), gradients, AdamW moments, activations
// (with or without gradient checkpointing), logits, the KV cache and
// inference workspace of generation, LoRA adapters and the actor EMA,
// phase by phase, and from the largest phase
// the peak resident memory of the process. Fit lists the cheapest changes
// of settings that bring a peak under a budget, each checked by estimating
// again; Available reads what the machine offers.
//
// Every byte count comes from the package that allocates it
// (model.ActsBytes, model.CacheBytes, lora.Size, optim.StateBytes,
// hybridengine.GenerateBytes, the stages' Acts and ppo's ActsPlan), each
// tested against the allocations themselves, so the estimate follows the
// code. What the device accounting cannot see is an allowance: the Go
// runtime, the binary, the tokenizer and data (Runtime, calibrated), and
// the buffers a step frees and allocates again before the collector has
// returned their memory (Estimate.Headroom, bounded by GCPercent); both
// are measured against peak RSS in README.md.
package plan

import (
	"fmt"
	"math"

	"github.com/gochat-ai/gochat/hybridengine"
	"github.com/gochat-ai/gochat/kernels"
	"github.com/gochat-ai/gochat/lora"
	"github.com/gochat-ai/gochat/model"
	"github.com/gochat-ai/gochat/optim"
	"github.com/gochat-ai/gochat/ppo"
	"github.com/gochat-ai/gochat/reward"
	"github.com/gochat-ai/gochat/sft"
)

// Runtime is the resident memory of a step beyond its device buffers: the
// Go runtime, the binary's pages, the tokenizer, the data and the
// host-side slices of a batch. Calibrated with /usr/bin/time -v on steps
// 1-3 with opt-125m, opt-350m and opt-1.3b (README.md, "Memory planner").
const Runtime int64 = 200 << 20

// GCPercent is the GOGC value the training steps run with (unless the
// environment sets GOGC). Device buffers hold no pointers, so a collection
// costs little however large they are, and a low value keeps freed
// buffers (a round's KV cache and inference workspace, a batch's scoring
// activations) from piling up to twice the live memory as GOGC=100 would.
const GCPercent = 20

// Parallel describes data-parallel training over several ranks with
// ZeRO: gochat's own ranks under mpirun (Gochat), or DeepSpeed-Chat's GPU
// scripts, against whose budgets the planner checks the GPU recipes. The
// zero value is one process. The estimate is per rank: ZeRO stage 1 partitions the optimizer state
// (moments, master weights) over Ranks, stage 2 also the gradients, stage
// 3 also the weights (and, as DeepSpeed-Chat does, the frozen reference
// and reward models follow the actor's and the critic's stage 3); Offload
// keeps the optimizer state in host memory; generation gathers the
// actor's weights into the inference workspace split over InferenceTP
// GPUs (tensor parallelism), which also splits the KV cache. Activations
// are per GPU already (per-device batch sizes).
type Parallel struct {
	Ranks                   int  // GPUs in all (0 or 1: one process)
	Stage                   int  // steps 1 and 2: --zero-stage
	ActorStage, CriticStage int  // step 3: --actor-zero-stage, --critic-zero-stage
	Offload                 bool // --offload: optimizer state on the host
	// OffloadRatio is --offload-ratio, DeepSpeed's offload_optimizer.ratio:
	// the fraction of the optimized parameters whose state is on the host
	// (0 with Offload: all of it).
	OffloadRatio float64
	InferenceTP  int // step 3: --inference-tp-size (0 or 1: none)
	// GPU: the step runs on a GPU (--device cuda), so Estimate.Peak is the
	// GPU's memory and HostPeak the host's, budgeted apart (Budget). Without
	// it a step of one process, or of gochat's ranks (Gochat), runs on the
	// CPU backend, whose device memory is the host's: one budget. A GPU
	// recipe's budget (Ranks > 1 without Gochat) is GPUs too (OnGPU).
	GPU bool
	// Gochat plans step 3's ZeRO-3 as gochat runs it (under mpirun), not
	// as DeepSpeed-Chat does (a GPU recipe's budget): the frozen reference
	// and reward models stay whole on every rank, and the experience
	// phase gathers the actor and the critic whole (ppo.Trainer's
	// gatherModels), next to the actor's fused-LoRA workspace.
	Gochat bool
}

// OnGPU reports whether the step's device is a GPU: GPU set, or the ranks
// of a GPU recipe's budget (DeepSpeed-Chat's scripts).
func (p Parallel) OnGPU() bool { return p.GPU || (p.Ranks > 1 && !p.Gochat) }

// GPUReserve is what a GPU process holds beyond the buffers the planner
// counts (Estimate.Device), and so the margin the pre-flight keeps between
// the device peak and the GPU's free memory. Free memory is read
// (cuMemGetInfo) after gochat has created its CUDA context and cuBLAS
// handle, so the context itself (0.3-0.6 GiB on recent GPUs) is not in
// it; against a recipe's budget (the GPUs' total memory) it is. What the
// reserve covers, as kernels/cuda runs:
//   - cuBLAS's workspace (32 MiB on Hopper, 4 MiB before) and the modules
//     loaded lazily as a step first uses them (gochat's NVRTC cubin, a few
//     MiB; the cuBLAS kernels of its GEMM shapes, tens of MiB);
//   - NCCL's buffers under mpirun (NCCL_BUFFSIZE 4 MiB per channel and
//     peer, a few hundred MiB on a node);
//   - the caching allocator's rounding: blocks of 1 MiB and more are
//     rounded up to 2 MiB (and VMM buffers to the driver's 2 MiB
//     granularity), less than 2 MiB lost per buffer, with a few hundred
//     such buffers live at a training step's peak (about 15 per layer;
//     most activation sizes are multiples of 2 MiB and lose nothing), and
//     the partial chunks at the edges of released ZeRO/offload views.
//
// Freed blocks cached for reuse need no reserve: the allocator empties its
// cache and retries before it reports out of memory.
const GPUReserve int64 = 1 << 30

// partition divides a model's state over p.Ranks for ZeRO stage, and
// with Offload moves the optimizer state of the offloaded fraction of the
// ranges this rank updates to the host (train.Offload): AdamW's moments
// and the masters' low halves, and the host copies of those parameters
// (in their type) and of their gradients (fp32). The fraction is taken,
// as train's splitOffload takes it, of all the optimized elements in flat
// order: the model's first, then the LoRA adapters' (fp32: moments, and
// host copies of parameters and gradients, 16 bytes an element on the
// host, 8 fewer on the device). The adapters are not partitioned by ZeRO
// here (they are small).
func (p Parallel) partition(m *Model, stage int) {
	r := int64(max(p.Ranks, 1))
	optimized := m.Grads / int64(kernels.F32.Size()) // parameters with gradients
	if stage >= 1 {
		m.Master, m.Moments = m.Master/r, m.Moments/r
		optimized /= r
	}
	if lp := int64(m.LoRAParams); p.Offload && optimized+lp > 0 {
		total := optimized + lp
		k := total // elements whose state goes to the host
		if ratio := p.OffloadRatio; ratio > 0 && ratio < 1 {
			k = min(total, int64(math.Round(ratio*float64(total)/2))*2) // pairs: bf16 masters' halves
		}
		kb, kl := min(k, optimized), max(k-optimized, 0)
		wsize := m.Weights / int64(max(m.Params, 1))
		f32 := int64(kernels.F32.Size())
		var master, moments int64
		if optimized > 0 { // kb/optimized of them (in float64: the products overflow int64)
			part := func(b int64) int64 { return int64(math.Round(float64(b) * float64(kb) / float64(optimized))) }
			master, moments = part(m.Master), part(m.Moments)
		}
		lmom := kl * 2 * f32 // AdamW's two fp32 moments (optim.StateBytes)
		m.Master -= master
		m.Moments -= moments
		m.LoRA -= lmom
		m.Host = master + moments + kb*(wsize+f32) + lmom + kl*2*f32
	}
	if stage >= 2 {
		m.Grads /= r
	}
	if stage >= 3 {
		m.Weights, m.EMA = m.Weights/r, m.EMA/r
	}
}

// Stage describes step 1 (sft) or step 2 (reward) for the planner.
type Stage struct {
	Reward bool          // step 2: a value head, chosen and rejected as one batch
	Model  *model.Config // the model as the run will use it (dropout applied)
	DType  kernels.DType // the parameters' type (F32 or BF16)
	Batch  int           // --per-device-train-batch-size
	// Sft holds the stage's other settings (MaxSeqLen, EvalBatch, Dropout,
	// Checkpoint); step 2 reads the same fields.
	Sft      sft.Options
	LoRA     lora.Config // Dim 0: no LoRA
	OnlyLoRA bool
	// GradAccum is --gradient-accumulation-steps (Fit keeps the effective
	// batch when it halves the micro-batch).
	GradAccum int
	Parallel  Parallel // the zero value: one process, as gochat runs today
	// FlashAttention: the backend implements kernels.FlashAttention, so
	// each layer keeps lse[B,NH,T] instead of att[B,NH,T,T]
	// (model.WeightsInfo).
	FlashAttention bool
}

// PPO describes step 3 for the planner.
type PPO struct {
	Actor, Critic, Reward *model.Config
	DType                 kernels.DType
	GenBatch, TrainBatch  int
	GenerationBatches     int // --generation-batches (Fit keeps the experience per round)
	PromptLen, AnswerLen  int
	RewardExtra           int // tokens --reward-end-text adds to what the reward model scores
	UnsupLen              int // mixture-training block length (0: none)
	ActorLoRA, CriticLoRA lora.Config
	OnlyLoRA              bool
	ActorCheckpointing    bool
	Opts                  ppo.Options // CriticCheckpointing, ActorDropout, CriticDropout, EnableEMA
	KeepCache             bool
	Parallel              Parallel // the zero value: one process, as gochat runs today
	FlashAttention        bool     // as Stage's
	// OffloadRef and OffloadReward are --offload-reference-model and
	// --offload-reward-model: the frozen model's weights on the host, its
	// passes bringing them to the device part by part (train.OffloadFrozen).
	OffloadRef, OffloadReward bool
	// NoRelease: the device cannot return released memory
	// (train.ReturnsMemory false: a GPU without the driver's virtual
	// memory management), so an offloaded frozen model keeps its weights on
	// the device as well as on the host.
	NoRelease bool
}

// Model is what one model holds, in bytes.
type Model struct {
	Name    string `json:"name"` // model, actor, reference, critic, reward
	Params  int    `json:"params"`
	Weights int64  `json:"weights"`
	Master  int64  `json:"master_weights"`
	Grads   int64  `json:"gradients"`
	Moments int64  `json:"optimizer_moments"`
	// Acts are the activation buffers kept, logits excluded; ActsOther is
	// the same with the other gradient-checkpointing setting (trained
	// models; 0 for frozen ones).
	Acts          int64 `json:"activations"`
	ActsOther     int64 `json:"activations_other_checkpointing,omitempty"`
	Checkpointing bool  `json:"gradient_checkpointing"`
	Logits        int64 `json:"logits"`
	KVCache       int64 `json:"kv_cache"`
	Workspace     int64 `json:"inference_workspace"`
	LoRA          int64 `json:"lora"` // adapters: parameters, gradients, moments, activations
	// LoRAParams is the adapters' parameter count (0: none).
	LoRAParams int   `json:"lora_params,omitempty"`
	EMA        int64 `json:"ema"`
	// Host is what the model keeps in host memory: ZeRO-Offload's
	// optimizer state (Parallel.Offload), or a frozen model's weights
	// (FrozenOffload); Total counts the device's part only.
	Host int64 `json:"host,omitempty"`
	// FrozenOffload: a frozen model's weights live on the host
	// (--offload-reference-model, --offload-reward-model) and Weights is
	// what its passes bring to the device at once (train.OffloadFrozen):
	// the parts outside the decoder layers and one layer.
	FrozenOffload bool `json:"frozen_offload,omitempty"`
}

// Total is everything the model holds at once.
func (m Model) Total() int64 {
	return m.Weights + m.Master + m.Grads + m.Moments + m.Acts + m.Logits + m.KVCache + m.Workspace + m.LoRA + m.EMA
}

// Phase is the device memory live during one part of a step.
type Phase struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// Estimate is the planner's answer for one step.
type Estimate struct {
	Step   string  `json:"step"` // sft, reward, ppo
	DType  string  `json:"dtype"`
	Models []Model `json:"models"`
	// Transient are buffers that live during one phase only (loading,
	// scoring, saving), by name.
	Transient []Part `json:"transient"`
	// Phases are the device bytes live in each phase; Device is the
	// largest.
	Phases []Phase `json:"phases"`
	Device int64   `json:"device_peak"`
	// Runtime and Headroom are the allowances for what the device
	// accounting does not see; Peak = Device + Runtime + Headroom is the
	// estimated peak resident memory. Headroom is the memory of buffers
	// the step frees and then allocates again (step 3's scoring
	// activations every round, the fused copies saving makes one after the
	// other): freed memory comes back only at the next collection, and the
	// collector lets the heap grow by GCPercent% of the live bytes before
	// it runs, so the headroom is the smaller of the two.
	Runtime  int64 `json:"runtime"`
	Headroom int64 `json:"gc_headroom"`
	Peak     int64 `json:"peak"`
	// Host is what the models keep in host memory (ZeRO-Offload's
	// optimizer state, offloaded frozen models' weights), the models' Host
	// summed. On the CPU the host is the device's memory and Peak includes
	// it; on a GPU (GPU set, Parallel.OnGPU) Peak is the GPU's and
	// HostPeak, Host plus Runtime, is what the process holds in host
	// memory.
	Host     int64 `json:"host_state,omitempty"`
	HostPeak int64 `json:"host_peak,omitempty"`
	GPU      bool  `json:"gpu,omitempty"`
}

// dtypeName is the --dtype value of a parameter type.
func dtypeName(dt kernels.DType) string {
	if dt == kernels.BF16 {
		return "bf16"
	}
	return "fp32"
}

// Part is a named byte count.
type Part struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// finish sets Device, Runtime, Headroom and Peak from the phases and the
// churn (the bytes of buffers freed and allocated again between two
// collections): on the CPU the Go runtime and the collector's headroom
// come on top of the buffers, on a GPU (Parallel.OnGPU) the GPUReserve,
// and the host's memory is counted apart (HostPeak).
func (e *Estimate) finish(p Parallel, churn int64) {
	for _, ph := range e.Phases {
		e.Device = max(e.Device, ph.Bytes)
	}
	e.Host = 0
	for _, m := range e.Models {
		e.Host += m.Host
	}
	if p.OnGPU() {
		e.GPU = true
		e.Runtime = GPUReserve
		e.Peak = e.Device + e.Runtime
		e.HostPeak = e.Host + Runtime
		return
	}
	e.Runtime = Runtime
	e.Headroom = min(churn, e.Device*GCPercent/100)
	e.Peak = e.Device + e.Host + e.Runtime + e.Headroom
}

// Budget is the memory a step may use, in bytes: on a GPU the GPU's and
// the host's apart, on the CPU one budget (Host), the device's memory
// being the host's.
type Budget struct {
	// GPU is the GPU memory free for the step (cuMemGetInfo; for a recipe,
	// the GPU's memory); 0 on the CPU.
	GPU int64 `json:"gpu,omitempty"`
	// Host is the host memory available (Memory.Available).
	Host int64 `json:"host"`
}

// Fits reports whether e fits b: on a GPU Peak in b.GPU and HostPeak in
// b.Host, on the CPU Peak in b.Host.
func (e *Estimate) Fits(b Budget) bool {
	over, _ := e.Over(b)
	return !over.Any()
}

// Overrun says which memory an estimate exceeds.
type Overrun struct{ GPU, Host bool }

// Any reports whether either is exceeded.
func (o Overrun) Any() bool { return o.GPU || o.Host }

// Over reports which memory e exceeds under b, and the bytes e needs of
// the host (Peak on the CPU, HostPeak on a GPU).
func (e *Estimate) Over(b Budget) (Overrun, int64) {
	if !e.GPU {
		return Overrun{Host: e.Peak > b.Host}, e.Peak
	}
	return Overrun{GPU: e.Peak > b.GPU, Host: e.HostPeak > b.Host}, e.HostPeak
}

// Parts lists the estimate's components over all models, largest first,
// named "actor optimizer moments" and so on (what an error message shows).
func (e *Estimate) Parts() []Part {
	var out []Part
	for _, m := range e.Models {
		for _, p := range []Part{{"weights", m.Weights}, {"master weights", m.Master}, {"gradients", m.Grads},
			{"optimizer moments", m.Moments}, {"activations", m.Acts}, {"logits", m.Logits}, {"KV cache", m.KVCache},
			{"inference workspace", m.Workspace}, {"LoRA", m.LoRA}, {"EMA", m.EMA}, {hostPart(m), m.Host}} {
			if p.Bytes > 0 {
				out = append(out, Part{m.Name + " " + p.Name, p.Bytes})
			}
		}
	}
	for _, t := range e.Transient {
		if t.Bytes > 0 {
			out = append(out, t)
		}
	}
	sortParts(out)
	return out
}

// hostPart names what a model keeps on the host.
func hostPart(m Model) string {
	if m.FrozenOffload {
		return "weights on the host (offload)"
	}
	return "optimizer state on the host (offload)"
}

func sortParts(ps []Part) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].Bytes > ps[j-1].Bytes; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// trained is what a trained model holds besides its activations, the way
// train.ModelTrainable and optim.AdamW allocate it: gradients for every
// parameter, or with OnlyLoRA and adapters only the value head's;
// moments (and in bf16 master weights) for what is optimized; the
// adapters' parameters, gradients and moments (fp32).
func trained(name string, c *model.Config, vh bool, dt kernels.DType, lc lora.Config, onlyLoRA bool) (Model, int, error) {
	n := model.ParamCount(c, vh)
	m := Model{Name: name, Params: n, Weights: int64(n * dt.Size())}
	optimized := n
	loraParams, loraLayers := 0, 0
	if lc.Dim > 0 {
		var err error
		if loraParams, loraLayers, err = lora.Size(c, lc); err != nil {
			return Model{}, 0, err
		}
		if onlyLoRA { // FreezeBase: only the value head keeps a gradient
			optimized = 0
			if vh {
				optimized = c.WordEmbedProjDim
			}
		}
	}
	m.Grads = int64(optimized * kernels.F32.Size())
	mom, master := optim.StateBytes(optimized, dt)
	m.Moments, m.Master = int64(mom), int64(master)
	if loraParams > 0 {
		lmom, _ := optim.StateBytes(loraParams, kernels.F32)
		m.LoRA = int64(2*loraParams*kernels.F32.Size() + lmom)
		m.LoRAParams = loraParams
	}
	return m, loraLayers, nil
}

// frozen is a model that is only run forward: its weights.
func frozen(name string, c *model.Config, vh bool, dt kernels.DType) Model {
	n := model.ParamCount(c, vh)
	return Model{Name: name, Params: n, Weights: int64(n * dt.Size())}
}

// offloadFrozen moves a frozen model's weights to the host
// (train.OffloadFrozen): its passes bring the parts outside the decoder
// layers for the whole pass and one layer at a time (model.Units), which
// Weights then counts (between passes the device holds only the partial
// chunks at the parts' edges). With noRelease the device keeps the
// weights too.
func offloadFrozen(m *Model, c *model.Config, vh bool, dt kernels.DType, noRelease bool) {
	m.FrozenOffload, m.Host = true, m.Weights
	if noRelease {
		return
	}
	u := model.Units(c, vh)
	layer := 0
	for _, n := range u[1 : len(u)-1] {
		layer = max(layer, n)
	}
	m.Weights = int64((u[0] + layer + u[len(u)-1]) * dt.Size())
}

// actsSplit returns a shape's activation bytes without and with its
// logits part, for weights w.
func actsSplit(c *model.Config, vh bool, s model.ActsShape, w model.WeightsInfo) (acts, logits int64) {
	all := s.Bytes(c, vh, w)
	no := s
	no.Opts.NoLogits = true
	without := no.Bytes(c, vh, w)
	return int64(without), int64(all - without)
}

// loadBuffer is the host buffer model.LoadWeights reads each tensor
// through: the largest tensor in fp32.
func loadBuffer(c *model.Config, vh bool) int64 {
	return int64(model.LargestParam(c, vh) * kernels.F32.Size())
}

// Stage estimates step 1 or 2 (runStage: load, adapters, gradients and
// optimizer, training micro-batches, evaluation, saving with LoRA fused
// into a copy of the weights).
func (s Stage) Estimate() (*Estimate, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	c, vh := s.Model, s.Reward
	step := "sft"
	var tr, ev model.ActsShape
	if s.Reward {
		step = "reward"
		tr, ev = reward.Options{MaxSeqLen: s.Sft.MaxSeqLen, EvalBatch: s.Sft.EvalBatch, Dropout: s.Sft.Dropout,
			Checkpoint: s.Sft.Checkpoint}.Acts(s.Batch)
	} else {
		tr, ev = s.Sft.Acts(s.Batch)
	}
	m, layers, err := trained("model", c, vh, s.DType, s.LoRA, s.OnlyLoRA)
	if err != nil {
		return nil, fmt.Errorf("--lora-dim/--lora-module-name: %w", err)
	}
	m.Checkpointing = s.Sft.Checkpoint
	s.Parallel.partition(&m, s.Parallel.Stage)
	w := model.WeightsInfo{DType: s.DType, Adapter: s.LoRA.Dim > 0, FlashAttention: s.FlashAttention}
	trActs, trLogits := actsSplit(c, vh, tr, w)
	evActs, evLogits := actsSplit(c, vh, ev, w)
	other := tr
	other.Opts.Checkpoint = !other.Opts.Checkpoint
	otherActs, _ := actsSplit(c, vh, other, w)
	m.Acts, m.Logits = trActs+evActs, trLogits+evLogits
	m.ActsOther = otherActs + evActs
	var loraActs int64
	if s.LoRA.Dim > 0 {
		loraActs = int64(lora.ActsBytes(layers, s.LoRA.Dim, max(tr.B, ev.B)*tr.T))
		m.LoRA += loraActs
	}
	e := &Estimate{Step: step, DType: dtypeName(s.DType), Models: []Model{m}}
	var save int64
	if s.LoRA.Dim > 0 { // saveModelDir fuses into a copy of the weights
		save = m.Weights + int64(lora.FuseBytes(c, s.LoRA, s.DType))
		e.Transient = append(e.Transient, Part{"saving: LoRA fused into a copy of the weights", save})
	}
	load := loadBuffer(c, vh)
	e.Transient = append(e.Transient, Part{"loading: host buffer of the largest tensor", load})
	state := m.Weights + m.Master + m.Grads + m.Moments + m.LoRA - loraActs
	e.Phases = []Phase{
		{"load", m.Weights + load},
		{"train", state + trActs + trLogits + loraActs},
		{"evaluate", state + m.Acts + m.Logits + loraActs},
		{"save", state + m.Acts + m.Logits + loraActs + save},
	}
	e.finish(s.Parallel, 0) // nothing big is freed and allocated again
	return e, nil
}

func (s Stage) check() error {
	switch {
	case s.Model == nil:
		return fmt.Errorf("plan: no model config")
	case s.Batch < 1 || s.Sft.EvalBatch < 1 || s.Sft.MaxSeqLen < 1:
		return fmt.Errorf("plan: batch sizes and sequence length must be >= 1")
	case s.DType != kernels.F32 && s.DType != kernels.BF16:
		return fmt.Errorf("plan: parameters in %v (want f32 or bf16)", s.DType)
	case s.Sft.MaxSeqLen > s.Model.MaxPositions:
		return fmt.Errorf("--max-seq-len %d exceeds the model's max_position_embeddings %d", s.Sft.MaxSeqLen, s.Model.MaxPositions)
	}
	return nil
}

// Estimate estimates step 3 (runPPO: four models, two optimizers, the EMA,
// then rounds of generation through the hybrid engine, scoring, and PPO
// updates, and saving the actor, the critic and the EMA).
func (p PPO) Estimate() (*Estimate, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	dt := p.DType
	actor, actorLayers, err := trained("actor", p.Actor, false, dt, p.ActorLoRA, p.OnlyLoRA)
	if err != nil {
		return nil, fmt.Errorf("--actor-lora-dim/--lora-module-name: %w", err)
	}
	critic, criticLayers, err := trained("critic", p.Critic, true, dt, p.CriticLoRA, p.OnlyLoRA)
	if err != nil {
		return nil, fmt.Errorf("--critic-lora-dim/--lora-module-name: %w", err)
	}
	ref := frozen("reference", p.Actor, false, dt)
	rm := frozen("reward", p.Reward, true, dt)
	// runPPO loads an offloaded frozen model first and offloads it at
	// once: loading holds it whole, and after that the trained models.
	var loadWhole int64
	if p.OffloadRef {
		loadWhole = max(loadWhole, ref.Weights)
		offloadFrozen(&ref, p.Actor, false, dt, p.NoRelease)
	}
	if p.OffloadReward {
		loadWhole = max(loadWhole, rm.Weights)
		offloadFrozen(&rm, p.Reward, true, dt, p.NoRelease)
	}
	actor.Checkpointing, critic.Checkpointing = p.ActorCheckpointing, p.Opts.CriticCheckpointing

	// EMA (ppo.NewTrainer): fp32 of the actor's weights unless the base is
	// frozen, and of its adapters.
	actorFrozen := p.OnlyLoRA && p.ActorLoRA.Dim > 0
	if p.Opts.EnableEMA {
		if !actorFrozen {
			actor.EMA = int64(actor.Params * kernels.F32.Size())
		}
		if p.ActorLoRA.Dim > 0 {
			lp, _, _ := lora.Size(p.Actor, p.ActorLoRA)
			actor.EMA += int64(lp * kernels.F32.Size())
		}
	}

	par := p.Parallel
	refStage, rewardStage := 0, 0
	if par.ActorStage == 3 && !par.Gochat {
		refStage = 3
	}
	if par.CriticStage == 3 && !par.Gochat {
		rewardStage = 3
	}
	// gathered is what gochat's experience phase adds under ZeRO-3: the
	// critic's partitioned weights gathered, and the actor's when adapters
	// are fused into a workspace besides (without them the workspace
	// below stands for the gathered weights).
	var gathered int64
	if par.Gochat && par.Ranks > 1 {
		if par.CriticStage == 3 {
			gathered += critic.Weights - critic.Weights/int64(par.Ranks)
		}
		if par.ActorStage == 3 && p.ActorLoRA.Dim > 0 {
			gathered += actor.Weights - actor.Weights/int64(par.Ranks)
		}
	}
	par.partition(&actor, par.ActorStage)
	if !ref.FrozenOffload { // an offloaded one is not partitioned
		par.partition(&ref, refStage)
	}
	par.partition(&critic, par.CriticStage)
	if !rm.FrozenOffload {
		par.partition(&rm, rewardStage)
	}

	// Activations (ppo.Options.ActsPlan), with the other checkpointing
	// setting for the trained models.
	seq := p.PromptLen + p.AnswerLen
	rows := map[string]*Model{"actor": &actor, "reference": &ref, "critic": &critic}
	conf := map[string]*model.Config{"actor": p.Actor, "reference": p.Actor, "critic": p.Critic}
	heads := map[string]bool{"critic": true}
	fa := p.FlashAttention
	wi := map[string]model.WeightsInfo{"actor": {DType: dt, Adapter: p.ActorLoRA.Dim > 0, FlashAttention: fa},
		"reference": {DType: dt, FlashAttention: fa}, "critic": {DType: dt, Adapter: p.CriticLoRA.Dim > 0, FlashAttention: fa}}
	for _, s := range p.Opts.ActsPlan(p.ActorCheckpointing, p.GenBatch, p.TrainBatch, seq, p.UnsupLen) {
		a, l := actsSplit(conf[s.Model], heads[s.Model], s.ActsShape, wi[s.Model])
		rows[s.Model].Acts += a
		rows[s.Model].Logits += l
	}
	otherOpts := p.Opts
	otherOpts.CriticCheckpointing = !otherOpts.CriticCheckpointing
	for _, s := range otherOpts.ActsPlan(!p.ActorCheckpointing, p.GenBatch, p.TrainBatch, seq, p.UnsupLen) {
		a, _ := actsSplit(conf[s.Model], heads[s.Model], s.ActsShape, wi[s.Model])
		if s.Model != "reference" {
			rows[s.Model].ActsOther += a
		}
	}
	// Adapter activations: the actor's training passes (generation and the
	// experience forward run on the fused workspace, without adapters);
	// every critic pass.
	var loraActs int64
	if p.ActorLoRA.Dim > 0 {
		n := min(p.TrainBatch, p.GenBatch) * seq
		if p.UnsupLen > 0 {
			n = max(n, p.TrainBatch*p.UnsupLen)
		}
		a := int64(lora.ActsBytes(actorLayers, p.ActorLoRA.Dim, n))
		actor.LoRA += a
		loraActs += a
	}
	if p.CriticLoRA.Dim > 0 {
		a := int64(lora.ActsBytes(criticLayers, p.CriticLoRA.Dim, p.GenBatch*seq))
		critic.LoRA += a
		loraActs += a
	}

	// Generate mode (hybridengine.GenerateBytes), and the scratch of fusing
	// LoRA into bf16 weights.
	// Under ZeRO-3 generation gathers the weights whether or not there are
	// adapters; tensor parallelism splits them and the KV cache.
	ws, kc := hybridengine.GenerateBytes(p.Actor, false, dt, p.ActorLoRA.Dim > 0 || par.ActorStage == 3, p.GenBatch, p.PromptLen, p.AnswerLen)
	if tp := par.InferenceTP; tp > 1 {
		ws, kc = ws/tp, kc/tp
	}
	actor.Workspace, actor.KVCache = int64(ws), int64(kc)
	var fuse int64
	if p.ActorLoRA.Dim > 0 {
		fuse = int64(lora.FuseBytes(p.Actor, p.ActorLoRA, dt))
	}

	e := &Estimate{Step: "ppo", DType: dtypeName(dt), Models: []Model{actor, ref, critic, rm}}
	var state, acts int64
	for _, m := range e.Models {
		state += m.Weights + m.Master + m.Grads + m.Moments + m.LoRA + m.EMA
		acts += m.Acts + m.Logits
	}
	state -= loraActs
	gen := int64(ws + kc)
	kept := int64(0) // what Generate mode keeps through the other phases
	if p.KeepCache {
		kept = gen
	}
	score := int64(reward.ScoreActs(p.GenBatch, min(seq+p.RewardExtra, p.Reward.MaxPositions)).Bytes(p.Reward, true, model.WeightsInfo{DType: dt, FlashAttention: fa}))
	// Saving fuses LoRA into a copy of the weights, one model at a time
	// (saves is their sum: they follow each other between collections).
	var save, saves int64
	copyOf := func(b int64) {
		save, saves = max(save, b), saves+b
	}
	if p.ActorLoRA.Dim > 0 {
		copyOf(actor.Weights + fuse)
	}
	if p.CriticLoRA.Dim > 0 {
		copyOf(critic.Weights + int64(lora.FuseBytes(p.Critic, p.CriticLoRA, dt)))
	}
	if p.Opts.EnableEMA && !actorFrozen && p.ActorLoRA.Dim > 0 {
		// actor_ema/: the fp32 EMA weights fused with the EMA adapters in
		// a copy, the live adapters set aside in another.
		lp, _, _ := lora.Size(p.Actor, p.ActorLoRA)
		copyOf(int64((actor.Params + lp) * kernels.F32.Size()))
	}
	load := loadBuffer(p.Actor, false)
	e.Transient = []Part{{"loading: host buffer of the largest tensor", load},
		{"scoring: reward model activations", score}}
	if fuse > 0 {
		e.Transient = append(e.Transient, Part{"generation: LoRA fusing scratch", fuse})
	}
	if save > 0 {
		e.Transient = append(e.Transient, Part{"saving: LoRA fused into a copy of the weights", save})
	}
	weights := actor.Weights + ref.Weights + critic.Weights + rm.Weights
	e.Phases = []Phase{
		{"load", max(weights, loadWhole) + load},
		{"generate", state + acts + loraActs + gen + fuse + gathered},
		{"score", state + acts + loraActs + kept + score + gathered},
		{"train", state + acts + loraActs + kept},
		{"save", state + acts + loraActs + kept + save},
	}
	// Every round frees the scoring activations and the fusing scratch and
	// allocates them again the next round (the workspace and the KV cache
	// too, but the engine has the device return their memory as it
	// releases them, Trim); saving allocates its copies one after the
	// other, the largest counted in the save phase already.
	e.finish(p.Parallel, max(score+fuse, saves-save))
	return e, nil
}

func (p PPO) check() error {
	switch {
	case p.Actor == nil || p.Critic == nil || p.Reward == nil:
		return fmt.Errorf("plan: step 3 needs the actor's, the critic's and the reward model's configs")
	case p.GenBatch < 1 || p.TrainBatch < 1 || p.PromptLen < 1 || p.AnswerLen < 1:
		return fmt.Errorf("plan: batch sizes and lengths must be >= 1")
	case p.DType != kernels.F32 && p.DType != kernels.BF16:
		return fmt.Errorf("plan: parameters in %v (want f32 or bf16)", p.DType)
	}
	for _, m := range []struct {
		name string
		c    *model.Config
	}{{"actor", p.Actor}, {"critic", p.Critic}, {"reward model", p.Reward}} {
		if n := p.PromptLen + p.AnswerLen; n > m.c.MaxPositions {
			return fmt.Errorf("--max-prompt-seq-len + --max-answer-seq-len = %d exceeds the %s's max_position_embeddings %d", n, m.name, m.c.MaxPositions)
		}
	}
	return nil
}
