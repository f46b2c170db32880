// Command render writes the plain manifests of deploy/manifests from the
// Helm chart, one file per shape: `make manifests` runs it.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/deploy/kubetest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run() error {
	for _, s := range kubetest.Shapes {
		text, err := kubetest.Plain(kubetest.ChartDir, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		file := filepath.Join(kubetest.ManifestsDir, s.Name+".yaml")
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", file)
	}
	return nil
}
