// Command gochat trains chat models with RLHF: SFT, reward model, PPO.
package main

import (
	"os"

	"github.com/gochat-ai/gochat/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
