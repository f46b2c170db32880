package kubetest

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sluicehq/sluice/config"
)

// rendered is one shape's manifests, decoded.
type rendered struct {
	values          map[string]any
	notes           string
	serviceAccounts []*corev1.ServiceAccount
	configMaps      map[string]*corev1.ConfigMap
	services        []*corev1.Service
	statefulSets    []*appsv1.StatefulSet
	deployments     []*appsv1.Deployment
	pdbs            []*policyv1.PodDisruptionBudget
	monitors        []*monitoringv1.ServiceMonitor
}

// render renders the chart with values and decodes every manifest
// strictly.
func render(t *testing.T, values map[string]any) *rendered {
	t.Helper()
	ms, notes, err := Render(ChartDir, values)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeAll(ms)
	if err != nil {
		t.Fatal(err)
	}
	r.values, r.notes = values, notes
	return r
}

func decodeAll(ms []Manifest) (*rendered, error) {
	r := &rendered{configMaps: map[string]*corev1.ConfigMap{}}
	var errs []error
	for _, m := range ms {
		obj, err := Decode(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		meta := obj.(metav1.Object)
		if meta.GetName() == "" {
			errs = append(errs, fmt.Errorf("%s: no metadata.name", m.Source))
		}
		if ns := meta.GetNamespace(); ns != "" && ns != Namespace {
			errs = append(errs, fmt.Errorf("%s: namespace %q, not the release's", m.Source, ns))
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			r.serviceAccounts = append(r.serviceAccounts, o)
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.Service:
			r.services = append(r.services, o)
		case *appsv1.StatefulSet:
			r.statefulSets = append(r.statefulSets, o)
		case *appsv1.Deployment:
			r.deployments = append(r.deployments, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *monitoringv1.ServiceMonitor:
			r.monitors = append(r.monitors, o)
		}
	}
	return r, errors.Join(errs...)
}

// pod returns the one workload's pod template and replicas.
func (r *rendered) pod(t *testing.T) (corev1.PodTemplateSpec, int32) {
	t.Helper()
	if n := len(r.statefulSets) + len(r.deployments); n != 1 {
		t.Fatalf("%d workloads (StatefulSets and Deployments), want 1", n)
	}
	if len(r.statefulSets) == 1 {
		s := r.statefulSets[0]
		return s.Spec.Template, *s.Spec.Replicas
	}
	d := r.deployments[0]
	return d.Spec.Template, *d.Spec.Replicas
}

// flags parses a container's args after "serve": --name=value or --name.
func flags(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %q do not start with serve", args)
	}
	f := map[string]string{}
	for _, a := range args[1:] {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") {
			t.Fatalf("arg %q is not a --flag", a)
		}
		if _, dup := f[name]; dup {
			t.Errorf("--%s given twice", name)
		}
		f[name] = value
	}
	return f
}

func TestShapes(t *testing.T) {
	for _, s := range Shapes {
		t.Run(s.Name, func(t *testing.T) {
			values, err := Values(ChartDir, s)
			if err != nil {
				t.Fatal(err)
			}
			lintChart(t, values)
			r := render(t, values)
			c := r.checkPod(t)
			switch s.Name {
			case "pebble":
				r.checkSingleWriter(t, c)
			case "dynamodb":
				r.checkDynamo(t, c)
			case "envoy":
				r.checkSingleWriter(t, c)
				r.checkEnvoy(t, c)
			case "redis":
				r.checkRedis(t, c)
			}
		})
	}
}

// lintChart runs helm lint's rules on the chart with values, failing on
// any warning or error.
func lintChart(t *testing.T, values map[string]any) {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion("v1.33.0")
	if err != nil {
		t.Fatal(err)
	}
	l := lint.AllWithKubeVersion(ChartDir, values, Namespace, kv)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %v", m)
		}
	}
}

// server is the sluice container of a shape and what the test read of it.
type server struct {
	pod       corev1.PodTemplateSpec
	replicas  int32
	c         corev1.Container
	flags     map[string]string
	mounts    map[string]corev1.Volume // mount path to volume
	namedPort map[string]int32
}

