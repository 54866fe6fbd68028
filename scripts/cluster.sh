#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, in a network namespace
# of its own, with the platform deployed on it as an operator would deploy
# it (docs/kubernetes.md, "Run on Kubernetes"). Root only.
#
#   ./scripts/cluster.sh up            # build, start, deploy; prints the variables below
#   ./scripts/cluster.sh packages      # only the Debian packages up installs
#   ./scripts/cluster.sh prepare       # only what up installs and builds; starts nothing
#   eval "$(./scripts/cluster.sh env)" # the same variables, for a running cluster
#   ./scripts/cluster.sh exec CMD...   # run CMD in the cluster's network namespace
#   ./scripts/cluster.sh load          # rebuild the images from the working tree, roll the Deployments
#   ./scripts/cluster.sh down          # remove every process, mount, namespace, rule and file it made
#
# `up` prints lines a shell can eval:
#   KUBECONFIG=…          an admin kubeconfig
#   TALKIDE_NETNS=…       the network namespace everything lives in (a path)
#   TALKIDE_URL=…         the control-plane's browser API, as seen from it
#   TALKIDE_TOKEN_FILE=…  an API token of the user e2e of tenant acme
#
# What runs: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kube-proxy (iptables) and CoreDNS, built from the Go module proxy
# (scripts/kube-node.sh, cached by version); containerd and runc from Debian,
# with the CNI bridge plugin (Debian's containernetworking-plugins). Every
# address is in the namespace: a bridge carries the node's address, pods
# get addresses on the CNI's bridge, and no route or masquerade leads out,
# so nothing of the cluster is reachable from outside the machine or
# reaches out of it. The images are built from the working tree by
# scripts/images.sh and imported into containerd; the platform is deploy/
# with the overlay deploy/overlays/cluster: the control-plane (2 replicas)
# on PostgreSQL in the cluster, the model simulator (a test and demo tool,
# not a model) as the gateway's upstream, provisioning on. The tenant-env
# acme/dev is added with talkide admin env add, so the control-plane's
# reconciler makes its worker.
#
# Settings that this machine needed, each for a failure without it, are
# said where they are made (and in docs/kubernetes.md).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

dir="${TALKIDE_CLUSTER_DIR:-/var/lib/talkide-cluster}"
# The disk share below which the kubelet evicts pods (evictionHard).
evict_pct=1
netns=talkide-cluster
netns_path=/var/run/netns/$netns
node=talkide-node
bridge=tkc0
node_cidr=10.231.0.1/24
node_ip=10.231.0.1
pod_cidr=10.232.0.0/24
svc_cidr=10.233.0.0/24
api_svc_ip=10.233.0.1
dns_ip=$node_ip # CoreDNS runs beside the kubelet on the node's address

