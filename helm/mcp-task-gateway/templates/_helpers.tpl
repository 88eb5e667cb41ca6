{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "mtg.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release + chart, unless the release name already contains the chart name. */}}
{{- define "mtg.fullname" -}}
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

{{- define "mtg.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object of the release. */}}
{{- define "mtg.commonLabels" -}}
helm.sh/chart: {{ include "mtg.chart" . }}
app.kubernetes.io/name: {{ include "mtg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mcp-task-gateway
{{- end }}

{{/* Gateway objects. The component label keeps the gateway's selector apart from the evaluation Redis. */}}
{{- define "mtg.labels" -}}
{{ include "mtg.commonLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "mtg.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mtg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "mtg.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mtg.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mtg.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Redis: which source the gateway uses. One of "" (in-memory store), "url", "cluster",
"existing", "evaluation".
*/}}
{{- define "mtg.redis.source" -}}
{{- $r := .Values.redis }}
{{- if $r.url }}url
{{- else if $r.clusterUrls }}cluster
{{- else if $r.existingSecret.name }}existing
{{- else if $r.evaluation.enabled }}evaluation
{{- end }}
{{- end }}

{{/* "true" when the gateway gets a Redis Cluster (MTG_REDIS_CLUSTER) rather than one Redis (MTG_REDIS). */}}
{{- define "mtg.redis.isCluster" -}}
{{- $source := include "mtg.redis.source" . }}
{{- if or (eq $source "cluster") (and (eq $source "existing") .Values.redis.existingSecret.cluster) }}true{{ end }}
{{- end }}

{{/* The chart's own Redis Secret (for url, cluster and evaluation). */}}
{{- define "mtg.redis.chartSecretName" -}}
{{- printf "%s-redis" (include "mtg.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The evaluation Redis' Deployment and Service name. */}}
{{- define "mtg.redis.evaluationName" -}}
{{- printf "%s-redis" (include "mtg.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name and key of the Secret the gateway reads its Redis URL(s) from. */}}
{{/* The Secret holding the requestState key(s): the user's, or this chart's. */}}
{{- define "mtg.requestState.secretName" -}}
{{- default (printf "%s-request-state" (include "mtg.fullname" .)) .Values.requestState.existingSecret.name }}
{{- end }}

{{/* The Secret key of the previous requestState key, or nothing. */}}
{{- define "mtg.requestState.previousKey" -}}
{{- if .Values.requestState.existingSecret.name -}}
{{- .Values.requestState.existingSecret.previousKey }}
{{- else if .Values.requestState.previousKey -}}
request-state-previous-key
{{- end }}
{{- end }}

{{/* The Secret holding the admin API's token: the user's, or this chart's (admin.token). */}}
{{- define "mtg.admin.secretName" -}}
{{- default (printf "%s-admin" (include "mtg.fullname" .)) .Values.admin.existingSecret }}
{{- end }}

{{- define "mtg.admin.secretKey" -}}
{{- ternary .Values.admin.existingSecretKey "token" (ne .Values.admin.existingSecret "") }}
{{- end }}

{{/* Mount points of the files the gateway reads, each a directory of its own (a mount
point cannot be made inside another read-only volume). */}}
{{- define "mtg.tls.dir" -}}/etc/mcp-task-gateway-tls{{- end }}
{{- define "mtg.upstreamCredential.dir" -}}/etc/mcp-task-gateway-upstream{{- end }}
{{- define "mtg.redis.caDir" -}}/etc/mcp-task-gateway-redis-ca{{- end }}

{{/* "true" when the gateway is given a CA for its rediss:// connection. */}}
{{- define "mtg.redis.hasCa" -}}
{{- if or .Values.redis.tls.caSecret.name .Values.redis.tls.caConfigMap.name }}true{{ end }}
{{- end }}

{{/* Scheme of the gateway's own listener: https with tls.enabled. */}}
{{- define "mtg.scheme" -}}
{{- ternary "https" "http" .Values.tls.enabled }}
{{- end }}

{{- define "mtg.redis.secretRef" -}}
{{- if eq (include "mtg.redis.source" .) "existing" -}}
name: {{ .Values.redis.existingSecret.name }}
key: {{ .Values.redis.existingSecret.key }}
{{- else if eq (include "mtg.redis.source" .) "cluster" -}}
name: {{ include "mtg.redis.chartSecretName" . }}
key: redis-cluster-urls
{{- else -}}
name: {{ include "mtg.redis.chartSecretName" . }}
key: redis-url
{{- end }}
{{- end }}

{{/* The Redis URL of the evaluation Redis. */}}
{{- define "mtg.redis.evaluationUrl" -}}
{{- $host := printf "%s.%s.svc" (include "mtg.redis.evaluationName" .) .Release.Namespace }}
{{- if .Values.redis.evaluation.password }}
{{- printf "redis://:%s@%s:6379" .Values.redis.evaluation.password $host }}
{{- else }}
{{- printf "redis://%s:6379" $host }}
{{- end }}
{{- end }}

{{/* The gateway's store namespace: redis.storeNamespace, else the release name. */}}
{{- define "mtg.storeNamespace" -}}
{{- if kindIs "invalid" .Values.redis.storeNamespace }}{{ .Release.Name }}{{ else }}{{ .Values.redis.storeNamespace }}{{ end }}
{{- end }}

{{/* Seconds: preStop sleep + drain timeout (rounded up) + margin. */}}
{{- define "mtg.terminationGracePeriodSeconds" -}}
{{- $drain := div (add (int64 .Values.gateway.drainTimeoutMs) 999) 1000 }}
{{- add $drain (int64 .Values.lifecycle.preStopSleepSeconds) (int64 .Values.terminationGracePeriodMarginSeconds) }}
{{- end }}

{{/*
Checks that values.schema.json cannot express. Included by every template that depends on
them, so `helm template`/`install` stop with a clear message.
*/}}
{{- define "mtg.validate" -}}
{{- $r := .Values.redis }}
{{- $sources := list }}
{{- if $r.url }}{{ $sources = append $sources "redis.url" }}{{ end }}
{{- if $r.clusterUrls }}{{ $sources = append $sources "redis.clusterUrls" }}{{ end }}
{{- if $r.existingSecret.name }}{{ $sources = append $sources "redis.existingSecret.name" }}{{ end }}
{{- if $r.evaluation.enabled }}{{ $sources = append $sources "redis.evaluation.enabled" }}{{ end }}
{{- if gt (len $sources) 1 }}
{{- fail (printf "set only one Redis source; found %s" (join ", " $sources)) }}
{{- end }}
{{- if and $sources (kindIs "invalid" $r.storeNamespace) (has .Release.Name (list "owned" "by-principal" "lease" "instances" "handover" "wake" "changes")) }}
{{- fail (printf "the release name %q is a word of the gateway's legacy Redis key layout and cannot be its store namespace: set redis.storeNamespace" .Release.Name) }}
{{- end }}
{{- if not .Values.gateway.upstream }}
{{- fail "gateway.upstream is required: the URL of the plain MCP server, e.g. --set gateway.upstream=http://my-mcp-server:8000/mcp" }}
{{- end }}
{{- if eq (len $sources) 0 }}
{{- if .Values.autoscaling.enabled }}
{{- fail "autoscaling.enabled requires Redis: with the in-memory store each pod only knows its own tasks. Set redis.url, redis.clusterUrls, redis.existingSecret.name or (for evaluation) redis.evaluation.enabled." }}
{{- end }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "replicaCount=%d requires Redis: with the in-memory store each pod only knows its own tasks. Set redis.url, redis.clusterUrls, redis.existingSecret.name or (for evaluation) redis.evaluation.enabled, or use replicaCount=1." (int .Values.replicaCount)) }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (kindIs "invalid" .Values.podDisruptionBudget.minAvailable) (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable) }}
{{- fail "podDisruptionBudget.enabled needs minAvailable or maxUnavailable" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.serviceMonitor.enabled requires metrics.enabled" }}
{{- end }}
{{- if and .Values.metrics.prometheusRule.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.prometheusRule.enabled requires metrics.enabled: the alerts are about the gateway's metrics" }}
{{- end }}
{{- if and .Values.metrics.grafanaDashboard.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.grafanaDashboard.enabled requires metrics.enabled: the dashboard shows the gateway's metrics" }}
{{- end }}
{{- with .Values.tls }}
{{- if and .enabled (not .secretName) }}
{{- fail "tls.enabled needs tls.secretName: a Secret with the PEM certificate chain (tls.certKey) and key (tls.keyKey), e.g. the one a cert-manager Certificate writes" }}
{{- end }}
{{- end }}
{{- with .Values.auth }}
{{- if and .jwt.issuer (not .jwt.audience) }}
{{- fail "auth.jwt.issuer needs auth.jwt.audience: the gateway's resource URI that tokens must name in aud, e.g. https://mcp.example.com/mcp" }}
{{- end }}
{{- if not .jwt.issuer }}
{{- $orphans := list }}
{{- if .jwt.audience }}{{ $orphans = append $orphans "auth.jwt.audience" }}{{ end }}
{{- if .jwt.jwksUrl }}{{ $orphans = append $orphans "auth.jwt.jwksUrl" }}{{ end }}
{{- if .jwt.algorithms }}{{ $orphans = append $orphans "auth.jwt.algorithms" }}{{ end }}
{{- if .scopes.toolsCall }}{{ $orphans = append $orphans "auth.scopes.toolsCall" }}{{ end }}
{{- if .scopes.tasks }}{{ $orphans = append $orphans "auth.scopes.tasks" }}{{ end }}
{{- if $orphans }}
{{- fail (printf "%s set without auth.jwt.issuer: tokens are only validated with an issuer (and auth.jwt.audience)" (join ", " $orphans)) }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.upstreamCredential }}
{{- if and (eq .mode "static") (not .existingSecret.name) }}
{{- fail "upstreamCredential.mode static needs upstreamCredential.existingSecret.name: a Secret holding the whole Authorization value, e.g. kubectl create secret generic mcp-upstream --from-literal=authorization=\"Bearer $TOKEN\"" }}
{{- end }}
{{- if and (ne .mode "static") .existingSecret.name }}
{{- fail (printf "upstreamCredential.existingSecret.name is only used with upstreamCredential.mode static (mode is %s, so the gateway would not send it): set mode: static, or drop the Secret" .mode) }}
{{- end }}
{{- end }}
{{- with .Values.redis.tls }}
{{- if and .caSecret.name .caConfigMap.name }}
{{- fail "set only one of redis.tls.caSecret.name and redis.tls.caConfigMap.name" }}
{{- end }}
{{- if or .caSecret.name .caConfigMap.name }}
{{- $what := ternary "redis.tls.caSecret.name" "redis.tls.caConfigMap.name" (ne .caSecret.name "") }}
{{- if eq (len $sources) 0 }}
{{- fail (printf "%s is set but no Redis is configured: the CA is only used to verify a rediss:// Redis" $what) }}
{{- end }}
{{- if $r.evaluation.enabled }}
{{- fail (printf "%s cannot be used with redis.evaluation.enabled: the evaluation Redis has no TLS" $what) }}
{{- end }}
{{- $plain := list }}
{{- if $r.url }}{{ $plain = append $plain $r.url }}{{ end }}
{{- range $r.clusterUrls }}{{ $plain = append $plain . }}{{ end }}
{{- range $plain }}
{{- if not (hasPrefix "rediss://" .) }}
{{- fail (printf "%s needs rediss:// Redis URLs (TLS): the CA verifies the Redis server's certificate, and redis.url/redis.clusterUrls have a redis:// URL" $what) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.admin }}
{{- if .enabled }}
{{- if not $.Values.metrics.enabled }}
{{- fail "admin.enabled requires metrics.enabled: the admin API is served on the metrics listener (containerPorts.metrics)" }}
{{- end }}
{{- if and .token .existingSecret }}
{{- fail "set only one of admin.token and admin.existingSecret" }}
{{- end }}
{{- if not (or .token .existingSecret) }}
{{- fail "admin.enabled needs a token: admin.existingSecret (a Secret you manage, e.g. kubectl create secret generic mtg-admin --from-literal=token=\"$(openssl rand -hex 32)\"), or admin.token for evaluation only" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