// checkPod checks what every shape's pod must hold, and returns its
// sluice container.
func (r *rendered) checkPod(t *testing.T) *server {
	pod, replicas := r.pod(t)
	spec := pod.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	s := &server{pod: pod, replicas: replicas, c: spec.Containers[0], mounts: map[string]corev1.Volume{}, namedPort: map[string]int32{}}
	c := s.c
	s.flags = flags(t, c.Args)
	for _, p := range c.Ports {
		s.namedPort[p.Name] = p.ContainerPort
	}

	// Probes on the server's endpoints, on a port the container has.
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s probe on %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if port := s.port(t, p.probe.HTTPGet.Port.String()); port != s.httpPort(t) {
			t.Errorf("%s probe on port %d, not the HTTP API's (--addr %s)", p.name, port, s.flags["addr"])
		}
	}

	// Non-root, read-only, no capabilities, the runtime's seccomp profile.
	psc, csc := spec.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil {
		t.Fatal("no pod or container securityContext")
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod runs as non-root %v, user %v; want true, 65532 (the image's user)", deref(psc.RunAsNonRoot), deref(psc.RunAsUser))
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp profile %v, want RuntimeDefault", psc.SeccompProfile)
	}
	if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Error("root filesystem not read-only")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("privilege escalation allowed")
	}
	if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v, want all dropped", csc.Capabilities)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}

	// Graceful termination: the preStop sleep and serve's drain both fit
	// in the grace period. The image has no shell: no exec hook.
	drain, err := time.ParseDuration(s.flags["shutdown-timeout"])
	if err != nil {
		t.Fatalf("--shutdown-timeout: %v", err)
	}
	var sleep time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if c.Lifecycle.PreStop.Exec != nil {
			t.Error("preStop runs a command: the image has no shell")
		}
		if c.Lifecycle.PreStop.Sleep != nil {
			sleep = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= sleep+drain {
		t.Errorf("terminationGracePeriodSeconds %v is not above the preStop sleep %v and --shutdown-timeout %v", g, sleep, drain)
	}

	// Every mount has its volume; every ConfigMap a volume names is rendered.
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
		if v.ConfigMap != nil && r.configMaps[v.ConfigMap.Name] == nil {
			t.Errorf("volume %s names the ConfigMap %s, which is not rendered", v.Name, v.ConfigMap.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			if !slices.ContainsFunc(r.statefulSets, func(s *appsv1.StatefulSet) bool {
				return slices.ContainsFunc(s.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == m.Name })
			}) {
				t.Errorf("mount %s at %s has no volume", m.Name, m.MountPath)
			}
			v = corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: m.Name}}}
		}
		s.mounts[m.MountPath] = v
	}

	// The admin key from a Secret's file; no key in the arguments or the
	// environment.
	if v := s.volumeOf(t, "admin-key-file"); v.Secret == nil || !slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Path == path.Base(s.flags["admin-key-file"]) }) {
		t.Errorf("--admin-key-file %s is not a key of a Secret volume", s.flags["admin-key-file"])
	}
	if _, ok := s.flags["admin-key"]; ok {
		t.Error("the admin key is in the arguments")
	}
	// The configuration from a ConfigMap, which sluice loads.
	if file, ok := s.flags["config"]; ok {
		v := s.volumeOf(t, "config")
		if v.ConfigMap == nil {
			t.Fatalf("--config %s is not on a ConfigMap volume", file)
		}
		text, ok := r.configMaps[v.ConfigMap.Name].Data[path.Base(file)]
		if !ok {
			t.Fatalf("ConfigMap %s has no key %s", v.ConfigMap.Name, path.Base(file))
		}
		if _, err := config.Parse(file, []byte(text)); err != nil {
			t.Errorf("the ConfigMap's configuration does not load: %v", err)
		}
	}

	// --advertise-url from the pod's IP, which serve also answers.
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	}) {
		t.Error("no POD_IP from the downward API")
	}
	scheme := "http"
	if _, tls := s.flags["tls-cert"]; tls {
		scheme = "https"
	}
	if want := fmt.Sprintf("%s://$(POD_IP):%d", scheme, s.httpPort(t)); s.flags["advertise-url"] != want {
		t.Errorf("--advertise-url %q, want %q", s.flags["advertise-url"], want)
	}
	for _, e := range c.Env {
		// The Redis URL may hold a password: from a Secret, into the
		// environment, never on the command line.
		fromSecret := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		if strings.HasPrefix(e.Name, "SLUICE_") && e.Name != "SLUICE_ADMIN_KEY" && !(e.Name == "SLUICE_REDIS_URL" && fromSecret) {
			t.Errorf("env %s: the chart passes flags, which win", e.Name)
		}
	}

	r.checkService(t, s)
	return s
}

