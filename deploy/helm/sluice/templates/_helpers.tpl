{{/* The release's full name, at most 63 characters (a DNS label). */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pods: never change them on an upgrade. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "sluice.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.redisSecretName" -}}
{{- .Values.redis.urlSecretName | default (printf "%s-redis" (include "sluice.fullname" .)) -}}
{{- end -}}

{{- define "sluice.adminSecretName" -}}
{{- .Values.adminKey.secretName | default (printf "%s-admin-key" (include "sluice.fullname" .)) -}}
{{- end -}}

{{/* The host names the HTTP API answers (--allowed-hosts): the Service's
DNS names, and those the values add. */}}
{{- define "sluice.allowedHosts" -}}
{{- $name := include "sluice.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns) -}}
{{- concat $hosts .Values.allowedHosts | join "," -}}
{{- end -}}

{{/* The checks of the values that templates cannot express. */}}
{{- define "sluice.check" -}}
{{- if not (has .Values.store (list "pebble" "dynamodb" "redis" "memory")) -}}
{{- fail (printf "store must be pebble, dynamodb, redis or memory, got %q" .Values.store) -}}
{{- end -}}
{{- if and (has .Values.store (list "dynamodb" "redis")) (lt (int .Values.replicaCount) 1) -}}
{{- fail "replicaCount must be at least 1" -}}
{{- end -}}
{{- if le (int .Values.terminationGracePeriodSeconds) (add .Values.preStopSleepSeconds .Values.shutdownTimeoutSeconds | int) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed preStopSleepSeconds plus shutdownTimeoutSeconds (%v), or the kubelet kills serve before it drains" .Values.terminationGracePeriodSeconds (add .Values.preStopSleepSeconds .Values.shutdownTimeoutSeconds)) -}}
{{- end -}}
{{- if and .Values.envoy.enabled (eq (int .Values.envoy.grpcPort) (int .Values.http.port)) -}}
{{- fail "envoy.grpcPort must differ from http.port" -}}
{{- end -}}
{{- end -}}

{{/* The HTTP listener's scheme: https with tls.secretName. */}}
{{- define "sluice.scheme" -}}
{{- if .Values.tls.secretName }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* The pod template of every shape. */}}
{{- define "sluice.podTemplate" -}}
{{- include "sluice.check" . -}}
metadata:
  labels:
    {{- include "sluice.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "sluice.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    fsGroupChangePolicy: OnRootMismatch
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: sluice
      image: {{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - serve
        - --addr=:{{ .Values.http.port }}
        - --store={{ .Values.store }}
        {{- if ne .Values.store "memory" }}
        {{- /* pebble's store; on dynamodb and redis, the dashboard's history (an emptyDir: it outlives a container's restart, not the pod) */}}
        - --data-dir=/data
        {{- end }}
        {{- if eq .Values.store "pebble" }}
        {{- with .Values.syncInterval }}
        - --sync-interval={{ . }}
        {{- end }}
        {{- with .Values.writeBehind }}
        - --write-behind={{ . }}
        {{- end }}
        {{- end }}
        {{- if eq .Values.store "dynamodb" }}
        - --dynamodb-table={{ required "dynamodb.table is required" .Values.dynamodb.table }}
        {{- with .Values.dynamodb.region }}
        - --dynamodb-region={{ . }}
        {{- end }}
        {{- with .Values.dynamodb.endpoint }}
        - --dynamodb-endpoint={{ . }}
        {{- end }}
        {{- end }}
        {{- if and (eq .Values.store "redis") .Values.redis.caSecretName }}
        - --redis-ca=/etc/sluice/redis-ca/{{ .Values.redis.caSecretKey }}
        {{- end }}
        - --advertise-url={{ include "sluice.scheme" . }}://$(POD_IP):{{ .Values.http.port }}
        - --allowed-hosts={{ include "sluice.allowedHosts" . }}
        - --admin-key-file=/etc/sluice/admin/{{ .Values.adminKey.secretKey }}
        {{- if .Values.config }}
        - --config=/etc/sluice/config/sluice.yaml
        {{- end }}
        {{- with .Values.trustedProxies }}
        - --trusted-proxies={{ join "," . }}
        {{- end }}
        - --shutdown-timeout={{ .Values.shutdownTimeoutSeconds }}s
        - --log-format={{ .Values.logFormat }}
        - --log-level={{ .Values.logLevel }}
        {{- with (.Values.metrics).tenantLabels }}
        - --metrics-tenant-labels={{ . }}
        {{- end }}
        {{- if .Values.envoy.enabled }}
        - --grpc-addr=:{{ .Values.envoy.grpcPort }}
        {{- if .Values.envoy.domains }}
        - --envoy-config=/etc/sluice/envoy
        {{- end }}
        {{- if .Values.envoy.perDescriptor }}
        - --envoy-per-descriptor
        {{- end }}
        {{- if .Values.envoy.responseHeaders }}
        - --envoy-response-headers
        {{- end }}
        {{- if .Values.envoy.tokenSecretName }}
        - --grpc-token-file=/etc/sluice/grpc-token/{{ .Values.envoy.tokenSecretKey }}
        {{- end }}
        {{- end }}
        {{- if .Values.tls.secretName }}
        - --tls-cert=/etc/sluice/tls/tls.crt
        - --tls-key=/etc/sluice/tls/tls.key
        {{- end }}
        {{- if .Values.pseudonymiseKeys.secretName }}
        - --pseudonymise-keys
        - --key-secret-file=/etc/sluice/key-secret/{{ .Values.pseudonymiseKeys.secretKey }}
        {{- end }}
        {{- with .Values.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      env:
        # --advertise-url: the other nodes reach this one at its pod IP.
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        {{- if eq .Values.store "redis" }}
        # --redis-url, from a Secret: it may hold the password, which a
        # command line would show (the logs show it as xxxxx).
        - name: SLUICE_REDIS_URL
          valueFrom:
            secretKeyRef:
              name: {{ include "sluice.redisSecretName" . }}
              key: {{ .Values.redis.urlSecretKey }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ .Values.http.port }}
          protocol: TCP
        {{- if .Values.envoy.enabled }}
        - name: grpc
          containerPort: {{ .Values.envoy.grpcPort }}
          protocol: TCP
        {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: http
          scheme: {{ include "sluice.scheme" . | upper }}
        periodSeconds: 2
        failureThreshold: 60
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
          scheme: {{ include "sluice.scheme" . | upper }}
        {{- toYaml .Values.probes.liveness | nindent 8 }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
          scheme: {{ include "sluice.scheme" . | upper }}
        {{- toYaml .Values.probes.readiness | nindent 8 }}
      lifecycle:
        preStop:
          sleep:
            seconds: {{ .Values.preStopSleepSeconds }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        runAsNonRoot: true
        capabilities:
          drop: [ALL]
      volumeMounts:
        {{- if ne .Values.store "memory" }}
        - name: data
          mountPath: /data
        {{- end }}
        - name: tmp
          mountPath: /tmp
        - name: admin-key
          mountPath: /etc/sluice/admin
          readOnly: true
        {{- if .Values.config }}
        - name: config
          mountPath: /etc/sluice/config
          readOnly: true
        {{- end }}
        {{- if and .Values.envoy.enabled .Values.envoy.domains }}
        - name: envoy-config
          mountPath: /etc/sluice/envoy
          readOnly: true
        {{- end }}
        {{- if and .Values.envoy.enabled .Values.envoy.tokenSecretName }}
        - name: grpc-token
          mountPath: /etc/sluice/grpc-token
          readOnly: true
        {{- end }}
        {{- if .Values.tls.secretName }}
        - name: tls
          mountPath: /etc/sluice/tls
          readOnly: true
        {{- end }}
        {{- if .Values.pseudonymiseKeys.secretName }}
        - name: key-secret
          mountPath: /etc/sluice/key-secret
          readOnly: true
        {{- end }}
        {{- if and (eq .Values.store "redis") .Values.redis.caSecretName }}
        - name: redis-ca
          mountPath: /etc/sluice/redis-ca
          readOnly: true
        {{- end }}
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: 64Mi
    {{- if has .Values.store (list "dynamodb" "redis") }}
    - name: data
      emptyDir:
        sizeLimit: 64Mi
    {{- end }}
    - name: admin-key
      secret:
        secretName: {{ include "sluice.adminSecretName" . }}
        defaultMode: 0440
        items:
          - key: {{ .Values.adminKey.secretKey }}
            path: {{ .Values.adminKey.secretKey }}
    {{- if .Values.config }}
    - name: config
      configMap:
        name: {{ include "sluice.fullname" . }}-config
    {{- end }}
    {{- if and .Values.envoy.enabled .Values.envoy.domains }}
    - name: envoy-config
      configMap:
        name: {{ include "sluice.fullname" . }}-envoy
    {{- end }}
    {{- if and .Values.envoy.enabled .Values.envoy.tokenSecretName }}
    - name: grpc-token
      secret:
        secretName: {{ .Values.envoy.tokenSecretName }}
        defaultMode: 0440
        items:
          - key: {{ .Values.envoy.tokenSecretKey }}
            path: {{ .Values.envoy.tokenSecretKey }}
    {{- end }}
    {{- if .Values.tls.secretName }}
    - name: tls
      # Mounted whole, not by items: a renewed certificate (cert-manager)
      # reaches the files, which serve reloads on change.
      secret:
        secretName: {{ .Values.tls.secretName }}
        defaultMode: 0440
    {{- end }}
    {{- if .Values.pseudonymiseKeys.secretName }}
    - name: key-secret
      secret:
        secretName: {{ .Values.pseudonymiseKeys.secretName }}
        defaultMode: 0440
        items:
          - key: {{ .Values.pseudonymiseKeys.secretKey }}
            path: {{ .Values.pseudonymiseKeys.secretKey }}
    {{- end }}
    {{- if and (eq .Values.store "redis") .Values.redis.caSecretName }}
    - name: redis-ca
      secret:
        secretName: {{ .Values.redis.caSecretName }}
        defaultMode: 0440
        items:
          - key: {{ .Values.redis.caSecretKey }}
            path: {{ .Values.redis.caSecretKey }}
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
