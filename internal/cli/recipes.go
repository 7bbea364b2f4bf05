package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gochat-ai/gochat/recipes"
)

func newRecipesCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "recipes",
		Short: "List the built-in training recipes",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			w := tabwriter.NewWriter(g.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tBUDGET\tDESCRIPTION")
			for _, n := range recipes.Names() {
				r, err := recipes.Load(n)
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", n, r.Budget, r.Description)
			}
			return w.Flush()
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "show NAME",
		Short: "Print a built-in recipe",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			b, err := recipes.Raw(args[0])
			if err != nil {
				return usageError{err}
			}
			_, err = g.Out.Write(b)
			return err
		},
	})
	return cmd
}