// port returns the container port that name (a port's name or number)
// names.
func (s *server) port(t *testing.T, name string) int32 {
	t.Helper()
	if n, err := strconv.Atoi(name); err == nil {
		if !slices.ContainsFunc(s.c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == int32(n) }) {
			t.Errorf("port %d is none of the container's", n)
		}
		return int32(n)
	}
	p, ok := s.namedPort[name]
	if !ok {
		t.Errorf("port %q is none of the container's", name)
	}
	return p
}

// httpPort returns the port of --addr.
func (s *server) httpPort(t *testing.T) int32 {
	t.Helper()
	return s.listenPort(t, "addr")
}

func (s *server) listenPort(t *testing.T, flag string) int32 {
	t.Helper()
	addr, ok := s.flags[flag]
	if !ok {
		t.Fatalf("no --%s", flag)
	}
	_, port, _ := strings.Cut(addr, ":")
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("--%s %q has no port", flag, addr)
	}
	return int32(n)
}

// volumeOf returns the volume that the file or directory of flag lies on.
func (s *server) volumeOf(t *testing.T, flag string) corev1.Volume {
	t.Helper()
	file, ok := s.flags[flag]
	if !ok {
		t.Fatalf("no --%s", flag)
	}
	for dir := file; dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		if v, ok := s.mounts[dir]; ok {
			return v
		}
	}
	t.Fatalf("--%s %s is on no volume", flag, file)
	return corev1.Volume{}
}

// checkService checks that the Service reaches the pods on the container's
// HTTP port, that serve answers its DNS names, that the PDB selects the
// pods and the ServiceMonitor scrapes /metrics on the Service's HTTP port.
func (r *rendered) checkService(t *testing.T, s *server) {
	podLabels := labels.Set(s.pod.Labels)
	hosts := strings.Split(s.flags["allowed-hosts"], ",")
	var main *corev1.Service
	for _, svc := range r.services {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s does not select the pods", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			s.port(t, p.TargetPort.String())
		}
		if slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" }) {
			if main != nil {
				t.Errorf("Services %s and %s both serve http", main.Name, svc.Name)
			}
			main = svc
		}
	}
	if main == nil {
		t.Fatal("no Service with an http port")
	}
	for _, h := range []string{main.Name, main.Name + "." + Namespace + ".svc", main.Name + "." + Namespace + ".svc.cluster.local"} {
		if !slices.Contains(hosts, h) {
			t.Errorf("--allowed-hosts %q lacks the Service's name %s", s.flags["allowed-hosts"], h)
		}
	}
	if sts := r.statefulSets; len(sts) == 1 && sts[0].Spec.ServiceName != main.Name {
		t.Errorf("StatefulSet's serviceName %q is not the Service %s", sts[0].Spec.ServiceName, main.Name)
	}

	if len(r.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(r.pdbs))
	}
	pdb := r.pdbs[0]
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods %v (%v)", pdb.Spec.Selector, podLabels, err)
	}
	if pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() >= int(s.replicas) {
		t.Errorf("PodDisruptionBudget minAvailable %v with %d replicas blocks every drain", pdb.Spec.MinAvailable, s.replicas)
	}

	if len(r.monitors) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(r.monitors))
	}
	sm := r.monitors[0]
	msel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || msel.Empty() || !msel.Matches(labels.Set(main.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the Service %s (%v)", sm.Spec.Selector, main.Name, err)
	}
	if ns := sm.Spec.NamespaceSelector.MatchNames; len(ns) > 0 && !slices.Contains(ns, Namespace) {
		t.Errorf("ServiceMonitor looks in namespaces %v, not the release's", ns)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Fatalf("ServiceMonitor endpoints %+v, want /metrics on the Service's http port", sm.Spec.Endpoints)
	}
	// With tenant labels, /metrics answers only the admin key: the
	// ServiceMonitor sends the one the pods read, from the same Secret.
	auth := sm.Spec.Endpoints[0].Authorization
	n, _ := strconv.Atoi(s.flags["metrics-tenant-labels"])
	switch {
	case n == 0 && auth != nil:
		t.Errorf("without tenant labels the ServiceMonitor sends a key: %+v", auth)
	case n > 0:
		admin := s.volumeOf(t, "admin-key-file")
		if auth == nil || auth.Type != "Bearer" || auth.Credentials == nil || admin.Secret == nil ||
			auth.Credentials.Name != admin.Secret.SecretName || auth.Credentials.Key != path.Base(s.flags["admin-key-file"]) {
			t.Errorf("with tenant labels the ServiceMonitor's authorization is %+v, want Bearer from the admin key's Secret %+v", auth, admin.Secret)
		}
	}
}

