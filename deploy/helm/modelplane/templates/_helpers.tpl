{{/* The chart's name. */}}
{{- define "modelplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The base name of every object. */}}
{{- define "modelplane.fullname" -}}
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

{{/* Labels on every object. */}}
{{- define "modelplane.labels" -}}
app.kubernetes.io/name: {{ include "modelplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "modelplane.releaseLabels" . }}
{{- end }}

{{/* The labels that may change from one release to the next (never in a selector). */}}
{{- define "modelplane.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: modelplane
{{- end }}

{{/* The selector of one role's pods ("api" or "worker"): never changes for a release. */}}
{{- define "modelplane.selector" -}}
app.kubernetes.io/name: {{ include "modelplane.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{- define "modelplane.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Secret holding DATABASE_URL. */}}
{{- define "modelplane.databaseSecret" -}}
{{- if .Values.database.url }}
{{- printf "%s-database" (include "modelplane.fullname" .) }}
{{- else }}
{{- required "database.existingSecret or database.url is required" .Values.database.existingSecret }}
{{- end }}
{{- end }}

{{/* The Secret holding the bootstrap token, if any. */}}
{{- define "modelplane.bootstrapSecret" -}}
{{- if .Values.bootstrapToken.value }}
{{- printf "%s-bootstrap-token" (include "modelplane.fullname" .) }}
{{- else }}
{{- .Values.bootstrapToken.existingSecret }}
{{- end }}
{{- end }}

{{/*
One role's pod template: `root` is the chart context, `role` "api" or "worker", `values`
that role's values. The role is set by MODELPLANE_ROLE; everything else is shared.
*/}}
{{- define "modelplane.podTemplate" -}}
{{- $root := .root }}
{{- $v := .values }}
metadata:
  labels:
    {{- include "modelplane.selector" . | nindent 4 }}
    {{- include "modelplane.releaseLabels" $root | nindent 4 }}
  annotations:
    # Rolls the pods when the shared configuration changes.
    checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    {{- with $v.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "modelplane.fullname" $root }}-{{ .role }}
  # Only the worker talks to the Kubernetes API.
  automountServiceAccountToken: {{ eq .role "worker" }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    fsGroup: 10001
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: modelplane
      image: {{ include "modelplane.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      args: ["serve"]
      envFrom:
        - configMapRef:
            name: {{ include "modelplane.fullname" $root }}
      env:
        - name: MODELPLANE_ROLE
          value: {{ .role }}
        - name: DATABASE_URL
          valueFrom:
            secretKeyRef:
              name: {{ include "modelplane.databaseSecret" $root }}
              key: {{ $root.Values.database.secretKey }}
        {{- if include "modelplane.bootstrapSecret" $root }}
        - name: MODELPLANE_BOOTSTRAP_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ include "modelplane.bootstrapSecret" $root }}
              key: {{ $root.Values.bootstrapToken.secretKey }}
        {{- end }}
        {{- if eq .role "worker" }}
        # Leases name the pod that holds them.
        - name: MODELPLANE_WORKER_ID
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        {{- end }}
        {{- with $v.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: http
          containerPort: 8080
          protocol: TCP
        {{- if and (eq .role "api") $root.Values.activator.enabled }}
        - name: activator
          containerPort: {{ $root.Values.activator.port }}
          protocol: TCP
        {{- if $root.Values.keys.enabled }}
        - name: authz
          containerPort: {{ $root.Values.keys.port }}
          protocol: TCP
        {{- end }}
        {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: {{ $root.Values.startupProbe.periodSeconds }}
        failureThreshold: {{ $root.Values.startupProbe.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
        periodSeconds: 10
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
        periodSeconds: 5
        failureThreshold: 3
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        runAsNonRoot: true
        capabilities:
          drop: ["ALL"]
        seccompProfile:
          type: RuntimeDefault
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if and $root.Values.oidc.enabled $root.Values.oidc.jwksConfigMap.name }}
        - name: oidc-jwks
          mountPath: /etc/modelplane/oidc
          readOnly: true
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: 64Mi
    {{- if and $root.Values.oidc.enabled $root.Values.oidc.jwksConfigMap.name }}
    - name: oidc-jwks
      configMap:
        name: {{ $root.Values.oidc.jwksConfigMap.name }}
        items:
          - key: {{ $root.Values.oidc.jwksConfigMap.key }}
            path: jwks.json
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
