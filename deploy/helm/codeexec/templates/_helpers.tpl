{{/* Names: <release> (or <release>-codeexec) for the service, <that>-runner for the runners.
45 characters at most, so that the runners' StatefulSet name stays within the 52 its pods'
controller-revision-hash label allows (63, less a dash and a 10-character hash). */}}
{{- define "codeexec.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "codeexec.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "codeexec.runnerName" -}}
{{- printf "%s-runner" (include "codeexec.fullname" .) }}
{{- end }}

{{- define "codeexec.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "codeexec.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* What selects each workload's pods (the policies use them too). */}}
{{- define "codeexec.serviceSelector" -}}
app.kubernetes.io/name: {{ include "codeexec.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: service
{{- end }}

{{- define "codeexec.runnerSelector" -}}
app.kubernetes.io/name: {{ include "codeexec.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: runner
{{- end }}

{{- define "codeexec.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "codeexec.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "codeexec.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the three keys: the user's, or the one this chart makes. */}}
{{- define "codeexec.secretName" -}}
{{- default (include "codeexec.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* The keys a container gets from that Secret: (list . (list "SETTING" "keyName") ...).
With secrets.asFiles, files named after the settings in a volume the settings read
(SECRETS_DIR); else an environment variable each. */}}
{{- define "codeexec.keyEnv" -}}
{{- $root := first . -}}
{{- if $root.Values.secrets.asFiles }}
- name: SECRETS_DIR
  value: /run/secrets/codeexec
{{- else }}
{{- range rest . }}
- name: {{ index . 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ include "codeexec.secretName" $root }}
      key: {{ index $root.Values.secrets.keys (index . 1) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "codeexec.keyMount" -}}
{{- if .Values.secrets.asFiles }}
- name: keys
  mountPath: /run/secrets/codeexec
  readOnly: true
{{- end }}
{{- end }}

{{/* The volume of those files: only the keys this container is given. Readable by any uid
of the container (the service runs as 65534): each container runs one program. */}}
{{- define "codeexec.keyVolume" -}}
{{- $root := first . -}}
{{- if $root.Values.secrets.asFiles }}
- name: keys
  secret:
    secretName: {{ include "codeexec.secretName" $root }}
    defaultMode: 0444
    items:
      {{- range rest . }}
      - key: {{ index $root.Values.secrets.keys (index . 1) }}
        path: {{ index . 0 }}
      {{- end }}
{{- end }}
{{- end }}

{{/* Each runner's address, {i} its ordinal: the headless Service's DNS name for the pod. */}}
{{- define "codeexec.runnerUrlTemplate" -}}
{{- $runner := include "codeexec.runnerName" . }}
{{- printf "http://%s-{i}.%s.%s.svc.%s:%d" $runner $runner .Release.Namespace .Values.clusterDomain (int .Values.runner.port) }}
{{- end }}

{{- define "codeexec.jwtOn" -}}
{{- if has "jwt" (regexSplit "\\s*,\\s*" (trim .Values.auth.modes) -1) }}true{{ end }}
{{- end }}
