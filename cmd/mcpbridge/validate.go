package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/mcpbridge/kinds"
	"github.com/mcpbridge/mcpbridge/sink/filesource"
	"github.com/mcpbridge/mcpbridge/store"
)

// validateFormats are validate's -o values, the default first.
var validateFormats = []string{"table", "json", "yaml"}

func newValidateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "validate [-o table|json|yaml] PATH...",
		Short: "Check files of Istio YAML as serve's file source reads them",
		Long: `Check files and directories of Istio YAML (a directory: its *.yaml and *.yml files, not
those of its sub-directories), exactly as the file source of serve reads them: whether each
document decodes, and whether istiod would refuse it. A name defined twice is a fault too.

Files are named as the paths were given (a file found in a directory: the directory as given
joined with its name). Each fault is printed on its own line, as compilers and linters print
them:

  FILE:LINE:COLUMN: document N: KIND NAMESPACE/NAME: field FIELD: what is wrong

LINE and COLUMN (from 1, in characters) are those of the field at fault: its key, or a list's
item. The document's first line, without a column, when the fault names no field or the field
is not in the file (a missing one); the parser's line, without a column, for YAML that does not
parse. What is unknown is left out.

-o json prints one object instead, for CI; -o yaml the same as YAML:

  {"ok": false, "resources": 11, "collections": 4,
   "faults": [{"file": "examples/serviceentries.yaml", "line": 111, "column": 3,
               "document": 5, "kind": "ServiceEntry", "name": "bookinfo/external-api",
               "field": "spec.resolution",
               "message": "invalid value for enum field resolution: \"DNZ\""}]}

ok is true when there is no fault; resources and collections count what the files hold without
fault; faults is [] when there is none. In a fault, message is always there, the others only
when known: file is absent only for a fault of no one file, document is 1-based among the
file's non-empty documents and absent for a fault of the whole file.

Exit status, whatever -o: 0 when there is no fault (and, for -o table, a one-line summary); 1
when there is any; 2 for a bad command line (a path that does not exist, an unknown -o).`,
		Example: `  mcpbridge validate examples/
  mcpbridge validate mesh.yaml overrides/
  mcpbridge validate -o json mesh/ > faults.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: runValidate,
	}
	addOutputFlag(cmd.Flags(), validateFormats...)
	return cmd
}

func runValidate(cmd *cobra.Command, paths []string) error {
	format, err := outputFormat(cmd.Flags(), validateFormats...)
	if err != nil {
		return err
	}
	if err := checkPaths(paths); err != nil {
		return err
	}
	f := filesAsGiven(paths)
	faults, err := f.loadOnce()
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	n, colls := f.resources()
	out := cmd.OutOrStdout()
	if format == "table" {
		err = printValidateTable(out, faults, n, colls)
	} else {
		err = printValidateReport(out, format, newValidateReport(faults, n, colls))
	}
	if err != nil {
		return err
	}
	if len(faults) > 0 {
		return fmt.Errorf("validate: %d fault%s", len(faults), plural(len(faults)))
	}
	return nil
}

// filesAsGiven is newFiles, the faults naming files as the paths were given: validate's reader
// typed them, and CI's annotations need paths relative to the checkout, not to this machine.
func filesAsGiven(paths []string) *files {
	st := store.New(store.Options{Validate: kinds.ValidateResource})
	return &files{store: st, source: filesource.New(filesource.Options{
		Paths: paths, Store: st, Logger: slog.New(slog.DiscardHandler), NamesAsGiven: true,
	})}
}

func printValidateTable(out io.Writer, faults []error, n, colls int) error {
	for _, fault := range faults {
		if _, err := fmt.Fprintln(out, fault); err != nil {
			return err
		}
	}
	if len(faults) > 0 {
		return nil
	}
	_, err := fmt.Fprintf(out, "ok: %d resource%s in %d collection%s, no faults\n", n, plural(n), colls, plural(colls))
	return err
}

// validateReport is what -o json and -o yaml print. Its names are single words, as in the
// canonical JSON that status -o json prints.
type validateReport struct {
	OK          bool            `json:"ok"`
	Resources   int             `json:"resources"`
	Collections int             `json:"collections"`
	Faults      []validateFault `json:"faults"`
}

// validateFault is one fault: its message, and what is known of where it is.
type validateFault struct {
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	Document int    `json:"document,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Name     string `json:"name,omitempty"`
	Field    string `json:"field,omitempty"`
	Message  string `json:"message"`
}

func newValidateReport(faults []error, n, colls int) validateReport {
	r := validateReport{OK: len(faults) == 0, Resources: n, Collections: colls, Faults: []validateFault{}}
	for _, err := range faults {
		r.Faults = append(r.Faults, newValidateFault(err))
	}
	return r
}

// newValidateFault splits a *filesource.DecodeError into its parts; any other fault (the store
// refusing the files' state) has only its text, and no file of its own.
func newValidateFault(err error) validateFault {
	var de *filesource.DecodeError
	if !errors.As(err, &de) {
		return validateFault{Message: err.Error()}
	}
	f := validateFault{
		File: de.File, Line: de.Line, Column: de.Column, Document: de.Doc,
		Kind: de.Kind, Name: de.Name, Field: de.Field, Message: err.Error(),
	}
	if de.Err != nil {
		f.Message = de.Err.Error() // without what the other fields say
	}
	return f
}

func printValidateReport(out io.Writer, format string, r validateReport) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		// The same conversion as status -o yaml: the YAML is the JSON's, field for field.
		if js, err = yaml.JSONToYAML(js); err != nil {
			return err
		}
		_, err = out.Write(js)
		return err
	}
	_, err = fmt.Fprintln(out, string(js))
	return err
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
