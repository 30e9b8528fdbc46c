{{/* Labels of every object: the kustomize base's app label, and Helm's. */}}
{{- define "kfn.labels" -}}
app.kubernetes.io/name: kfn-bridge
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kfn.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "kfn.check" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection) -}}
{{- fail "replicas > 1 needs leaderElection: true (without it, every replica would deliver every object)" -}}
{{- end -}}
{{- if and (gt (int .Values.shards) 1) (not .Values.leaderElection) -}}
{{- fail "shards > 1 needs leaderElection: true (each shard is a Lease that one replica holds)" -}}
{{- end -}}
{{- if and .Values.warmStandby (or (not .Values.leaderElection) (gt (int .Values.shards) 1)) -}}
{{- fail "warmStandby needs leaderElection: true and shards: 1 (sharded replicas watch from their start already)" -}}
{{- end -}}
{{- if lt (int .Values.shards) 1 -}}
{{- fail "shards must be 1 or more" -}}
{{- end -}}
{{- if and .Values.journal.enabled .Values.journal.persistence.enabled (gt (int .Values.replicas) 1) -}}
{{- fail "journal.persistence needs replicas: 1 (each replica writes a journal of its own, and one claim cannot hold two); with more replicas, keep the journal on its emptyDir" -}}
{{- end -}}
{{- end -}}