log() { echo "cluster: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, containerd, the kubelet)"

inns() { nsenter --net="$netns_path" "$@"; }

# put FILE: writes stdin to FILE unless FILE holds it already. kube-proxy
# exits when its configuration file changes, even to the same bytes, and a
# second `up` must leave running components alone.
put() {
  local tmp="$1.new"
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
  else
    mv "$tmp" "$1"
  fi
}
kctl() { inns env KUBECONFIG="$dir/admin.kubeconfig" kubectl "$@"; }

# ---------------------------------------------------------------- packages

packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v openssl >/dev/null || missing+=(openssl)
  # scripts/images.sh installs it too; here it joins the one apt-get run,
  # so that prepare leaves the host's dpkg alone once it has begun.
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v kubectl >/dev/null || die "kubectl is missing (Debian's kubernetes-client is too old; install kubectl 1.32 or newer)"
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 ||
      { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2; } ||
      die "apt-get install ${missing[*]} failed"
  fi
  # The package's own containerd service must not hold the binaries' sockets.
  systemctl disable --now containerd >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------- network

network() {
  if [ ! -e "$netns_path" ]; then
    ip netns add "$netns"
  fi
  inns ip link set lo up
  if ! inns ip link show "$bridge" >/dev/null 2>&1; then
    # The kubelet refuses a loopback node address and this kernel has no
    # dummy links: the node's address sits on a bridge of its own, with
    # the default route on it, so that components find an interface with
    # a route. No address of the host's is on it and nothing routes out.
    inns ip link add "$bridge" type bridge
    inns ip addr add "$node_cidr" dev "$bridge"
    inns ip link set "$bridge" up
    inns ip route add default dev "$bridge"
  fi
  inns sysctl -qw net.ipv4.ip_forward=1
  # Pod-to-Service traffic between pods on one bridge goes through
  # iptables only with bridge netfilter on.
  inns sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

# ---------------------------------------------------------------- certificates

# cert NAME CN [O] [SANS]: a key and a certificate signed by the cluster's CA.
cert() {
  local name=$1 cn=$2 o=${3:-} sans=${4:-} subj
  [ -s "$dir/pki/$name.crt" ] && return
  subj="/CN=$cn"
  [ -n "$o" ] && subj="/O=$o$subj"
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/pki/$name.key" 2>/dev/null
  openssl req -new -key "$dir/pki/$name.key" -subj "$subj" -out "$dir/pki/$name.csr" 2>/dev/null
  local ext="$dir/pki/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$sans" ] && echo "subjectAltName=$sans"
  } >"$ext"
  openssl x509 -req -in "$dir/pki/$name.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
    -CAcreateserial -days 3650 -extfile "$ext" -out "$dir/pki/$name.crt" 2>/dev/null
  rm -f "$dir/pki/$name.csr" "$ext"
}

kubeconfig() { # NAME USER-CERT
  put "$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: talkide
  cluster:
    server: https://$node_ip:6443
    certificate-authority: $dir/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $dir/pki/$2.crt
    client-key: $dir/pki/$2.key
contexts:
- name: talkide
  context: {cluster: talkide, user: $2}
current-context: talkide
EOF
}