// TestMetricsTenantLabels: metrics.tenantLabels passes
// --metrics-tenant-labels, and then the ServiceMonitor scrapes /metrics
// with the admin key (checkService), in every shape; by default neither.
func TestMetricsTenantLabels(t *testing.T) {
	for _, shape := range Shapes {
		t.Run(shape.Name, func(t *testing.T) {
			values, err := Values(ChartDir, shape)
			if err != nil {
				t.Fatal(err)
			}
			s := render(t, values).checkPod(t)
			if v, ok := s.flags["metrics-tenant-labels"]; ok {
				t.Errorf("by default --metrics-tenant-labels=%s", v)
			}
			values["metrics"] = map[string]any{"tenantLabels": 20}
			values["adminKey"] = map[string]any{"secretName": "ops-admin", "secretKey": "key"}
			r := render(t, values)
			s = r.checkPod(t) // checks the ServiceMonitor's key
			if s.flags["metrics-tenant-labels"] != "20" {
				t.Errorf("metrics.tenantLabels 20: --metrics-tenant-labels=%q", s.flags["metrics-tenant-labels"])
			}
			if auth := r.monitors[0].Spec.Endpoints[0].Authorization; auth == nil || auth.Credentials == nil || auth.Credentials.Name != "ops-admin" || auth.Credentials.Key != "key" {
				t.Errorf("ServiceMonitor's authorization %+v, want the Secret ops-admin's key", auth)
			}
		})
	}
}

// checkSingleWriter checks a shape on the embedded store: one pod of a
// StatefulSet, its data dir on the claim's volume.
func (r *rendered) checkSingleWriter(t *testing.T, s *server) {
	if s.flags["store"] != "pebble" {
		t.Errorf("--store %q, want pebble", s.flags["store"])
	}
	if len(r.statefulSets) != 1 || len(r.deployments) != 0 {
		t.Fatalf("%d StatefulSets and %d Deployments, want a StatefulSet alone", len(r.statefulSets), len(r.deployments))
	}
	if s.replicas != 1 {
		t.Errorf("%d replicas on one Pebble volume, want 1", s.replicas)
	}
	if v := s.volumeOf(t, "data-dir"); v.PersistentVolumeClaim == nil || !slices.ContainsFunc(r.statefulSets[0].Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == v.Name }) {
		t.Errorf("--data-dir %s is not on the StatefulSet's claim", s.flags["data-dir"])
	}
}

func (r *rendered) checkDynamo(t *testing.T, s *server) {
	f := s.flags
	if f["store"] != "dynamodb" || f["dynamodb-table"] == "" || f["dynamodb-region"] == "" {
		t.Errorf("--store %q --dynamodb-table %q --dynamodb-region %q, want dynamodb, a table and a region", f["store"], f["dynamodb-table"], f["dynamodb-region"])
	}
	if len(r.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(r.deployments))
	}
	if want := int32(toInt(t, r.values["replicaCount"])); s.replicas != want || want < 2 {
		t.Errorf("%d replicas, want the values' %d, several", s.replicas, want)
	}
	if len(r.serviceAccounts) != 1 || r.serviceAccounts[0].Name != s.pod.Spec.ServiceAccountName {
		t.Fatalf("the pods' ServiceAccount %q is not the one rendered", s.pod.Spec.ServiceAccountName)
	}
	arn := r.serviceAccounts[0].Annotations["eks.amazonaws.com/role-arn"]
	if want := r.values["serviceAccount"].(map[string]any)["roleArn"]; arn == "" || arn != want {
		t.Errorf("ServiceAccount role-arn annotation %q, want %q", arn, want)
	}
	// The data dir holds the dashboard's history only (the counters are
	// DynamoDB's): an emptyDir, never a claim that would tie a pod to a
	// volume.
	if dir := f["data-dir"]; dir != "/data" {
		t.Errorf("--data-dir %q on a DynamoDB shape, want /data (the dashboard's history)", dir)
	}
	for _, v := range s.pod.Spec.Volumes {
		if v.Name == "data" && v.EmptyDir == nil {
			t.Errorf("the DynamoDB shape's data volume is %+v, want an emptyDir", v.VolumeSource)
		}
	}
	if !strings.Contains(r.notes, "sluice dynamodb iam-policy") {
		t.Error("NOTES.txt does not show the IAM policy's command")
	}
}

