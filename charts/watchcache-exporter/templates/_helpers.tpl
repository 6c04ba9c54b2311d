{{/* The name of the chart, or nameOverride. */}}
{{- define "watchcache-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name: the release name when it contains the chart's name. */}}
{{- define "watchcache-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The name of objects outside the release's namespace (cluster-scoped, or
in default): the full name, unless the namespace is the full name (deploy/'s
names), then the namespace and a hash of the release's name and namespace,
so that no two releases share one: "a-b" in "c" and "a" in "b-c" read alike,
and truncation drops the namespace of long names. At most 49 characters,
for the suffixes (-resources-all) added to it. */}}
{{- define "watchcache-exporter.clusterName" -}}
{{- $full := include "watchcache-exporter.fullname" . }}
{{- if eq $full .Release.Namespace }}
{{- $full }}
{{- else }}
{{- $hash := printf "%s/%s" .Release.Name .Release.Namespace | sha256sum | trunc 8 }}
{{- printf "%s-%s" $full .Release.Namespace | trunc 40 | trimSuffix "-" }}-{{ $hash }}
{{- end }}
{{- end }}

{{- define "watchcache-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "watchcache-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "watchcache-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "watchcache-exporter.selectorLabels" . }}
app.kubernetes.io/part-of: {{ include "watchcache-exporter.name" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "watchcache-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "watchcache-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: with serviceAccount.create=false, name the ServiceAccount to bind (not the namespace's default one)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The noise ConfigMaps' names, one per line. */}}
{{- define "watchcache-exporter.noiseNames" -}}
{{- range $i := until (int .Values.exporter.loadObjects) }}
- {{ printf "%s%d" $.Values.exporter.noisePrefix $i | quote }}
{{- end }}
{{- end }}

{{/* The ServiceAccount as an RBAC subject. */}}
{{- define "watchcache-exporter.subject" -}}
- kind: ServiceAccount
  name: {{ include "watchcache-exporter.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
