{{/* The chart's name, and the release's full name (the release name alone when it already
says gang-scheduler, so that `helm install gang-scheduler` names things as manifests/ does). */}}
{{- define "gang-scheduler.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gang-scheduler.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "gang-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gang-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gang-scheduler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "gang-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gang-scheduler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gang-scheduler.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: the ServiceAccount to run as, when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The rules of manifests/rbac.yaml (files/rbac.yaml is a symlink to it), by kind:
{ClusterRole: [...], Role: [...]}. The kustomize install and the chart grant the same, from
one file; the names and namespaces around the rules are the chart's own. */}}
{{- define "gang-scheduler.rbacRules" -}}
{{- $rules := dict }}
{{- range $doc := splitList "\n---" (.Files.Get "files/rbac.yaml") }}
{{- $object := fromYaml $doc }}
{{- if and $object.kind (hasKey $object "rules") }}
{{- if hasKey $rules $object.kind }}
{{- fail (printf "files/rbac.yaml (manifests/rbac.yaml) has more than one %s: the chart grants one of each" $object.kind) }}
{{- end }}
{{- $_ := set $rules $object.kind $object.rules }}
{{- end }}
{{- end }}
{{- if not (and $rules.ClusterRole $rules.Role) }}
{{- fail "files/rbac.yaml (a symlink to manifests/rbac.yaml) has no ClusterRole or no Role rules: is the symlink intact?" }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{/* The scheduler's command line: a flag whose value is null is left to its default. */}}
{{- define "gang-scheduler.args" -}}
- run
- {{ printf "--log-format=%s" .Values.logFormat | quote }}
{{- /* Numbers from a values file are floats to helm: int64 keeps a million a million, not 1e+06, for the flags that take whole numbers. */}}
- --health-port={{ .Values.healthPort | int64 }}
- --metrics-port={{ .Values.metrics.port | int64 }}
{{- range .Values.schedulerNames }}
- {{ printf "--scheduler-name=%s" . | quote }}
{{- end }}
{{- if .Values.leaderElection.enabled }}
- --leader-elect
- --leader-elect-namespace={{ .Release.Namespace }}
{{- with .Values.leaderElection.leaseDuration }}
- --lease-duration={{ . }}
{{- end }}
{{- end }}
{{- with .Values.scheduling }}
{{- if not (kindIs "invalid" .defaultTimeout) }}
- --default-timeout={{ .defaultTimeout }}
{{- end }}
{{- if not (kindIs "invalid" .maxBackoff) }}
- --max-backoff={{ .maxBackoff }}
{{- end }}
{{- if not (kindIs "invalid" .starvationAfter) }}
- --starvation-after={{ .starvationAfter }}
{{- end }}
{{- if not (kindIs "invalid" .staleGangAfter) }}
- --stale-gang-after={{ .staleGangAfter }}
{{- end }}
{{- if not (kindIs "invalid" .fairShareHalfLife) }}
- --fair-share-half-life={{ .fairShareHalfLife }}
{{- end }}
{{- with .scoring }}
- {{ printf "--scoring=%s" . | quote }}
{{- end }}
{{- with .actions }}
- {{ printf "--actions=%s" (join "," .) | quote }}
{{- end }}
{{- if not (kindIs "invalid" .consolidationMaxMoves) }}
- --consolidation-max-moves={{ .consolidationMaxMoves | int64 }}
{{- end }}
{{- if not (kindIs "invalid" .consolidationBelowPriority) }}
- --consolidation-below-priority={{ .consolidationBelowPriority | int64 }}
{{- end }}
{{- with .bindConcurrency }}
- --bind-concurrency={{ . | int64 }}
{{- end }}
{{- if not (kindIs "invalid" .kubeApiQps) }}
- --kube-api-qps={{ .kubeApiQps }}
{{- end }}
{{- if not (kindIs "invalid" .kubeApiBurst) }}
- --kube-api-burst={{ .kubeApiBurst | int64 }}
{{- end }}
{{- end }}
- {{ printf "--topology-namespace=%s" (.Values.topology.namespace | default .Release.Namespace) | quote }}
{{- with .Values.topology.fromLabels }}
{{- $levels := list }}
{{- range . }}
{{- $levels = append $levels (printf "%s=%s" (required "topology.fromLabels[].level" .level) (required "topology.fromLabels[].label" .label)) }}
{{- end }}
- {{ printf "--topology-from-labels=%s" (join "," $levels) | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.unreachableLimit) }}
- --unreachable-limit={{ .Values.unreachableLimit }}
{{- end }}
{{- if .Values.verbose }}
- --verbose
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
