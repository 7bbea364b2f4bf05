package model

import "testing"

type nopHook struct{}

func (nopHook) Acquire(int, bool) error { return nil }
func (nopHook) Release(int, bool) error { return nil }

// TestAccessors checks that the accessor methods read and write the
// fields they stand for.
func TestAccessors(t *testing.T) {
	cfg, err := PresetConfig("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	m := must(New(newCPU(t, 1), cfg, Options{ValueHead: true}))
	defer m.Free()
	if m.ModelConfig() != m.Config || m.Device() != m.Dev || m.Parameters() != m.Params {
		t.Fatal("ModelConfig, Device or Parameters is not the field")
	}
	if m.Gradients() != nil {
		t.Fatalf("Gradients before AllocGrads = %v, want nil", m.Gradients())
	}
	m.SetFreezeBase(true)
	if !m.FreezeBase || !m.BaseFrozen() {
		t.Fatal("SetFreezeBase(true) not seen")
	}
	if err := m.AllocGrads(); err != nil {
		t.Fatal(err)
	}
	if g := m.Gradients(); g != m.Grads || g.Flat != nil || g.VHead == nil {
		t.Fatalf("Gradients with a frozen base = %+v, want the value head's alone", g)
	}
	m.SetFreezeBase(false)
	if m.FreezeBase || m.BaseFrozen() {
		t.Fatal("SetFreezeBase(false) not seen")
	}
	var h nopHook
	m.SetParamHook(h)
	if m.Hook != ParamHook(h) || m.ParamHook() != ParamHook(h) {
		t.Fatal("SetParamHook not seen")
	}
	m.SetParamHook(nil)
	if m.Hook != nil || m.ParamHook() != nil {
		t.Fatal("SetParamHook(nil) not seen")
	}
}
