package tensor_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/gochat-ai/gochat/tensor"
)

func ExampleOpenDir() {
	c, err := tensor.OpenDir("testdata/sharded_bin") // pytorch_model.bin.index.json + 2 shards
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for _, name := range c.Names() {
		info, _ := c.Info(name)
		fmt.Println(name, info.DType, info.Shape, filepath.Base(info.File))
	}
	info, _ := c.Info("model.decoder.layers.0.fc1.bias")
	w := make([]float32, info.Numel()) // fp16 on disk, float32 here
	if err := c.ReadF32(info.Name, w); err != nil {
		log.Fatal(err)
	}
	fmt.Println(w)
	// Output:
	// model.decoder.embed_tokens.weight F16 [4 2] pytorch_model-00002-of-00002.bin
	// model.decoder.layers.0.fc1.bias F16 [3] pytorch_model-00001-of-00002.bin
	// model.decoder.layers.0.fc1.weight F16 [3 2] pytorch_model-00001-of-00002.bin
	// model.decoder.layers.1.fc1.bias F16 [3] pytorch_model-00002-of-00002.bin
	// model.decoder.layers.1.fc1.weight F16 [3 2] pytorch_model-00002-of-00002.bin
	// [1.4560547 0.6401367 1.9355469]
}

func ExampleWriteSafetensors() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")
	err = tensor.WriteSafetensors(path, []tensor.WriteTensor{
		{Name: "v_head.weight", DType: tensor.BF16, Shape: []int{1, 3}, F32: []float32{0.1, -2, 3.3}},
		{Name: "scale", DType: tensor.F32, Shape: nil, F32: []float32{0.5}},
	}, nil) // nil metadata: {"format":"pt"}, like transformers
	if err != nil {
		log.Fatal(err)
	}
	c, err := tensor.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	v := make([]float32, 3)
	if err := c.ReadF32("v_head.weight", v); err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Names(), v)
	// Output: [scale v_head.weight] [0.100097656 -2 3.296875]
}
