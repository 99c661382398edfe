// dashcheck decodes Grafana dashboard JSON strictly with the Grafana Foundation SDK's dashboard
// types (generated from Grafana's own schemas; Grafana itself is AGPL and is not used here):
// unknown fields, wrong types and missing required fields fail, panel options and field configs
// are checked per panel type, then the SDK's Validate runs. tests/chart/test_monitoring.py builds it
// against the SDK version pinned in trainstack.lock.yaml (sources.grafana-foundation-sdk).
package main

import (
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// realError drops the SDK's typed-nil error (an empty cog.BuildErrors).
func realError(err error) error {
	if errs, ok := err.(cog.BuildErrors); ok && len(errs) == 0 {
		return nil
	}
	return err
}

func main() {
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			os.Exit(2)
		}
		var board dashboard.Dashboard
		if err := realError(board.UnmarshalJSONStrict(raw)); err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed = true
			continue
		}
		if err := realError(board.Validate()); err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%s: ok (%d panels)\n", path, len(board.Panels))
	}
	if failed {
		os.Exit(1)
	}
}