// checkRedis: several nodes, a Deployment with no volume claim (the
// counters are Redis's), the URL from a Secret into $SLUICE_REDIS_URL,
// never in the arguments.
func (r *rendered) checkRedis(t *testing.T, s *server) {
	f := s.flags
	if f["store"] != "redis" {
		t.Errorf("--store %q, want redis", f["store"])
	}
	if _, ok := f["redis-url"]; ok {
		t.Error("--redis-url is in the arguments, which show its password")
	}
	i := slices.IndexFunc(s.c.Env, func(e corev1.EnvVar) bool { return e.Name == "SLUICE_REDIS_URL" })
	if i < 0 || s.c.Env[i].ValueFrom == nil || s.c.Env[i].ValueFrom.SecretKeyRef == nil {
		t.Fatal("no $SLUICE_REDIS_URL from a Secret")
	}
	ref := s.c.Env[i].ValueFrom.SecretKeyRef
	rv := r.values["redis"].(map[string]any)
	if ref.Name != rv["urlSecretName"] || ref.Key != rv["urlSecretKey"] {
		t.Errorf("$SLUICE_REDIS_URL from Secret %s key %s, want the values' %v key %v", ref.Name, ref.Key, rv["urlSecretName"], rv["urlSecretKey"])
	}
	if len(r.deployments) != 1 || len(r.statefulSets) != 0 {
		t.Fatalf("%d Deployments and %d StatefulSets, want one Deployment", len(r.deployments), len(r.statefulSets))
	}
	if want := int32(toInt(t, r.values["replicaCount"])); s.replicas != want || want < 2 {
		t.Errorf("%d replicas, want the values' %d, several", s.replicas, want)
	}
	if d := r.deployments[0].Spec.Strategy; d.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("strategy %s, want RollingUpdate: the nodes share Redis", d.Type)
	}
	for _, v := range s.pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Name == "data" && v.EmptyDir == nil {
			t.Errorf("volume %s is %+v: the Redis shape claims no volume", v.Name, v.VolumeSource)
		}
	}
	if !strings.Contains(r.notes, "create secret generic "+fmt.Sprint(rv["urlSecretName"])) {
		t.Error("NOTES.txt does not show how to create the URL's Secret")
	}
}

func (r *rendered) checkEnvoy(t *testing.T, s *server) {
	grpc := s.listenPort(t, "grpc-addr")
	if s.namedPort["grpc"] != grpc {
		t.Errorf("container port grpc %d is not --grpc-addr's %d", s.namedPort["grpc"], grpc)
	}
	var headless bool
	for _, svc := range r.services {
		for _, p := range svc.Spec.Ports {
			if p.Name == "grpc" && s.port(t, p.TargetPort.String()) == grpc && svc.Spec.ClusterIP == corev1.ClusterIPNone {
				headless = true
			}
		}
	}
	if !headless {
		t.Error("no headless Service on the gRPC port for Envoy's STRICT_DNS cluster")
	}
	if v := s.volumeOf(t, "envoy-config"); v.ConfigMap == nil || len(r.configMaps[v.ConfigMap.Name].Data) == 0 {
		t.Errorf("--envoy-config %s is not a ConfigMap of domains", s.flags["envoy-config"])
	}
	if v := s.volumeOf(t, "grpc-token-file"); v.Secret == nil {
		t.Errorf("--grpc-token-file %s is not on a Secret", s.flags["grpc-token-file"])
	}
}

func toInt(t *testing.T, v any) int {
	t.Helper()
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	t.Fatalf("%v (%T) is not a number", v, v)
	return 0
}

