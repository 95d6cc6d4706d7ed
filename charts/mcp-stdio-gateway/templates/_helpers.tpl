{{/* Names and labels. */}}
{{- define "mcp-stdio-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcp-stdio-gateway.fullname" -}}
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

{{- define "mcp-stdio-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcp-stdio-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-stdio-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcp-stdio-gateway.labels" -}}
helm.sh/chart: {{ include "mcp-stdio-gateway.chart" . }}
{{ include "mcp-stdio-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: mcp-gateway
{{- end }}

{{- define "mcp-stdio-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcp-stdio-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mcp-stdio-gateway.secretName" -}}
{{- default (include "mcp-stdio-gateway.fullname" .) .Values.existingSecret.name }}
{{- end }}

{{- define "mcp-stdio-gateway.image" -}}
{{- /* REPOSITORY:TAG, or REPOSITORY:TAG@DIGEST with image.digest: the runtime pulls by the digest,
the tag only tells readers what it is. */}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- with .Values.image.digest }}{{ printf "@%s" . }}{{ end }}
{{- end }}

{{/* True (non-empty) when the gateway checks bearer tokens from the Secret. */}}
{{- define "mcp-stdio-gateway.hasTokens" -}}
{{- if .Values.existingSecret.name }}
{{- if .Values.existingSecret.tokensKey }}true{{ end }}
{{- else if .Values.auth.tokens }}true{{ end }}
{{- end }}

{{/* True (non-empty) when the Secret carries operator tokens (/status and /ui). */}}
{{- define "mcp-stdio-gateway.hasOperatorTokens" -}}
{{- if .Values.existingSecret.name }}
{{- if .Values.existingSecret.operatorTokensKey }}true{{ end }}
{{- else if .Values.auth.operatorTokens }}true{{ end }}
{{- end }}

{{/* True (non-empty) when the gateway container mounts the Secret. */}}
{{- define "mcp-stdio-gateway.mountsSecret" -}}
{{- if or (include "mcp-stdio-gateway.hasTokens" .) (include "mcp-stdio-gateway.hasStateSecret" .) (include "mcp-stdio-gateway.hasOperatorTokens" .) }}true{{ end }}
{{- end }}

{{/* True (non-empty) when the Secret carries the MRTR state secret. */}}
{{- define "mcp-stdio-gateway.hasStateSecret" -}}
{{- if .Values.existingSecret.name }}
{{- if .Values.existingSecret.stateSecretKey }}true{{ end }}
{{- else }}true{{ end }}
{{- end }}

{{- define "mcp-stdio-gateway.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "mcp-stdio-gateway.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{/* True (non-empty) when clients must present certificates (probes cannot speak HTTP then). */}}
{{- define "mcp-stdio-gateway.mutualTls" -}}
{{- if and .Values.tls.enabled .Values.tls.clientCA.secretName }}true{{ end }}
{{- end }}

{{/*
True (non-empty) when pods advertise their pod IP and route to each other (scaleOut): a
Deployment reached through a Service, with the shared state secret, one worker per pod.
Not with the gateway's own TLS: pods forward to each other over plain HTTP, which a TLS port
does not speak, so that combination fails the render with the choices.
*/}}
{{- define "mcp-stdio-gateway.scaleOut" -}}
{{- if and .Values.scaleOut.enabled .Values.deployment.enabled .Values.service.enabled (ne .Values.gateway.host "127.0.0.1") }}
{{- if .Values.tls.enabled }}
{{- fail "scaleOut.enabled with tls.enabled: the pods forward legacy sessions and parked calls to each other over plain HTTP, which the gateway's TLS port does not speak. Either terminate TLS in front (an Ingress; tls.enabled=false), or set scaleOut.enabled=false (then run replicaCount=1, or only modern stateless clients: a legacy session's request reaching another pod gets 404)" }}
{{- end }}
{{- if not (include "mcp-stdio-gateway.hasStateSecret" .) }}
{{- fail "scaleOut needs the shared state secret: set existingSecret.stateSecretKey (or scaleOut.enabled=false)" }}
{{- end }}
{{- if gt (int .Values.gateway.workers) 1 }}
{{- fail "gateway.workers > 1 advertises loopback addresses: set scaleOut.enabled=false, or run more replicas with one worker each" }}
{{- end }}
{{- true }}
{{- end }}
{{- end }}

{{/* True (non-empty) when `helm test` has a pod: a Service to reach, and an HTTP(S) /readyz that
needs no client certificate. */}}
{{- define "mcp-stdio-gateway.helmTest" -}}
{{- if and .Values.tests.enabled .Values.deployment.enabled .Values.service.enabled (not (include "mcp-stdio-gateway.mutualTls" .)) }}true{{ end }}
{{- end }}

{{- define "mcp-stdio-gateway.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-stdio-gateway.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The pod's affinity: `affinity` when given, else the `spread.nodes` preset (one pod per node,
preferred or required). */}}
{{- define "mcp-stdio-gateway.affinity" -}}
{{- if .Values.affinity }}
{{- toYaml .Values.affinity }}
{{- else if .Values.spread.nodes }}
podAntiAffinity:
  {{- if eq .Values.spread.nodes "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "mcp-stdio-gateway.selectorLabels" . | nindent 10 }}
  {{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "mcp-stdio-gateway.selectorLabels" . | nindent 12 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* The pod's topology spread: `topologySpreadConstraints` when given, else the `spread.zones`
preset (even across zones, best effort or strict). */}}
{{- define "mcp-stdio-gateway.topologySpread" -}}
{{- if .Values.topologySpreadConstraints }}
{{- toYaml .Values.topologySpreadConstraints }}
{{- else if .Values.spread.zones }}
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: {{ eq .Values.spread.zones "hard" | ternary "DoNotSchedule" "ScheduleAnyway" }}
  labelSelector:
    matchLabels:
      {{- include "mcp-stdio-gateway.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{- define "mcp-stdio-gateway.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add (int .Values.preStopSleepSeconds) (int (ceil .Values.gateway.drainTimeout)) 10 }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
A probe on PATH: an HTTP GET from the kubelet, or (probes.type=exec) the container's own
Python fetching 127.0.0.1, for a gateway bound to loopback. With the ops listener on, an HTTP
GET to it: plain HTTP on its own port, whatever the main listener binds or speaks. Call with
(list . PATH SETTINGS).
*/}}
{{- define "mcp-stdio-gateway.probe" -}}
{{- $root := index . 0 }}
{{- $path := index . 1 }}
{{- $settings := index . 2 }}
{{- $tls := $root.Values.tls.enabled }}
{{- if $root.Values.opsListener.port }}
httpGet:
  path: {{ $path }}
  port: ops
{{- else if include "mcp-stdio-gateway.mutualTls" $root }}
{{- /* Mutual TLS: nothing in the pod holds a client certificate, so only the port is checked. */}}
tcpSocket:
  port: http
{{- else if eq $root.Values.probes.type "exec" }}
exec:
  command:
    - python
    - -c
    {{- if $tls }}
    - {{ printf "import ssl, urllib.request; urllib.request.urlopen('https://127.0.0.1:%d%s', timeout=%d, context=ssl._create_unverified_context())" (int $root.Values.gateway.port) $path (int $settings.timeoutSeconds) | quote }}
    {{- else }}
    - {{ printf "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%d%s', timeout=%d)" (int $root.Values.gateway.port) $path (int $settings.timeoutSeconds) | quote }}
    {{- end }}
{{- else }}
httpGet:
  path: {{ $path }}
  port: http
  {{- if $tls }}
  scheme: HTTPS
  {{- end }}
{{- end }}
{{- toYaml $settings | nindent 0 }}
{{- end }}

{{/* The gateway container; the Deployment renders it as a container or a native sidecar. */}}
{{- define "mcp-stdio-gateway.container" -}}
{{- $g := .Values.gateway -}}
name: gateway
image: {{ include "mcp-stdio-gateway.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if .Values.nativeSidecar }}
restartPolicy: Always
{{- end }}
{{- if or (and (not $g.servers) $g.command) $g.extraArgs }}
args:
  {{- range $g.extraArgs }}
  - {{ . | quote }}
  {{- end }}
  {{- if and (not $g.servers) $g.command }}
  - "--"
  {{- range $g.command }}
  - {{ . | quote }}
  {{- end }}
  {{- end }}
{{- end }}
ports:
  - name: http
    containerPort: {{ $g.port }}
    protocol: TCP
  {{- if .Values.opsListener.port }}
  - name: ops
    containerPort: {{ .Values.opsListener.port }}
    protocol: TCP
  {{- end }}
env:
  - name: MCP_GATEWAY_HOST
    value: {{ $g.host | quote }}
  - name: MCP_GATEWAY_PORT
    value: {{ $g.port | quote }}
  - name: MCP_GATEWAY_LOG_FORMAT
    value: {{ $g.logFormat | quote }}
  - name: MCP_GATEWAY_LOG_LEVEL
    value: {{ $g.logLevel | quote }}
  - name: MCP_GATEWAY_DRAIN_TIMEOUT
    value: {{ $g.drainTimeout | quote }}
  - name: MCP_GATEWAY_ISOLATION
    value: {{ $g.isolation | quote }}
  {{- if $g.servers }}
  - name: MCP_GATEWAY_CONFIG
    value: /etc/mcp-gateway/config/servers.json
  {{- end }}
  {{- with $g.pool }}
  {{- if not (kindIs "invalid" .min) }}
  - name: MCP_GATEWAY_POOL_MIN
    value: {{ .min | quote }}
  {{- end }}
  {{- if not (kindIs "invalid" .max) }}
  - name: MCP_GATEWAY_POOL_MAX
    value: {{ .max | quote }}
  {{- end }}
  {{- if not (kindIs "invalid" .maxInFlight) }}
  - name: MCP_GATEWAY_MAX_IN_FLIGHT
    value: {{ .maxInFlight | quote }}
  {{- end }}
  {{- end }}
  {{- if not (kindIs "invalid" $g.requestTimeout) }}
  - name: MCP_GATEWAY_REQUEST_TIMEOUT
    value: {{ $g.requestTimeout | quote }}
  {{- end }}
  {{- if $g.principalHeader }}
  - name: MCP_GATEWAY_PRINCIPAL_HEADER
    value: {{ $g.principalHeader | quote }}
  {{- if ne ($g.principalHeaderRequired | default "auto") "auto" }}
  - name: MCP_GATEWAY_PRINCIPAL_HEADER_REQUIRED
    value: {{ $g.principalHeaderRequired | quote }}
  {{- end }}
  {{- end }}
  {{- if $g.readyRequires }}
  - name: MCP_GATEWAY_READY_REQUIRES
    value: {{ join "," $g.readyRequires | quote }}
  {{- end }}
  {{- if $g.trustedProxies }}
  - name: MCP_GATEWAY_TRUSTED_PROXY
    value: {{ join "," $g.trustedProxies | quote }}
  {{- end }}
  {{- if $g.allowedOrigins }}
  - name: MCP_GATEWAY_ALLOWED_ORIGIN
    value: {{ join "," $g.allowedOrigins | quote }}
  {{- end }}
  {{- if $g.allowedHosts }}
  - name: MCP_GATEWAY_ALLOWED_HOST
    value: {{ join "," $g.allowedHosts | quote }}
  {{- end }}
  {{- if $g.corsOrigins }}
  - name: MCP_GATEWAY_CORS_ORIGIN
    value: {{ join "," $g.corsOrigins | quote }}
  {{- end }}
  {{- if $g.envFromHeaders }}
  {{- $pairs := list }}
  {{- range $header, $var := $g.envFromHeaders }}
  {{- $pairs = append $pairs (printf "%s=%s" $header $var) }}
  {{- end }}
  - name: MCP_GATEWAY_ENV_FROM_HEADER
    value: {{ join "," $pairs | quote }}
  {{- end }}
  {{- if not .Values.metrics.enabled }}
  - name: MCP_GATEWAY_NO_METRICS
    value: "true"
  {{- end }}
  {{- with .Values.opsListener }}
  {{- if .port }}
  - name: MCP_GATEWAY_OPS_LISTEN
    value: {{ printf (ternary "[%s]:%d" "%s:%d" (contains ":" .host)) .host (int .port) | quote }}
  {{- end }}
  {{- end }}
  {{- if include "mcp-stdio-gateway.hasTokens" . }}
  - name: MCP_GATEWAY_AUTH_TOKEN_FILE
    value: /etc/mcp-gateway/secrets/tokens
  {{- end }}
  {{- if include "mcp-stdio-gateway.hasStateSecret" . }}
  - name: MCP_GATEWAY_STATE_SECRET_FILE
    value: /etc/mcp-gateway/secrets/state-secret
  {{- end }}
  {{- if include "mcp-stdio-gateway.hasOperatorTokens" . }}
  - name: MCP_GATEWAY_OPERATOR_TOKEN_FILE
    value: /etc/mcp-gateway/secrets/operator-tokens
  {{- end }}
  {{- if $g.publicUrl }}
  - name: MCP_GATEWAY_PUBLIC_URL
    value: {{ $g.publicUrl | quote }}
  {{- end }}
  {{- if .Values.tls.enabled }}
  - name: MCP_GATEWAY_TLS_CERT_FILE
    value: /etc/mcp-gateway/tls/tls.crt
  - name: MCP_GATEWAY_TLS_KEY_FILE
    value: /etc/mcp-gateway/tls/tls.key
  {{- if include "mcp-stdio-gateway.mutualTls" . }}
  - name: MCP_GATEWAY_TLS_CLIENT_CA_FILE
    value: /etc/mcp-gateway/client-ca/ca.crt
  {{- end }}
  {{- end }}
  {{- with .Values.oauth }}
  {{- if .issuer }}
  - name: MCP_GATEWAY_OAUTH_ISSUER
    value: {{ .issuer | quote }}
  {{- if .jwksUrl }}
  - name: MCP_GATEWAY_OAUTH_JWKS_URL
    value: {{ .jwksUrl | quote }}
  {{- end }}
  {{- if .audience }}
  - name: MCP_GATEWAY_OAUTH_AUDIENCE
    value: {{ .audience | quote }}
  {{- end }}
  {{- if .scopes }}
  - name: MCP_GATEWAY_OAUTH_SCOPE
    value: {{ join "," .scopes | quote }}
  {{- end }}
  - name: MCP_GATEWAY_OAUTH_PRINCIPAL_CLAIM
    value: {{ .principalClaim | quote }}
  {{- end }}
  {{- end }}
  {{- if gt (int $g.workers) 1 }}
  - name: MCP_GATEWAY_WORKERS
    value: {{ $g.workers | quote }}
  {{- end }}
  {{- if include "mcp-stdio-gateway.scaleOut" . }}
  # Any replica, any request: the other pods reach this one at its pod IP.
  - name: POD_IP
    valueFrom:
      fieldRef:
        fieldPath: status.podIP
  - name: MCP_GATEWAY_ADVERTISE_URL
    value: {{ printf (ternary "http://[$(POD_IP)]:%d" "http://$(POD_IP):%d" .Values.scaleOut.ipv6) (int $g.port) | quote }}
  {{- end }}
  {{- with $g.env }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $g.envFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
startupProbe:
  {{- include "mcp-stdio-gateway.probe" (list . "/readyz" .Values.probes.startup) | trim | nindent 2 }}
livenessProbe:
  {{- include "mcp-stdio-gateway.probe" (list . "/healthz" .Values.probes.liveness) | trim | nindent 2 }}
readinessProbe:
  {{- include "mcp-stdio-gateway.probe" (list . "/readyz" .Values.probes.readiness) | trim | nindent 2 }}
{{- if .Values.preStopSleepSeconds }}
lifecycle:
  preStop:
    exec:
      command: ["sleep", {{ .Values.preStopSleepSeconds | quote }}]
{{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: home
    mountPath: /home/gateway
  - name: tmp
    mountPath: /tmp
  {{- if $g.servers }}
  - name: config
    mountPath: /etc/mcp-gateway/config
    readOnly: true
  {{- end }}
  {{- if include "mcp-stdio-gateway.mountsSecret" . }}
  - name: secrets
    mountPath: /etc/mcp-gateway/secrets
    readOnly: true
  {{- end }}
  {{- /* Whole directories, never subPath: a subPath mount would not see the Secret's updates. */}}
  {{- if .Values.tls.enabled }}
  - name: tls
    mountPath: /etc/mcp-gateway/tls
    readOnly: true
  {{- end }}
  {{- if include "mcp-stdio-gateway.mutualTls" . }}
  - name: client-ca
    mountPath: /etc/mcp-gateway/client-ca
    readOnly: true
  {{- end }}
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The pod's volumes for the gateway container. */}}
{{- define "mcp-stdio-gateway.volumes" -}}
- name: home
  emptyDir:
    sizeLimit: {{ .Values.cache.sizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmp.sizeLimit }}
{{- if .Values.gateway.servers }}
- name: config
  configMap:
    name: {{ include "mcp-stdio-gateway.fullname" . }}
{{- end }}
{{- if include "mcp-stdio-gateway.mountsSecret" . }}
- name: secrets
  secret:
    secretName: {{ include "mcp-stdio-gateway.secretName" . }}
    defaultMode: 0440
    items:
      {{- $external := .Values.existingSecret }}
      {{- if include "mcp-stdio-gateway.hasTokens" . }}
      - key: {{ $external.name | empty | ternary "tokens" $external.tokensKey }}
        path: tokens
      {{- end }}
      {{- if include "mcp-stdio-gateway.hasStateSecret" . }}
      - key: {{ $external.name | empty | ternary "state-secret" $external.stateSecretKey }}
        path: state-secret
      {{- end }}
      {{- if include "mcp-stdio-gateway.hasOperatorTokens" . }}
      - key: {{ $external.name | empty | ternary "operator-tokens" $external.operatorTokensKey }}
        path: operator-tokens
      {{- end }}
{{- end }}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "mcp-stdio-gateway.tlsSecretName" . }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- if include "mcp-stdio-gateway.mutualTls" . }}
- name: client-ca
  secret:
    secretName: {{ .Values.tls.clientCA.secretName }}
    defaultMode: 0440
    items:
      - key: {{ .Values.tls.clientCA.key }}
        path: ca.crt
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
