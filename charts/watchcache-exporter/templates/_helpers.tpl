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
in default): the full name, with the namespace after it unless the namespace
is the full name (deploy/'s names), so that releases of one name in two
namespaces do not take each other's. */}}
{{- define "watchcache-exporter.clusterName" -}}
{{- $full := include "watchcache-exporter.fullname" . }}
{{- if eq $full .Release.Namespace }}
{{- $full }}
{{- else }}
{{- printf "%s-%s" $full .Release.Namespace | trunc 63 | trimSuffix "-" }}
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
