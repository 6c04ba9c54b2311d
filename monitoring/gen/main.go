// Command gen writes the rule files and dashboards that package monitoring
// describes. Run it from the repository's root: go run ./monitoring/gen
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/watchcache/watchcache-exporter/monitoring"
)

func main() {
	files, err := monitoring.Files()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for path, data := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
