package cli

import (
	"context"
	"os"

	"github.com/gochat-ai/gochat/data"
	"github.com/gochat-ai/gochat/hub"
)

// defaultData is the dataset of sft, reward and ppo when --data is not
// given, as in DeepSpeed-Chat.
const defaultData = "Dahoas/rm-static"

// newHub returns a command's Hugging Face Hub client, configured from the
// environment as huggingface_hub is (HF_HUB_CACHE, HF_HOME, HF_ENDPOINT,
// HF_TOKEN, HF_HUB_OFFLINE): it logs to the command's logger and draws a
// progress bar when stderr is a terminal.
func newHub(g *Globals) *hub.Client {
	c := hub.NewClient(os.Getenv)
	c.Log = g.Log
	if g.LogFmt != "json" && isTerminal(g.Err) {
		c.Progress = g.Err
	}
	return c
}

// resolveModel returns the local directory of a model flag's value: a
// directory as it is, else a Hub id or a DeepSpeed-Chat short form
// (hub.ModelID) at revision, from the Hugging Face cache or downloaded
// into it.
func resolveModel(g *Globals, name, revision string) (string, error) {
	return newHub(g).Model(context.Background(), name, revision)
}

// resolveModelTokenizer resolves a model and its tokenizer flag; the
// tokenizer defaults to the model's directory (its snapshot for a Hub id).
func resolveModelTokenizer(g *Globals, model, tok, revision string) (modelDir, tokDir string, err error) {
	if modelDir, err = resolveModel(g, model, revision); err != nil {
		return "", "", err
	}
	if tok == "" || tok == model {
		return modelDir, modelDir, nil
	}
	tokDir, err = resolveModel(g, tok, revision)
	return modelDir, tokDir, err
}

// hubData returns data.ResolveOptions that fetch Hub datasets at revision
// through the command's Hub client.
func hubData(g *Globals, ro data.ResolveOptions, revision string) data.ResolveOptions {
	ro.Hub, ro.Revision = newHub(g), revision
	return ro
}
