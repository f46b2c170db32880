package kubetest

import (
	"errors"
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kinds are the API types the chart may render, by apiVersion and kind:
// Kubernetes' own (k8s.io/api) and prometheus-operator's ServiceMonitor
// (its published Go types).
var kinds = map[string]func() any{
	"v1/ServiceAccount":                       func() any { return new(corev1.ServiceAccount) },
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"apps/v1/StatefulSet":                     func() any { return new(appsv1.StatefulSet) },
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
}

// Decode decodes one manifest strictly into the API type its apiVersion
// and kind name: a field the type does not have, a field given twice, or
// a kind not in the list fails.
func Decode(m Manifest) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(m.Content), &tm); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Source, err)
	}
	id := tm.APIVersion + "/" + tm.Kind
	newObj, ok := kinds[id]
	if !ok {
		return nil, fmt.Errorf("%s: apiVersion %q kind %q is not a kind this test knows", m.Source, tm.APIVersion, tm.Kind)
	}
	// As the API server decodes: YAML's duplicate keys refused, then JSON
	// case-sensitively, unknown and duplicate fields refused.
	j, err := yaml.YAMLToJSONStrict([]byte(m.Content))
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", m.Source, id, err)
	}
	obj := newObj()
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err = errors.Join(append(strict, err)...); err != nil {
		return nil, fmt.Errorf("%s (%s): %w", m.Source, id, err)
	}
	return obj, nil
}
