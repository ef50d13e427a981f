package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"
)

func newValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check files of Istio YAML as serve's file source reads them",
		Long: `Check files and directories of Istio YAML (a directory: its *.yaml and *.yml files, not
those of its sub-directories), exactly as the file source of serve reads them. Each fault is
printed on its own line with its file, document, kind and name, and field.

Exit status: 0 and a one-line summary when there is no fault; 1 when there is any; 2 for a bad
command line (a path that does not exist).`,
		Example: `  mcpbridge validate examples/
  mcpbridge validate mesh.yaml overrides/`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, paths []string) error {
			if err := checkPaths(paths); err != nil {
				return err
			}
			f := newFiles(paths, slog.New(slog.DiscardHandler))
			faults, err := f.loadOnce()
			if err != nil {
				return fmt.Errorf("validate: %w", err)
			}
			out := cmd.OutOrStdout()
			for _, fault := range faults {
				fmt.Fprintln(out, fault)
			}
			if len(faults) > 0 {
				return fmt.Errorf("validate: %d fault%s", len(faults), plural(len(faults)))
			}
			n, colls := f.resources()
			fmt.Fprintf(out, "ok: %d resource%s in %d collection%s, no faults\n", n, plural(n), colls, plural(colls))
			return nil
		},
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
