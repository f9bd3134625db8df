{{/* Object names: FULLNAME (the release name, or RELEASE-CHART when the release name lacks the chart's). */}}
{{- define "flotilla.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "flotilla.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "flotilla.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "flotilla.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Labels of every object. The chart adds no Helm bookkeeping labels, so deploy/*.yaml is its rendering. */}}
{{- define "flotilla.labels" -}}
app.kubernetes.io/part-of: flotilla
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels of one role's pods; call with (dict "root" $ "role" "api"). */}}
{{- define "flotilla.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flotilla.fullname" .root }}-{{ .role }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "flotilla.roleLabels" -}}
{{ include "flotilla.selectorLabels" . }}
app.kubernetes.io/part-of: flotilla
{{- end -}}

{{/* The args and env every role's container shares; call with (dict "root" $ "role" "api").
The standalone role (`serve --role all`) keeps its SQLite store on the claim mounted at /var/lib/flotilla; the
others read the store URL from store.secret, or from the bundled PostgreSQL's Secret (postgresql.enabled). */}}
{{- define "flotilla.container" -}}
image: {{ include "flotilla.image" .root }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
{{- if eq .role "all" }}
args: [serve, --role, all, --config, /etc/flotilla/config/config.yaml, --store, "sqlite:////var/lib/flotilla/flotilla.db"]
env:
{{- else }}
args: [serve, --role, {{ .role }}, --config, /etc/flotilla/config/config.yaml, --store, $(FLOTILLA_STORE_URL)]
env:
  - name: FLOTILLA_STORE_URL
    valueFrom:
      {{- if .root.Values.postgresql.enabled }}
      secretKeyRef: {name: {{ include "flotilla.fullname" .root }}-postgresql, key: url}
      {{- else }}
      secretKeyRef: {name: {{ .root.Values.store.secret.name }}, key: {{ .root.Values.store.secret.key }}}
      {{- end }}
{{- end }}
  - name: POD_NAME
    valueFrom:
      fieldRef: {fieldPath: metadata.name}
ports:
  - {name: http, containerPort: {{ .root.Values.port }}}
livenessProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 10
  failureThreshold: 3
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
{{- end -}}

{{- define "flotilla.podAnnotations" -}}
{{- $annotations := dict -}}
{{- if .root.Values.prometheusAnnotations -}}
{{- $_ := set $annotations "prometheus.io/scrape" "true" -}}
{{- $_ := set $annotations "prometheus.io/port" (toString .root.Values.port) -}}
{{- $_ := set $annotations "prometheus.io/path" "/metrics" -}}
{{- end -}}
{{- $annotations = merge $annotations .values.podAnnotations -}}
{{- if $annotations }}
annotations:
  {{- toYaml $annotations | nindent 2 }}
{{- end -}}
{{- end -}}

{{- define "flotilla.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The config as the ConfigMap holds it: with releaseNamespace, the release's namespace added to every queue's
namespaces and given to in-cluster clusters that name no namespace. */}}
{{- define "flotilla.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.releaseNamespace -}}
{{- $queues := list -}}
{{- range $config.queues -}}
{{- $namespaces := default list .namespaces -}}
{{- if not (has $.Release.Namespace $namespaces) -}}
{{- $namespaces = append $namespaces $.Release.Namespace -}}
{{- end -}}
{{- $queues = append $queues (set (deepCopy .) "namespaces" $namespaces) -}}
{{- end -}}
{{- if $config.queues -}}
{{- $_ := set $config "queues" $queues -}}
{{- end -}}
{{- $clusters := list -}}
{{- range $config.clusters -}}
{{- if and .inCluster (not .namespace) -}}
{{- $clusters = append $clusters (set (deepCopy .) "namespace" $.Release.Namespace) -}}
{{- else -}}
{{- $clusters = append $clusters . -}}
{{- end -}}
{{- end -}}
{{- if $config.clusters -}}
{{- $_ := set $config "clusters" $clusters -}}
{{- end -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The pod-level fields every Flotilla pod shares: service account, pull secrets, security context. */}}
{{- define "flotilla.podCommon" -}}
serviceAccountName: {{ include "flotilla.serviceAccountName" . }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
