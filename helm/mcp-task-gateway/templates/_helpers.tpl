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
{{- /* The named upstreams' static credentials: NAME/credential under it, one projected volume. */}}
{{- define "mtg.upstreams.credentialDir" -}}/etc/mcp-task-gateway-upstreams{{- end }}
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
{{- include "mtg.validateUpstreams" . }}
{{- if not (or .Values.gateway.upstream .Values.upstreams) }}
{{- fail "gateway.upstream or upstreams is required: the URL of the plain MCP server served at /mcp, e.g. --set gateway.upstream=http://my-mcp-server:8000/mcp, or named upstreams served at /mcp/NAME, e.g. --set upstreams.files.url=http://files-mcp:8000/mcp" }}
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

{{/*
Named upstreams (`upstreams`, served at /mcp/NAME). Refuses, naming the entry, every map the
gateway would refuse (and a few it would ignore), as values.schema.json does where JSON schema
can say it: the checks hold with --skip-schema-validation too.
*/}}
{{- define "mtg.validateUpstreams" -}}
{{- $ups := default dict .Values.upstreams }}
{{- if not (kindIs "map" $ups) }}
{{- fail (printf "upstreams must be a map NAME -> {url|cmd, ...}, not %s" (kindOf $ups)) }}
{{- end }}
{{- if hasKey (default dict .Values.gateway.configFile) "upstreams" }}
{{- fail "gateway.configFile.upstreams: set named upstreams in the value upstreams, which the chart renders into the config file (with their credential Secrets mounted)" }}
{{- end }}
{{- $allowed := list "url" "cmd" "env" "cwd" "pool" "toolPolicy" "promoteAfterMs" "upstreamTimeoutMs" "deferAfterMs" "deferredMaxWaitMs" "retryOnOwnerLoss" "upstreamCredential" "upstreamCredentialSecret" "authAudience" "upstreamHttp2" "upstreamHttp2MaxStreams" }}
{{- range $name := keys $ups | sortAlpha }}
{{- $u := get $ups $name }}
{{- $at := printf "upstreams.%s" $name }}
{{- if not (regexMatch "^[a-z0-9][a-z0-9-]{0,62}$" $name) }}
{{- fail (printf "%s: the name %q is not a path segment the gateway accepts (/mcp/NAME): 1-63 characters of a-z 0-9 -, starting with a letter or digit" $at $name) }}
{{- end }}
{{- if not (kindIs "map" $u) }}
{{- fail (printf "%s must be a map with url or cmd, not %s" $at (kindOf $u)) }}
{{- end }}
{{- range $k := keys $u | sortAlpha }}
{{- if not (has $k $allowed) }}
{{- fail (printf "%s.%s: unknown key; an upstream takes %s" $at $k (join ", " $allowed)) }}
{{- end }}
{{- end }}
{{- $hasUrl := not (kindIs "invalid" $u.url) }}
{{- $hasCmd := not (kindIs "invalid" $u.cmd) }}
{{- if and $hasUrl $hasCmd }}
{{- fail (printf "%s: set url or cmd, not both" $at) }}
{{- end }}
{{- if not (or $hasUrl $hasCmd) }}
{{- fail (printf "%s: needs url (an http(s) MCP server) or cmd (a stdio MCP server's command line)" $at) }}
{{- end }}
{{- if $hasUrl }}
{{- if not (and (kindIs "string" $u.url) (regexMatch "^https?://[^/\\s]+\\S*$" $u.url)) }}
{{- fail (printf "%s.url: %v is not an http(s) URL" $at $u.url) }}
{{- end }}
{{- range $k := list "env" "cwd" "pool" }}
{{- if hasKey $u $k }}
{{- fail (printf "%s.%s: only an upstream with cmd (a process the gateway starts) takes %s; this one has url" $at $k $k) }}
{{- end }}
{{- end }}
{{- else }}
{{- range $k := list "upstreamHttp2" "upstreamHttp2MaxStreams" }}
{{- if hasKey $u $k }}
{{- fail (printf "%s.%s: only an upstream with url (an HTTP MCP server) takes %s; this one has cmd" $at $k $k) }}
{{- end }}
{{- end }}
{{- if not (and (kindIs "string" $u.cmd) (regexMatch "\\S" $u.cmd)) }}
{{- fail (printf "%s.cmd: must be a non-empty command line" $at) }}
{{- end }}
{{- end }}
{{- with $u.env }}
{{- if not (kindIs "map" .) }}
{{- fail (printf "%s.env must be a map NAME: value" $at) }}
{{- end }}
{{- range $k, $v := . }}
{{- if not (kindIs "string" $v) }}
{{- fail (printf "%s.env.%s: the value must be a string (quote it)" $at $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (hasKey $u "cwd") (not (and (kindIs "string" $u.cwd) $u.cwd)) }}
{{- fail (printf "%s.cwd must be a non-empty path" $at) }}
{{- end }}
{{- if hasKey $u "pool" }}
{{- if not (and (include "mtg.isInteger" $u.pool) (ge (int64 $u.pool) 1) (le (int64 $u.pool) 64)) }}
{{- fail (printf "%s.pool: %v is not an integer from 1 to 64" $at $u.pool) }}
{{- end }}
{{- end }}
{{- if and (hasKey $u "upstreamHttp2") (not (kindIs "bool" $u.upstreamHttp2)) }}
{{- fail (printf "%s.upstreamHttp2: %v is not true or false" $at $u.upstreamHttp2) }}
{{- end }}
{{- if hasKey $u "upstreamHttp2MaxStreams" }}
{{- if not (and (include "mtg.isInteger" $u.upstreamHttp2MaxStreams) (ge (int64 $u.upstreamHttp2MaxStreams) 1) (le (int64 $u.upstreamHttp2MaxStreams) 10000)) }}
{{- fail (printf "%s.upstreamHttp2MaxStreams: %v is not an integer from 1 to 10000" $at $u.upstreamHttp2MaxStreams) }}
{{- end }}
{{- end }}
{{- range $k := list "promoteAfterMs" "upstreamTimeoutMs" "deferAfterMs" "deferredMaxWaitMs" }}
{{- if hasKey $u $k }}
{{- $v := get $u $k }}
{{- if not (and (include "mtg.isInteger" $v) (ge (int64 $v) 0)) }}
{{- fail (printf "%s.%s: %v is not a non-negative integer" $at $k $v) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $u.toolPolicy }}
{{- if not (kindIs "map" .) }}
{{- fail (printf "%s.toolPolicy must be a map toolName: required|optional|forbidden" $at) }}
{{- end }}
{{- range $tool, $policy := . }}
{{- if not (has $policy (list "required" "optional" "forbidden")) }}
{{- fail (printf "%s.toolPolicy.%s: %v is not required, optional or forbidden" $at $tool $policy) }}
{{- end }}
{{- end }}
{{- end }}
{{- if hasKey $u "retryOnOwnerLoss" }}
{{- if not (kindIs "slice" $u.retryOnOwnerLoss) }}
{{- fail (printf "%s.retryOnOwnerLoss must be a list of tool names" $at) }}
{{- end }}
{{- range $u.retryOnOwnerLoss }}
{{- if not (and (kindIs "string" .) .) }}
{{- fail (printf "%s.retryOnOwnerLoss: %v is not a tool name" $at .) }}
{{- end }}
{{- end }}
{{- end }}
{{- $mode := $u.upstreamCredential }}
{{- if and (hasKey $u "upstreamCredential") (not (has $mode (list "client" "none" "static"))) }}
{{- fail (printf "%s.upstreamCredential: %v is not client, none or static" $at $mode) }}
{{- end }}
{{- $secret := $u.upstreamCredentialSecret }}
{{- if eq (toString $mode) "static" }}
{{- if not (and (kindIs "map" $secret) $secret.name) }}
{{- fail (printf "%s.upstreamCredential static needs %s.upstreamCredentialSecret.name: a Secret holding the whole Authorization value, e.g. kubectl create secret generic %s-upstream --from-literal=authorization=\"Bearer $TOKEN\"" $at $at $name) }}
{{- end }}
{{- range $k := keys $secret | sortAlpha }}
{{- if not (has $k (list "name" "key")) }}
{{- fail (printf "%s.upstreamCredentialSecret.%s: unknown key; it takes name and key" $at $k) }}
{{- end }}
{{- end }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" (toString $secret.name)) }}
{{- fail (printf "%s.upstreamCredentialSecret.name: %v is not a Secret name" $at $secret.name) }}
{{- end }}
{{- if and (hasKey $secret "key") (not (regexMatch "^[-._a-zA-Z0-9]+$" (toString $secret.key))) }}
{{- fail (printf "%s.upstreamCredentialSecret.key: %v is not a Secret key" $at $secret.key) }}
{{- end }}
{{- else if hasKey $u "upstreamCredentialSecret" }}
{{- fail (printf "%s.upstreamCredentialSecret is only used with %s.upstreamCredential: static (the gateway would not send it): set it, or drop the Secret" $at $at) }}
{{- end }}
{{- if hasKey $u "authAudience" }}
{{- if not (and (kindIs "string" $u.authAudience) $u.authAudience) }}
{{- fail (printf "%s.authAudience must be a non-empty resource URI" $at) }}
{{- end }}
{{- if not $.Values.auth.jwt.issuer }}
{{- fail (printf "%s.authAudience set without auth.jwt.issuer: tokens are only validated with an issuer (and auth.jwt.audience)" $at) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when a value is a whole number (YAML numbers reach templates as float64). */}}
{{- define "mtg.isInteger" -}}
{{- if or (kindIs "int" .) (kindIs "int64" .) }}true
{{- else if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}true
{{- end }}
{{- end }}

{{/* The Secret key of a named upstream's static credential. */}}
{{- define "mtg.upstreams.secretKey" -}}
{{- default "authorization" .key }}
{{- end }}

{{/*
The gateway's config file (YAML): gateway.configFile, plus the named upstreams with the
gateway's kebab-case keys. Empty when there is nothing to write.
*/}}
{{- define "mtg.configFile" -}}
{{- $file := deepCopy (default dict .Values.gateway.configFile) }}
{{- if .Values.upstreams }}
{{- $out := dict }}
{{- range $name, $u := .Values.upstreams }}
{{- $e := dict }}
{{- with $u.url }}{{ $_ := set $e "url" . }}{{ end }}
{{- with $u.cmd }}{{ $_ := set $e "cmd" . }}{{ end }}
{{- if hasKey $u "env" }}{{ $_ := set $e "env" (default dict $u.env) }}{{ end }}
{{- with $u.cwd }}{{ $_ := set $e "cwd" . }}{{ end }}
{{- if hasKey $u "pool" }}{{ $_ := set $e "pool" (int64 $u.pool) }}{{ end }}
{{- if hasKey $u "toolPolicy" }}{{ $_ := set $e "tool-policy" (default dict $u.toolPolicy) }}{{ end }}
{{- if hasKey $u "promoteAfterMs" }}{{ $_ := set $e "promote-after-ms" (int64 $u.promoteAfterMs) }}{{ end }}
{{- if hasKey $u "upstreamTimeoutMs" }}{{ $_ := set $e "upstream-timeout-ms" (int64 $u.upstreamTimeoutMs) }}{{ end }}
{{- if hasKey $u "deferAfterMs" }}{{ $_ := set $e "defer-after-ms" (int64 $u.deferAfterMs) }}{{ end }}
{{- if hasKey $u "deferredMaxWaitMs" }}{{ $_ := set $e "deferred-max-wait-ms" (int64 $u.deferredMaxWaitMs) }}{{ end }}
{{- if hasKey $u "upstreamHttp2" }}{{ $_ := set $e "upstream-http2" $u.upstreamHttp2 }}{{ end }}
{{- if hasKey $u "upstreamHttp2MaxStreams" }}{{ $_ := set $e "upstream-http2-max-streams" (int64 $u.upstreamHttp2MaxStreams) }}{{ end }}
{{- if hasKey $u "retryOnOwnerLoss" }}{{ $_ := set $e "retry-on-owner-loss" (default list $u.retryOnOwnerLoss) }}{{ end }}
{{- with $u.upstreamCredential }}
{{- $_ := set $e "upstream-credential" . }}
{{- if eq . "static" }}
{{- $_ := set $e "upstream-credential-file" (printf "%s/%s/credential" (include "mtg.upstreams.credentialDir" $) $name) }}
{{- end }}
{{- end }}
{{- with $u.authAudience }}{{ $_ := set $e "auth-jwt-audience" . }}{{ end }}
{{- $_ := set $out $name $e }}
{{- end }}
{{- $_ := set $file "upstreams" $out }}
{{- end }}
{{- with .Values.webhooks.subscriptions }}
{{- $tables := list }}
{{- $secrets := list }}
{{- range $key := $.Values.webhooks.secretKeys }}
{{- $secrets = append $secrets (printf "%s/%s" (include "mtg.webhooks.secretDir" $) $key) }}
{{- end }}
{{- range $s := . }}
{{- $t := dict "url" $s.url "secret-file" $secrets }}
{{- with $s.events }}{{ $_ := set $t "events" . }}{{ end }}
{{- if hasKey $s "upstreams" }}{{ $_ := set $t "upstreams" (default list $s.upstreams) }}{{ end }}
{{- if hasKey $s "timeoutMs" }}{{ $_ := set $t "timeout-ms" (int64 $s.timeoutMs) }}{{ end }}
{{- if hasKey $s "includeResult" }}{{ $_ := set $t "include-result" $s.includeResult }}{{ end }}
{{- $tables = append $tables $t }}
{{- end }}
{{- $_ := set $file "webhooks" $tables }}
{{- end }}
{{- if $file }}
{{- toYaml $file }}
{{- end }}
{{- end }}

{{/* "true" when a named upstream sends a static credential (the projected volume is needed). */}}
{{- define "mtg.upstreams.hasStatic" -}}
{{- range $name, $u := .Values.upstreams }}
{{- if eq (toString $u.upstreamCredential) "static" }}true{{ end }}
{{- end }}
{{- end }}

{{/* Where the webhooks' signing secrets are mounted, one file per key. */}}
{{- define "mtg.webhooks.secretDir" -}}
/etc/mcp-task-gateway-webhooks
{{- end }}
