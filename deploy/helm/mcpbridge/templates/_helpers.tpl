{{/*
Names and labels, as `helm create` makes them, so that the chart reads like every other.
*/}}
{{- define "mcpbridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcpbridge.fullname" -}}
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

{{- define "mcpbridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcpbridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpbridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcpbridge.labels" -}}
helm.sh/chart: {{ include "mcpbridge.chart" . }}
{{ include "mcpbridge.selectorLabels" . }}
{{- /* A label value: no "+" (semver build metadata), at most 63 characters. */}}
app.kubernetes.io/version: {{ include "mcpbridge.imageTag" . | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: config-source
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "mcpbridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcpbridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mcpbridge.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "mcpbridge.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "mcpbridge.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
Where the pod's volumes are mounted. The bridge's config names these paths.
*/}}
{{- define "mcpbridge.configDir" -}}/etc/mcpbridge/config{{- end }}
{{- define "mcpbridge.tlsDir" -}}/etc/mcpbridge/tls{{- end }}
{{- define "mcpbridge.clientCADir" -}}/etc/mcpbridge/client-ca{{- end }}

{{/* The Secret of the bridge's certificate: tls.secretName, else the Certificate's. */}}
{{- define "mcpbridge.tlsSecretName" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "mcpbridge.fullname" .)) }}
{{- end }}

{{/* The ConfigMap of Istio YAML in files mode: an existing one, or the release's. */}}
{{- define "mcpbridge.filesConfigMapName" -}}
{{- .Values.files.existingConfigMap | default (printf "%s-files" (include "mcpbridge.fullname" .)) }}
{{- end }}

{{/*
Whether each listener serves TLS: from the chart's Secret (tls.enabled and the listener's
enabled), or from files the user mounted and named in config. "true" or "".
*/}}
{{- define "mcpbridge.grpcTLS" -}}
{{- if or (and .Values.tls.enabled .Values.tls.grpc.enabled) (dig "grpc" "tls" "cert_file" "" .Values.config) }}true{{ end }}
{{- end }}
{{- define "mcpbridge.httpTLS" -}}
{{- if or (and .Values.tls.enabled .Values.tls.http.enabled) (dig "http" "tls" "cert_file" "" .Values.config) }}true{{ end }}
{{- end }}

{{/* Whether the chart mounts a client CA from a ConfigMap of its own choosing. */}}
{{- define "mcpbridge.clientCAFromConfigMap" -}}
{{- if and .Values.tls.enabled .Values.tls.clientCA.enabled .Values.tls.clientCA.configMap.name }}true{{ end }}
{{- end }}

{{/*
The TLS keys the chart sets for one listener (grpc or http) from the mounted Secret.
Called with (dict "root" $ "listener" "grpc" "defaultAuth" "require").
*/}}
{{- define "mcpbridge.listenerTLS" -}}
{{- $root := .root }}
{{- $l := index $root.Values.tls .listener }}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" (include "mcpbridge.tlsDir" $root)) "key_file" (printf "%s/tls.key" (include "mcpbridge.tlsDir" $root)) }}
{{- if $root.Values.tls.clientCA.enabled }}
{{- if include "mcpbridge.clientCAFromConfigMap" $root }}
{{- $_ := set $tls "client_ca_file" (printf "%s/%s" (include "mcpbridge.clientCADir" $root) $root.Values.tls.clientCA.configMap.key) }}
{{- else }}
{{- $_ := set $tls "client_ca_file" (printf "%s/ca.crt" (include "mcpbridge.tlsDir" $root)) }}
{{- end }}
{{- $_ := set $tls "client_auth" ($l.clientAuth | default .defaultAuth) }}
{{- else }}
{{- $_ := set $tls "client_ca_file" "" }}
{{- $_ := set $tls "client_auth" ($l.clientAuth | default "none") }}
{{- end }}
{{- toYaml $tls }}
{{- end }}

