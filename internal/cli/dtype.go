package cli

import (
	"github.com/spf13/pflag"

	"github.com/gochat-ai/gochat/kernels"
)

// dtypeFlagHelp is the help text of --dtype, shared by every command that
// loads a model.
const dtypeFlagHelp = "precision: bf16 (bf16 matmul inputs, fp32 accumulation, norms, losses, master weights and moments; frozen models in bf16), fp32, or auto (bf16 where the backend computes it natively)"

// bindDType adds --dtype (DeepSpeed-Chat's flag) to a command's flags.
func bindDType(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "dtype", "auto", dtypeFlagHelp)
}

// nativeBF16 is what a backend reports when it computes bf16 natively.
type nativeBF16 interface{ NativeBF16() bool }

// resolveDType turns a --dtype value into the weights' element type on dev:
// "auto" (or "") picks bf16 where dev computes it natively, else fp32.
// The choice is logged, with why.
func resolveDType(g *Globals, name string, dev kernels.Device) (kernels.DType, error) {
	dt, err := pickDType(name, dev)
	if err != nil {
		return 0, err
	}
	why := "asked for"
	switch {
	case name != "" && name != "auto":
	case dt == kernels.BF16:
		why = "auto: the device computes bf16 natively; --dtype fp32 to change"
	default:
		why = "auto: the device has no native bf16; --dtype bf16 to force it"
	}
	if dt == kernels.BF16 {
		g.Log.Info().Str("dtype", "bf16").Str("device", dev.Name()).Msgf("precision: bf16 mixed precision (%s)", why)
	} else {
		g.Log.Info().Str("dtype", "fp32").Str("device", dev.Name()).Msgf("precision: fp32 (%s)", why)
	}
	return dt, nil
}

// pickDType is resolveDType without the log line.
func pickDType(name string, dev kernels.Device) (kernels.DType, error) {
	switch name {
	case "fp32", "float32":
		return kernels.F32, nil
	case "bf16", "bfloat16":
		return kernels.BF16, nil
	case "", "auto":
		if n, ok := dev.(nativeBF16); ok && n.NativeBF16() {
			return kernels.BF16, nil
		}
		return kernels.F32, nil
	}
	return 0, usageErrorf("--dtype %q: want bf16, fp32 or auto", name)
}

// checkDTypeFlag validates --dtype before anything is loaded.
func checkDTypeFlag(name string) error {
	switch name {
	case "", "auto", "fp32", "float32", "bf16", "bfloat16":
		return nil
	}
	return usageErrorf("--dtype %q: want bf16, fp32 or auto", name)
}
