{{/*
The base name of the objects: "<release>-agent" (carve-agent for the release
"carve", the names configs/deploy uses), or fullnameOverride.
*/}}
{{- define "carve.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-agent" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The fullname with a suffix, within the 63 characters of a DNS label. */}}
{{- define "carve.suffixed" -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "carve.fullname" (index . 0) | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix -}}
{{- end -}}

{{/* The agent's version: the image tag, else the chart's appVersion. */}}
{{- define "carve.version" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/*
The labels of the DaemonSet's selector; immutable once installed. The name
is fixed: tools, docs and tests select the agent pods by it.
*/}}
{{- define "carve.selectorLabels" -}}
app.kubernetes.io/name: carve-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "carve.labels" -}}
{{ include "carve.selectorLabels" . }}
app.kubernetes.io/version: {{ include "carve.version" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: carve
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/*
The labels of every object merged with extra ones (a list: the root context
and a map); the chart's own win.
*/}}
{{- define "carve.labelsWith" -}}
{{- $root := index . 0 -}}
{{- toYaml (merge (fromYaml (include "carve.labels" $root)) (index . 1)) -}}
{{- end -}}

{{/* The ServiceAccount the agent runs as. */}}
{{- define "carve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "carve.fullname" .) -}}
{{- else -}}
{{- required "serviceAccount.name: name the existing ServiceAccount (serviceAccount.create is false)" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The profile ConfigMap's name. */}}
{{- define "carve.profilesName" -}}
{{- if .Values.profiles.name -}}
{{- .Values.profiles.name -}}
{{- else if .Values.profiles.create -}}
{{- printf "%s-profiles" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- fail "profiles.name: name the existing ConfigMap (profiles.create is false)" -}}
{{- end -}}
{{- end -}}

{{/* The profile ConfigMap's namespace, which the agent's Role and rollout Leases share. */}}
{{- define "carve.profilesNamespace" -}}
{{- .Values.profiles.namespace | default .Release.Namespace -}}
{{- end -}}

{{/*
"true" when the agent advertises through DRA (advertise: dra), else "". It
checks the values that go only with other modes or only with dra.
*/}}
{{- define "carve.dra" -}}
{{- if eq .Values.advertise "dra" -}}
{{- if .Values.cdi -}}
{{- fail "cdi: not with advertise: dra; the DRA driver always answers with CDI devices (a spec per claim in dra.cdiDir), --cdi is for the device plugin's Allocate answers" -}}
{{- end -}}
true
{{- else if or .Values.dra.extendedResources.gpu .Values.dra.extendedResources.migProfiles -}}
{{- fail "dra.extendedResources: only with advertise: dra (the device plugin advertises extended resources itself)" -}}
{{- end -}}
{{- end -}}
