// Package kubetest renders Sluice's Helm chart (deploy/helm/sluice) with
// Helm's Go library, for each shape users run, into the plain manifests of
// deploy/manifests; its tests decode every manifest strictly into the
// Kubernetes API types.
package kubetest

import (
	"fmt"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
)

// The release the plain manifests are rendered as: `helm install sluice
// deploy/helm/sluice -n sluice`.
const (
	Release   = "sluice"
	Namespace = "sluice"
)

// Shape is one way users run Sluice: a values file of the chart, rendered
// into deploy/manifests/<Name>.yaml.
type Shape struct {
	Name   string
	Values string // file name in the chart's directory
}

// Shapes are the shapes users run.
var Shapes = []Shape{
	{"pebble", "values-pebble.yaml"},     // one node, embedded store, a volume
	{"dynamodb", "values-dynamodb.yaml"}, // several nodes on DynamoDB
	{"envoy", "values-envoy.yaml"},       // Envoy's rate limit service
	{"redis", "values-redis.yaml"},       // several nodes on a Redis
}

// Paths of the chart and of the plain manifests, from this directory.
const (
	ChartDir     = "../helm/sluice"
	ManifestsDir = "../manifests"
)

// Manifest is one rendered document and the template it came from.
type Manifest struct {
	Source  string // "sluice/templates/service.yaml"
	Content string
}

// Values reads the values file of s, in chartDir.
func Values(chartDir string, s Shape) (map[string]any, error) {
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, s.Values))
	if err != nil {
		return nil, err
	}
	return v.AsMap(), nil
}

// Render renders the chart of chartDir with values as `helm template`
// does for the release Release in Namespace: the manifests in Helm's
// install order (hooks and NOTES.txt left out), and the notes.
func Render(chartDir string, values map[string]any) ([]Manifest, string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, "", err
	}
	opts := chartutil.ReleaseOptions{Name: Release, Namespace: Namespace, Revision: 1, IsInstall: true}
	caps := chartutil.DefaultCapabilities.Copy()
	vals, err := chartutil.ToRenderValues(ch, values, opts, caps)
	if err != nil {
		return nil, "", err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, "", err
	}
	var notes string
	for name, content := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			notes = content
			delete(files, name)
		}
	}
	hooks, sorted, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, "", err
	}
	if len(hooks) > 0 {
		return nil, "", fmt.Errorf("the chart has %d hooks: plain manifests cannot hold them", len(hooks))
	}
	out := make([]Manifest, 0, len(sorted))
	for _, m := range sorted {
		out = append(out, Manifest{Source: m.Name, Content: strings.TrimSpace(m.Content)})
	}
	return out, notes, nil
}

// Join writes manifests as one YAML stream, as `helm template` prints
// them: each document after "---" and a comment naming its template.
func Join(ms []Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Source, m.Content)
	}
	return b.String()
}

// Plain returns the plain manifests of s: its rendering, under a header
// that says where they come from.
func Plain(chartDir string, s Shape) (string, error) {
	values, err := Values(chartDir, s)
	if err != nil {
		return "", err
	}
	ms, _, err := Render(chartDir, values)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("# Sluice, %s shape: rendered from deploy/helm/sluice with %s as the\n"+
		"# release %q in the namespace %q. Do not edit: `make manifests` writes it.\n",
		s.Name, s.Values, Release, Namespace) + Join(ms), nil
}