// TestSingleWriter: whatever replicaCount says, a shape on the embedded
// store runs one pod, as a StatefulSet.
func TestSingleWriter(t *testing.T) {
	values, err := Values(ChartDir, Shapes[0])
	if err != nil {
		t.Fatal(err)
	}
	values["replicaCount"] = 5
	r := render(t, values)
	r.checkSingleWriter(t, r.checkPod(t))
}

// TestRefusesShortGrace: the chart refuses a grace period that ends
// before serve drains.
func TestRefusesShortGrace(t *testing.T) {
	values, err := Values(ChartDir, Shapes[0])
	if err != nil {
		t.Fatal(err)
	}
	values["terminationGracePeriodSeconds"] = 12
	if _, _, err := Render(ChartDir, values); err == nil || !strings.Contains(err.Error(), "terminationGracePeriodSeconds") {
		t.Fatalf("rendered a grace period of 12s over a 5s sleep and a 10s drain: %v", err)
	}
}

// TestDecodeStrict: a misspelt field, a field given twice and an unknown
// kind fail to decode.
func TestDecodeStrict(t *testing.T) {
	values, err := Values(ChartDir, Shapes[0])
	if err != nil {
		t.Fatal(err)
	}
	ms, _, err := Render(ChartDir, values)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m Manifest) bool { return strings.Contains(m.Content, "readinessProbe:") })
	if i < 0 {
		t.Fatal("no manifest has a readinessProbe")
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"misspelt", "readinessProbe:", "readinesProbe:", `unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"twice", "  replicas: 1\n", "  replicas: 1\n  replicas: 2\n", `"replicas" already set`},
		{"kind", "kind: StatefulSet", "kind: StatefulSets", "not a kind this test knows"},
	} {
		m := ms[i]
		m.Content = strings.Replace(m.Content, tc.old, tc.new, 1)
		if m.Content == ms[i].Content {
			t.Fatalf("%s: %q is not in %s", tc.name, tc.old, m.Source)
		}
		if _, err := Decode(m); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: decoding gave %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestManifestsUpToDate: deploy/manifests holds the chart's rendering of
// each shape.
func TestManifestsUpToDate(t *testing.T) {
	for _, s := range Shapes {
		want, err := Plain(ChartDir, s)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(ManifestsDir, s.Name+".yaml")
		got, err := os.ReadFile(file)
		if err != nil || string(got) != want {
			t.Errorf("deploy/manifests/%s.yaml is not the chart's rendering (%v): run `make manifests`", s.Name, err)
		}
	}
}

// deref returns what p points to, or nil.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestEnvoyOnDynamo: values-envoy.yaml then values-dynamodb.yaml, as
// docs/operations.md tells for several nodes behind Envoy, render the
// DynamoDB shape with the gRPC port and its headless Service.
func TestEnvoyOnDynamo(t *testing.T) {
	values := map[string]any{}
	for _, s := range []Shape{Shapes[2], Shapes[1]} {
		v, err := Values(ChartDir, s)
		if err != nil {
			t.Fatal(err)
		}
		merge(values, v)
	}
	r := render(t, values)
	s := r.checkPod(t)
	r.checkDynamo(t, s)
	r.checkEnvoy(t, s)
}

// merge merges src into dst as helm's -f does for a second file: tables
// deeply, anything else replaced.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				merge(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

// TestMemoryOneNode: the memory store holds one node's counters: one
// replica whatever replicaCount says, the old pod gone before the new one
// starts.
func TestMemoryOneNode(t *testing.T) {
	values, err := Values(ChartDir, Shapes[0])
	if err != nil {
		t.Fatal(err)
	}
	values["store"], values["replicaCount"] = "memory", 5
	r := render(t, values)
	s := r.checkPod(t)
	if len(r.deployments) != 1 || s.replicas != 1 || r.deployments[0].Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("memory store: %d Deployments, %d replicas; want one Deployment of 1 replica, strategy Recreate", len(r.deployments), s.replicas)
	}
	if _, ok := s.flags["data-dir"]; ok || s.flags["store"] != "memory" {
		t.Errorf("memory store: flags %v", s.flags)
	}
}

// TestTLSAndPseudonyms: tls.secretName serves HTTPS and gRPC over TLS from
// the Secret's files, with the probes, the nodes' URLs and the
// ServiceMonitor on https; pseudonymiseKeys.secretName passes the secret
// by file, never on the command line; extraEnv, extraVolumes and
// extraVolumeMounts reach the container. In every shape.
func TestTLSAndPseudonyms(t *testing.T) {
	for _, shape := range Shapes {
		t.Run(shape.Name, func(t *testing.T) {
			values, err := Values(ChartDir, shape)
			if err != nil {
				t.Fatal(err)
			}
			values["tls"] = map[string]any{"secretName": "sluice-tls"}
			values["pseudonymiseKeys"] = map[string]any{"secretName": "sluice-keys", "secretKey": "secret"}
			values["extraEnv"] = []any{map[string]any{"name": "SSL_CERT_FILE", "value": "/etc/sluice/ca/ca.crt"}}
			// The CA's ConfigMap is the user's; a Secret, which the test
			// does not ask the chart to render.
			values["extraVolumes"] = []any{map[string]any{"name": "ca", "secret": map[string]any{"secretName": "sluice-ca"}}}
			values["extraVolumeMounts"] = []any{map[string]any{"name": "ca", "mountPath": "/etc/sluice/ca", "readOnly": true}}
			sm, _ := values["serviceMonitor"].(map[string]any) // the chart's defaults fill the rest
			if sm == nil {
				sm = map[string]any{}
				values["serviceMonitor"] = sm
			}
			sm["tlsConfig"] = map[string]any{"serverName": "sluice.sluice.svc"}
			r := render(t, values)
			s := r.checkPod(t)
			for flag, secret := range map[string]string{"tls-cert": "sluice-tls", "tls-key": "sluice-tls", "key-secret-file": "sluice-keys"} {
				if v := s.volumeOf(t, flag); v.Secret == nil || v.Secret.SecretName != secret {
					t.Errorf("--%s %s is not on the Secret %s: %+v", flag, s.flags[flag], secret, v.VolumeSource)
				}
			}
			if _, ok := s.flags["pseudonymise-keys"]; !ok {
				t.Error("no --pseudonymise-keys with pseudonymiseKeys.secretName")
			}
			if !strings.HasPrefix(s.flags["advertise-url"], "https://") {
				t.Errorf("--advertise-url %s, want https:// with TLS", s.flags["advertise-url"])
			}
			for name, p := range map[string]*corev1.Probe{"startup": s.c.StartupProbe, "liveness": s.c.LivenessProbe, "readiness": s.c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
					t.Errorf("the %s probe is not on HTTPS: %+v", name, p)
				}
			}
			if !slices.ContainsFunc(s.c.Env, func(e corev1.EnvVar) bool { return e.Name == "SSL_CERT_FILE" }) {
				t.Error("extraEnv did not reach the container")
			}
			if v, ok := s.mounts["/etc/sluice/ca"]; !ok || v.Secret == nil || v.Secret.SecretName != "sluice-ca" {
				t.Errorf("extraVolumes/extraVolumeMounts did not reach the pod: %+v", v)
			}
			if len(r.monitors) == 1 {
				ep := r.monitors[0].Spec.Endpoints[0]
				if ep.Scheme == nil || string(*ep.Scheme) != "https" || ep.TLSConfig == nil || ep.TLSConfig.ServerName == nil || *ep.TLSConfig.ServerName != "sluice.sluice.svc" {
					t.Errorf("the ServiceMonitor scrapes %v with %+v, want https and the tlsConfig given", ep.Scheme, ep.TLSConfig)
				}
			}
		})
	}
}

// TestRedisCA: redis.caSecretName gives --redis-ca, a key of that Secret
// mounted read-only.
func TestRedisCA(t *testing.T) {
	values, err := Values(ChartDir, Shapes[3])
	if err != nil {
		t.Fatal(err)
	}
	values["redis"].(map[string]any)["caSecretName"] = "redis-ca"
	r := render(t, values)
	s := r.checkPod(t)
	r.checkRedis(t, s)
	v := s.volumeOf(t, "redis-ca")
	if v.Secret == nil || v.Secret.SecretName != "redis-ca" || !slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Path == path.Base(s.flags["redis-ca"]) }) {
		t.Errorf("--redis-ca %s is not a key of the Secret redis-ca: %+v", s.flags["redis-ca"], v.VolumeSource)
	}
}