{{/*
The bridge's config.yaml: .Values.config as it is, with the keys that follow from the pod's
wiring set over it. A key the chart owns and the user set too is an error rather than a
setting silently ignored.
*/}}
{{- define "mcpbridge.config" -}}
{{- $c := deepCopy .Values.config }}
{{- range $listener := list "grpc" "http" }}
{{- $l := get $c $listener | default dict }}
{{- range $key := list "address" "insecure" }}
{{- if hasKey $l $key }}
{{- fail (printf "config.%s.%s is set by the chart (from ports.%s and tls.*); remove it from your values" $listener $key $listener) }}
{{- end }}
{{- end }}
{{- $_ := set $c $listener $l }}
{{- end }}
{{- $_ := set $c.grpc "address" (printf "0.0.0.0:%d" (int .Values.ports.grpc)) }}
{{- $_ := set $c.http "address" (printf "0.0.0.0:%d" (int .Values.ports.http)) }}
{{- /* Beyond loopback the bridge refuses plaintext unless told: the pod must be reachable. */}}
{{- $_ := set $c.grpc "insecure" (not (include "mcpbridge.grpcTLS" .)) }}
{{- $_ := set $c.http "insecure" (not (include "mcpbridge.httpTLS" .)) }}
{{- if .Values.tls.enabled }}
{{- if .Values.tls.grpc.enabled }}
{{- $_ := set $c.grpc "tls" (include "mcpbridge.listenerTLS" (dict "root" . "listener" "grpc" "defaultAuth" "require") | fromYaml) }}
{{- end }}
{{- if .Values.tls.http.enabled }}
{{- $_ := set $c.http "tls" (include "mcpbridge.listenerTLS" (dict "root" . "listener" "http" "defaultAuth" "request") | fromYaml) }}
{{- end }}
{{- end }}
{{- if .Values.files.enabled }}
{{- $sources := get $c "sources" | default dict }}
{{- $_ := set $sources "files" (append (get $sources "files" | default list) (printf "%s/" (trimSuffix "/" .Values.files.mountPath))) }}
{{- $_ := set $c "sources" $sources }}
{{- end }}
{{- if .Values.meshConfig }}
{{- $xds := get $c "xds" | default dict }}
{{- $_ := set $xds "mesh_config_file" (printf "%s/meshconfig.yaml" (include "mcpbridge.configDir" .)) }}
{{- $_ := set $c "xds" $xds }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/*
Checks of values that would otherwise deploy a pod that cannot work, each failing with what
to change. The bridge checks its own config at start; these are the chart's wiring.
*/}}
{{- define "mcpbridge.validate" -}}
{{- if .Values.tls.enabled }}
{{- range $listener := list "grpc" "http" }}
{{- if (index $.Values.tls $listener).enabled }}
{{- range $key, $v := dig $listener "tls" dict $.Values.config }}
{{- if $v }}
{{- fail (printf "config.%s.tls.%s is set by the chart from tls.* when tls.enabled and tls.%s.enabled; remove it, or turn tls.%s.enabled off to use files you mount yourself" $listener $key $listener $listener) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (not .Values.tls.secretName) (not .Values.tls.certManager.enabled) }}
{{- fail "tls.enabled needs a certificate: set tls.secretName (a kubernetes.io/tls Secret) or tls.certManager.enabled" }}
{{- end }}
{{- if and .Values.tls.http.enabled (eq (.Values.tls.http.clientAuth | toString) "require") }}
{{- fail "tls.http.clientAuth: require refuses kubelet's HTTPS probes, which present no client certificate: use request (docs/security.md, TLS)" }}
{{- end }}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name: the cert-manager Issuer or ClusterIssuer that signs the bridge's certificate" }}
{{- end }}
{{- else if .Values.tls.certManager.enabled }}
{{- fail "tls.certManager.enabled without tls.enabled: the certificate would be issued and never used; set tls.enabled: true" }}
{{- end }}
{{- if eq (dig "http" "tls" "client_auth" "" .Values.config | toString) "require" }}
{{- fail "config.http.tls.client_auth: require refuses kubelet's HTTPS probes, which present no client certificate: use request (docs/security.md, TLS)" }}
{{- end }}
{{- if .Values.files.enabled }}
{{- if and .Values.files.existingConfigMap .Values.files.data }}
{{- fail "files: set files.data or files.existingConfigMap, not both" }}
{{- end }}
{{- if and (not .Values.files.existingConfigMap) (not .Values.files.data) }}
{{- fail "files.enabled needs Istio YAML: files.data (file name to content) or files.existingConfigMap" }}
{{- end }}
{{- range $name, $content := .Values.files.data }}
{{- if not (or (hasSuffix ".yaml" $name) (hasSuffix ".yml" $name)) }}
{{- fail (printf "files.data.%s: the bridge reads only *.yaml and *.yml files of a directory; rename it" $name) }}
{{- end }}
{{- if not (kindIs "string" $content) }}
{{- fail (printf "files.data.%s: a file's content is a string of Istio YAML (use a block scalar, %s: |)" $name $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both (set the other to null)" }}
{{- end }}
{{- end }}

{{/*
readsKubernetes is "true" when the bridge reads config from the Kubernetes API server
(config.sources.kubernetes set, even to {}), else "false".
*/}}
{{- define "mcpbridge.readsKubernetes" -}}
{{- if and .Values.config.sources (hasKey .Values.config.sources "kubernetes") (ne (toString .Values.config.sources.kubernetes) "<nil>") -}}
true
{{- else -}}
false
{{- end -}}
{{- end }}