pki() {
  mkdir -p "$dir/pki"
  if [ ! -s "$dir/pki/ca.crt" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$dir/pki/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$dir/pki/ca.key" -subj "/CN=talkide-cluster-ca" -days 3650 -out "$dir/pki/ca.crt" 2>/dev/null
  fi
  cert apiserver kube-apiserver "" "IP:$node_ip,IP:$api_svc_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin kubernetes-admin system:masters
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  cert proxy system:kube-proxy
  cert kubelet "system:node:$node" system:nodes "IP:$node_ip,DNS:$node"
  # kubectl logs and exec: the API server authenticates to the kubelet.
  cert apiserver-kubelet kube-apiserver-kubelet-client system:masters
  if [ ! -s "$dir/pki/sa.key" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$dir/pki/sa.key" 2>/dev/null
    openssl ec -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
  fi
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig proxy proxy
  kubeconfig kubelet kubelet
}

# ---------------------------------------------------------------- processes

# running PID: whether PID is a process that has not exited (a zombie
# whose parent does not reap it counts as exited).
running() {
  local state
  state=$(sed 's/.*) //; s/ .*//' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# start NAME CMD...: runs CMD in the namespace, in the background, logging
# to $dir/logs/NAME.log; its pid in $dir/pids/NAME.
start() {
  local name=$1; shift
  if [ -s "$dir/pids/$name" ] && kill -0 "$(cat "$dir/pids/$name")" 2>/dev/null; then
    return
  fi
  mkdir -p "$dir/logs" "$dir/pids"
  nsenter --net="$netns_path" setsid "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name"
}

# await WHAT SECONDS CMD...: retries CMD until it succeeds.
await() {
  local what=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      die "$what not ready within ${secs}s (logs in $dir/logs)"
    fi
    sleep 0.5
  done
}

control_plane() {
  local kb=$1
  mkdir -p "$dir/etcd"
  start etcd "$kb/etcd" --data-dir "$dir/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
    --quota-backend-bytes 2147483648
  await etcd 60 inns curl -sf http://127.0.0.1:2379/health
  start kube-apiserver "$kb/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$node_ip" --bind-address "$node_ip" --secure-port 6443 \
    --service-cluster-ip-range "$svc_cidr" \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" \
    --kubelet-client-certificate "$dir/pki/apiserver-kubelet.crt" --kubelet-client-key "$dir/pki/apiserver-kubelet.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
    --authorization-mode Node,RBAC --allow-privileged=false \
    --enable-admission-plugins NodeRestriction
  await kube-apiserver 120 kctl get --raw /readyz
  start kube-controller-manager "$kb/kube-controller-manager" \
    --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
    --use-service-account-credentials --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port 10257
  start kube-scheduler "$kb/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/scheduler.kubeconfig" --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 10259
}

containerd_up() {
  mkdir -p "$dir/containerd" "$dir/cni"
  put "$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  # The pod sandbox's image: deploy/pause, imported, never pulled.
  sandbox_image = "docker.io/talkide/pause:dev"
  # No CAP_SYS_RESOURCE here, even as root: a negative oom_score_adj cannot
  # be written, and every pod sandbox failed without this.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
      Root = "$dir/runc"
EOF
  put "$dir/cni/10-talkide.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "talkide",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "tkc-cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$pod_cidr"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$dir/cni-ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  start containerd containerd --config "$dir/containerd.toml"
  await containerd 60 ctr --address "$dir/containerd/containerd.sock" version
}

node_up() {
  local kb=$1
  mkdir -p "$dir/kubelet"
  # Pods resolve through CoreDNS only: no upstream, nothing outside.
  : | put "$dir/resolv.conf"
  put "$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1 (hybrid): the kubelet refuses it since 1.35
# unless told, and there is no systemd to drive cgroups.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $dir/pki/kubelet.crt
tlsPrivateKeyFile: $dir/pki/kubelet.key
clusterDomain: cluster.local
clusterDNS: [$dns_ip]
resolvConf: $dir/resolv.conf
# A test machine's disk is not the pods': no evictions for its fill, and
# the imported images (never pullable again) are never collected.
evictionHard: {memory.available: 100Mi, nodefs.available: $evict_pct%, imagefs.available: $evict_pct%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 60
serializeImagePulls: false
# A mounted Secret reaches its pods at the next pod sync (1 minute by
# default): sooner here, so that a rotation test need not wait minutes.
syncFrequency: 20s
EOF
  start kubelet "$kb/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
    --root-dir "$dir/kubelet" --node-ip "$node_ip" --hostname-override "$node"
  put "$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/proxy.kubeconfig}
mode: iptables
clusterCIDR: $pod_cidr
hostnameOverride: $node
bindAddress: $node_ip
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# Service traffic is masqueraded, so that a reply from a pod on the same
# bridge comes back through conntrack; and conntrack's sysctls are the
# host's, not this namespace's to set.
iptables: {masqueradeAll: true}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start kube-proxy "$kb/kube-proxy" --config "$dir/kube-proxy.yaml"
  put "$dir/Corefile" <<EOF
.:53 {
    bind $dns_ip
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/admin.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
  start coredns "$kb/coredns" -conf "$dir/Corefile"
  await "node $node" 180 node_ready
}

node_ready() {
  [ "$(kctl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# ---------------------------------------------------------------- images

# import_images imports the archives that scripts/images.sh listed (NAME
# ARCHIVE lines on stdin).
import_images() {
  local ref archive
  while read -r ref archive; do
    log "importing $ref"
    ctr --address "$dir/containerd/containerd.sock" -n k8s.io images import "$archive" >/dev/null ||
      die "ctr images import $archive failed"
  done
}

images() { ./scripts/images.sh "$@" | import_images; }

# ---------------------------------------------------------------- the platform

platform() {
  local bin="${TALKIDE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/talkide/images}/bin/talkide"
  mkdir -p "$dir/platform" "$dir/volumes"
  local pw key
  [ -s "$dir/platform/db-password" ] || head -c 18 /dev/urandom | base64 | tr -d '+/=' >"$dir/platform/db-password"
  [ -s "$dir/platform/simulator-key" ] || echo "sk-sim-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$dir/platform/simulator-key"
  pw=$(cat "$dir/platform/db-password")
  key=$(cat "$dir/platform/simulator-key")
  if [ ! -s "$dir/platform/controlplane-secrets.json" ]; then
    "$bin" admin keys init --data-dir "$dir/platform" >&2 || die "talkide admin keys init failed"
  fi
  # Volumes for the tenant-envs' session claims: ReadWriteMany local
  # volumes on the one node (no NFS in this kernel), made ahead of the
  # claims, as a storage class without a provisioner needs.
  local i
  for i in 1 2 3 4; do
    mkdir -p "$dir/volumes/pv$i"
    chown 65532:65532 "$dir/volumes/pv$i"
  done
  kctl apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: talkide-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
$(for i in 1 2 3 4; do cat <<PV
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: talkide-sessions-$i}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: talkide-local
  local: {path: $dir/volumes/pv$i}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$node]}
PV
done)
EOF
  kctl create namespace talkide --dry-run=client -o yaml | kctl apply -f - >/dev/null
  kctl -n talkide create secret generic talkide-controlplane-secrets \
    --from-file=controlplane-secrets.json="$dir/platform/controlplane-secrets.json" --dry-run=client -o yaml | kctl apply -f - >/dev/null
  kctl -n talkide create secret generic talkide-database \
    --from-literal=url="postgres://talkide@talkide-postgres.talkide.svc.cluster.local:5432/talkide?sslmode=disable" \
    --from-literal=password="$pw" --dry-run=client -o yaml | kctl apply -f - >/dev/null
  kctl -n talkide create secret generic talkide-anthropic --from-literal=api-key="$key" \
    --dry-run=client -o yaml | kctl apply -f - >/dev/null
  kctl apply -k "$repo/deploy/overlays/cluster" >/dev/null || die "kubectl apply -k deploy/overlays/cluster failed"
  log "waiting for PostgreSQL, the simulator and the control-plane"
  kctl -n talkide rollout status deployment/talkide-postgres --timeout=180s >&2
  kctl -n talkide rollout status deployment/talkide-simulator --timeout=180s >&2
  kctl -n talkide rollout status deployment/talkide-controlplane --timeout=300s >&2
  provision "$bin" "$pw"
}

# admin runs talkide admin against the cluster's database and secrets.
admin() {
  local bin=$1 pw=$2; shift 2
  local db_ip
  db_ip=$(kctl -n talkide get service talkide-postgres -o jsonpath='{.spec.clusterIP}')
  inns env PGPASSWORD="$pw" "$bin" admin "$@" --data-dir "$dir/platform" \
    --database "postgres://talkide@$db_ip:5432/talkide?sslmode=disable"
}

provision() {
  local bin=$1 pw=$2
  # Captured first: with pipefail, grep -q leaving early could fail the
  # listing by SIGPIPE and add the env again over its worker's address.
  local envs
  envs=$(admin "$bin" "$pw" env list) || die "talkide admin env list failed"
  if ! grep -q '^acme[[:space:]]*dev' <<<"$envs"; then
    admin "$bin" "$pw" env add --tenant acme --env dev --worker-url http://placeholder:8080 >&2
  fi
  log "waiting for the control-plane's reconciler to make acme-dev's worker"
  await "namespace acme-dev" 120 kctl get namespace acme-dev
  await "deployment acme-dev/talkide-worker" 120 kctl -n acme-dev get deployment talkide-worker
  kctl -n acme-dev rollout status deployment/talkide-worker --timeout=300s >&2
  if [ ! -s "$dir/platform/e2e-token" ]; then
    admin "$bin" "$pw" user add --user e2e --tenant acme --role member >&2 || true
    (umask 077 && admin "$bin" "$pw" api-token issue --user e2e --name cluster-e2e >"$dir/platform/e2e-token.new")
    mv "$dir/platform/e2e-token.new" "$dir/platform/e2e-token"
  fi
  # The worker's pod is Ready, yet its Service may not carry a connection
  # for a moment (kube-proxy's rules and CoreDNS's records follow its
  # endpoints; the control-plane learns the worker's address from the
  # reconciler): up means a conversation is made through the control-plane
  # and the worker (each up leaves that conversation to the e2e user). The
  # token goes to curl in a file, not in its arguments.
  local url headers token
  [ -s "$dir/platform/e2e-token" ] || die "no API token in $dir/platform/e2e-token"
  token=$(cat "$dir/platform/e2e-token")
  url=$(controlplane_url)
  headers=$dir/platform/e2e-headers
  rm -f "$headers"
  (umask 077 && printf 'Authorization: Bearer %s\nContent-Type: application/json\n' "$token" >"$headers")
  await "a conversation made through the control-plane and acme-dev's worker" 120 \
    inns curl -sf --max-time 10 -X POST -H "@$headers" -d '{"tenant":"acme","env":"dev"}' "$url/api/conversations"
}

# controlplane_url is the control-plane Service's address, reached from
# the cluster's network namespace.
controlplane_url() {
  echo "http://$(kctl -n talkide get service talkide-controlplane -o jsonpath='{.spec.clusterIP}'):7878"
}

print_env() {
  echo "KUBECONFIG=$dir/admin.kubeconfig"
  echo "TALKIDE_NETNS=$netns_path"
  echo "TALKIDE_URL=$(controlplane_url)"
  echo "TALKIDE_TOKEN_FILE=$dir/platform/e2e-token"
}

# ---------------------------------------------------------------- prepare

# prepare installs what is missing of Debian's packages, then starts the
# images (mostly Debian's mirror and dpkg, in userlands of their own) and
# builds the node's binaries while they are made: on a new machine that is
# minutes saved. It sets kb; images_made waits for the images. Both are
# cached, so up after prepare finds them made.
prepare() {
  packages
  ./scripts/images.sh >"$dir/images.list" 2>"$dir/images.log" &
  images_pid=$!
  kb=$(./scripts/kube-node.sh)
}

images_made() {
  if ! wait "$images_pid"; then
    cat "$dir/images.log" >&2
    die "scripts/images.sh failed"
  fi
  cat "$dir/images.log" >&2
}

# ---------------------------------------------------------------- down

down() {
  if [ -e "$netns_path" ] && [ -s "$dir/admin.kubeconfig" ]; then
    # Workloads first, so the kubelet stops their containers.
    timeout 60 env KUBECONFIG="$dir/admin.kubeconfig" nsenter --net="$netns_path" \
      kubectl delete namespace talkide acme-dev --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  local name pid
  for name in coredns kube-proxy kubelet kube-scheduler kube-controller-manager; do
    if [ -s "$dir/pids/$name" ]; then
      kill "$(cat "$dir/pids/$name")" 2>/dev/null || true
    fi
  done
  # Every container's processes and their shims: the shims of this
  # containerd carry its socket's directory on their command lines.
  for pid in $(pgrep -f "containerd-shim.*$dir/containerd" || true); do
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  done
  for name in containerd kube-apiserver etcd; do
    if [ -s "$dir/pids/$name" ]; then
      kill "$(cat "$dir/pids/$name")" 2>/dev/null || true
    fi
  done
  sleep 1
  local pids=()
  for name in "$dir"/pids/*; do
    [ -e "$name" ] || continue
    pids+=("$(cat "$name")")
    kill -KILL "${pids[-1]}" 2>/dev/null || true
  done
  # A process killed is gone only once it is reaped; containerd still
  # listed would keep its shims' sockets below.
  local i
  for i in $(seq 50); do
    local alive=0
    for pid in "${pids[@]}"; do
      running "$pid" && alive=1
    done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  # Whatever is still in the pods' cgroups.
  local cg
  for cg in /sys/fs/cgroup/*/kubepods; do
    [ -d "$cg" ] || continue
    find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  done
  # Mounts under the cluster's directory, deepest first.
  # None at all (a cluster that never came up) is not a failure.
  { grep " $dir" /proc/self/mountinfo || true; } | awk '{print $5}' | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  # The pods' network namespaces (the CNI's cni-*) and the cluster's own,
  # which takes its bridges and iptables rules with it.
  for name in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    ip netns delete "$name" 2>/dev/null || true
  done
  [ -e "$netns_path" ] && ip netns delete "$netns"
  # The shims' sockets: containerd 1.6 keeps them in /run/containerd/s
  # whatever its state directory. Only when no other containerd runs.
  if ! ps -eo stat=,comm= | awk '$1 !~ /^Z/ && $2 == "containerd" {found=1} END {exit !found}'; then
    rm -rf /run/containerd/s /run/containerd/runc/k8s.io
    rmdir /run/containerd/runc /run/containerd 2>/dev/null || true
  fi
  # The kubelet's cgroups, now empty.
  for cg in /sys/fs/cgroup/*/kubepods; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$dir"
  log "down"
}

# The kubelet evicts every pod once its disk has under evict_pct % free
# (evictionHard, node_up): on a nearly full disk the platform's pods start
# and are evicted at once, which reads as a rollout that times out. The
# cluster itself takes about 4 GiB (images, containerd, pods, logs); 6
# are asked for above the eviction line.
disk_room() {
  local size avail need
  read -r size avail < <(df -Pk "$dir" | awk 'NR == 2 {print $2, $4}')
  need=$((size * evict_pct / 100 + 6 * 1024 * 1024))
  [ "$avail" -ge "$need" ] ||
    die "$((avail / 1024 / 1024)) GiB free on the disk of $dir, $((need / 1024 / 1024)) needed (often a Go build cache fills it: go clean -cache)"
}

# ---------------------------------------------------------------- commands

cmd="${1:-}"
[ $# -gt 0 ] && shift
start_time=$(date +%s)
case "$cmd" in
  up)
    mkdir -p "$dir"
    disk_room
    prepare
    network
    pki
    control_plane "$kb"
    containerd_up
    images_made
    import_images <"$dir/images.list"
    node_up "$kb"
    platform
    log "up in $(( $(date +%s) - start_time ))s"
    print_env
    ;;
  packages)
    packages
    ;;
  prepare)
    mkdir -p "$dir"
    prepare
    images_made
    log "prepared in $(( $(date +%s) - start_time ))s"
    ;;
  env)
    [ -e "$netns_path" ] || die "no cluster (scripts/cluster.sh up)"
    print_env
    ;;
  exec)
    [ -e "$netns_path" ] || die "no cluster (scripts/cluster.sh up)"
    [ $# -gt 0 ] || die "usage: scripts/cluster.sh exec CMD..."
    vars=$(print_env)
    # shellcheck disable=SC2046
    exec nsenter --net="$netns_path" env $(echo "$vars" | tr '\n' ' ') "$@"
    ;;
  load)
    [ -e "$netns_path" ] || die "no cluster (scripts/cluster.sh up)"
    images talkide worker
    kctl -n talkide rollout restart deployment/talkide-controlplane deployment/talkide-simulator >&2
    kctl -n talkide rollout status deployment/talkide-controlplane --timeout=300s >&2
    for ns in $(kctl get namespaces -l app.kubernetes.io/managed-by=talkide-control-plane -o name | cut -d/ -f2); do
      kctl -n "$ns" rollout restart deployment/talkide-worker >&2
      kctl -n "$ns" rollout status deployment/talkide-worker --timeout=300s >&2
    done
    ;;
  down)
    down
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
