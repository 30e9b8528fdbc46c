#!/usr/bin/env bash
# Repins the local control plane to another Kubernetes release: rewrites go.mod with one
# `replace` line per staging module of that release (k8s.io/kubernetes requires them at
# v0.0.0, and Go ignores a dependency's own replace lines), then tidies go.sum.
# Usage: cluster/bump-kubernetes.sh v1.35.4
set -euo pipefail
version=${1:?usage: bump-kubernetes.sh vMAJOR.MINOR.PATCH}
[[ $version =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "not a Kubernetes release tag: $version" >&2; exit 2; }
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOWORK=off
staging=v0.${version#v1.}
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -n "$gomod" ] || { echo "could not download k8s.io/kubernetes@$version from the Go module proxy" >&2; exit 1; }
godirective=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
{
  printf 'module kfn.invalid/cluster\n\ngo %s\n\n' "$godirective"
  # Kubernetes' own godebug line is ignored when it is a dependency; carry it over.
  grep '^godebug ' "$gomod" || true
} > go.mod
for m in $(sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod"); do
  go mod edit "-replace=$m=$m@$staging"
done
go mod edit "-require=k8s.io/kubernetes@$version"
for t in k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
         k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3; do
  go mod edit "-tool=$t"
done
go mod tidy
echo "cluster/go.mod now pins k8s.io/kubernetes $version; commit go.mod and go.sum."
