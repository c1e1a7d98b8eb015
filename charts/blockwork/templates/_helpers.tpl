{{/* Names */}}
{{- define "blockwork.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "blockwork.fullname" -}}
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

{{- define "blockwork.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "blockwork.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "blockwork.selectorLabels" -}}
app.kubernetes.io/name: {{ include "blockwork.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "blockwork.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "blockwork.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "blockwork.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* A Cache image: `registry/repository:tag@digest`, from (dict "registry" R "image" I). */}}
{{- define "blockwork.cacheImage" -}}
{{- $image := .image.repository }}
{{- with .registry }}{{ $image = printf "%s/%s" (trimSuffix "/" .) $image }}{{ end }}
{{- with .image.tag }}{{ $image = printf "%s:%s" $image . }}{{ end }}
{{- with .image.digest }}{{ $image = printf "%s@%s" $image . }}{{ end }}
{{- $image }}
{{- end }}

{{/* A label map as `key=value,...`, keys sorted: a `--cache-*-pod-labels` flag's value. */}}
{{- define "blockwork.labelList" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}{{ $pairs = append $pairs (printf "%s=%s" $key $value) }}{{ end }}
{{- join "," $pairs }}
{{- end }}

{{- define "blockwork.webhookServiceName" -}}
{{- printf "%s-webhook" (include "blockwork.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "blockwork.webhookSecretName" -}}
{{- printf "%s-webhook-tls" (include "blockwork.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The generated declarations of every controller (files/controllers.yaml, `make chart`). */}}
{{- define "blockwork.declarations" -}}
{{- .Files.Get "files/controllers.yaml" }}
{{- end }}

{{/* The enabled controllers, in the registry's order, as a comma-separated list. */}}
{{- define "blockwork.enabledControllers" -}}
{{- $declared := (include "blockwork.declarations" . | fromYaml).controllers }}
{{- $enabled := list }}
{{- $aws := or $.Values.controllers.cert.enabled $.Values.controllers.tenant.enabled }}
{{- range $name, $_ := $declared }}
{{- /* aws_identity keeps the AwsIdentity mappings' status and serves their webhook: with the controllers that act in AWS. */}}
{{- if or (get $.Values.controllers $name | default dict).enabled (and (eq $name "aws_identity") $aws) }}
{{- $enabled = append $enabled $name }}
{{- end }}
{{- end }}
{{- join "," $enabled }}
{{- end }}

{{/* Whether an enabled controller has webhooks: "true" or "". */}}
{{- define "blockwork.hasWebhooks" -}}
{{- $declared := (include "blockwork.declarations" . | fromYaml).controllers }}
{{- range $name := splitList "," (include "blockwork.enabledControllers" .) }}
{{- if $name }}
{{- $c := get $declared $name }}
{{- if or $c.conversionCrds $c.validatingWebhooks }}true{{ end }}
{{- end }}
{{- end }}
{{- end }}

{{/* cert-manager's CA injection annotation, in cert-manager mode. */}}
{{- define "blockwork.injectCa" -}}
{{- if eq .Values.webhook.certificates.mode "cert-manager" }}
cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "blockwork.webhookSecretName" .) }}
{{- end }}
{{- end }}
