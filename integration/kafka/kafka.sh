#!/usr/bin/env bash
# kafka.sh - run a real Apache Kafka (KRaft) broker, or a 3-node cluster, on 127.0.0.1 for
# dedupkit's integration tests. No Docker: pom.xml pulls the jars from Maven Central and
# the brokers run as plain background JVMs.
#
# Usage: kafka.sh COMMAND
#   fetch        download the classpath once into $KAFKA_CACHE/libs (skipped when complete)
#   up           fetch if needed, start every node, wait until each broker is RUNNING
#   down         stop every node (SIGTERM, SIGKILL after 30 s); KAFKA_CLEAN=1: as clean
#   clean        down, then delete the data dir
#   status       one line per node: id, pid, ports, alive|dead
#   brokers      bootstrap list: 127.0.0.1:9092[,127.0.0.1:9093,127.0.0.1:9094]
#   proxy-routes where a fault proxy must listen and forward to: 127.0.0.1:9392=127.0.0.1:9292[,...]
#   secure-env   the SECURE (SASL_SSL) listener for clients, as shell assignments:
#                KAFKA_SECURE_BROKERS, KAFKA_TLS_CA_FILE, KAFKA_SASL_USER, KAFKA_SASL_PASSWORD
#   kill N       SIGKILL node N;   start N   restart node N and wait until it is ready
#   libs         print the classpath dir (fetch first if needed)
#   run CLASS .. run a Kafka CLI class, e.g. kafka.sh run org.apache.kafka.tools.TopicCommand
#                --bootstrap-server "$(kafka.sh brokers)" --list
# Environment (default):
#   KAFKA_NODES (1)       3 = three broker+controller nodes forming a 3-voter quorum
#   KAFKA_PORT (9092)     node i (1-based) serves clients on KAFKA_PORT+i-1 ...
#   KAFKA_CONTROLLER_PORT (KAFKA_PORT+100)  ... and its KRaft controller on this+i-1
#                         Every port, up to KAFKA_PORT+400+nodes, must lie below the kernel's
#                         ephemeral range (net.ipv4.ip_local_port_range, usually from 32768).
#                         Node i also serves a PROXIED listener on KAFKA_PORT+200+i-1 that it
#                         advertises as KAFKA_PORT+300+i-1, where nothing listens until a test
#                         starts a fault proxy there (internal/netfault): clients that
#                         bootstrap through the proxy then reach every broker through it.
#                         And a SECURE listener on KAFKA_PORT+400+i-1: SASL_SSL, with a
#                         certificate for 127.0.0.1 signed by a CA that kafka.sh makes once
#                         (openssl) in $KAFKA_DATA/tls, user dedup (PLAIN; SCRAM users can be
#                         added through the admin API). ACLs (StandardAuthorizer) bind only
#                         the SECURE listener's users other than dedup: the rest are super users.
#   KAFKA_DATA (<repo>/.kafka)  node i's config, data, logs, pid in $KAFKA_DATA/node-i
#   KAFKA_CACHE (~/.cache/dedupkit/kafka-<version>)  jar cache, outside the repo
#   KAFKA_HEAP (-Xmx512m -Xms256m) per node; KAFKA_JVM_OPTS extra JVM flags
#   KAFKA_EXTRA_PROPS     k=v pairs (space/newline separated) appended to server.properties
#                         at every start; later keys win. KAFKA_START_TIMEOUT (90) seconds.
# The shape (nodes, ports, cluster id) is saved in $KAFKA_DATA/cluster.env by the first
# `up`; other commands read it, so only `up` needs the env vars. Reshape with `clean`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/pom.xml")"
CACHE="${KAFKA_CACHE:-$HOME/.cache/dedupkit/kafka-$KAFKA_VERSION}"
LIBS="$CACHE/libs"
DATA="${KAFKA_DATA:-$ROOT/.kafka}"
[[ $DATA == /* ]] || DATA="$PWD/$DATA"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
# KRaft brokers in 3.9 log this (KafkaRaftServer) once the broker has caught up with the
# metadata log and opened its listeners; a merely open port is not enough.
READY='Kafka Server started'

log() { echo "kafka.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- jars -----------------------------------------------------------------------------
# The marker holds the pom's hash, so editing pom.xml triggers a re-fetch. Jars go to a
# temp dir first: an interrupted fetch never leaves a half classpath behind.
fetch() {
  local stamp; stamp="$(sha256sum "$HERE/pom.xml" | cut -d' ' -f1)"
  [[ -f $CACHE/.complete && "$(cat "$CACHE/.complete")" == "$stamp" ]] && return 0
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.lock"; flock 8          # parallel test runs: one download
  [[ -f $CACHE/.complete && "$(cat "$CACHE/.complete")" == "$stamp" ]] && return 0
  command -v "${MVN:-mvn}" >/dev/null || die "mvn not found; it is needed once to download Kafka"
  log "fetching Kafka $KAFKA_VERSION jars into $LIBS (one time)"
  rm -rf "$LIBS.tmp" "$CACHE/.complete"
  # Output goes to a file (Debian's mvn prints stray ANSI codes even with -q); shown on failure.
  "${MVN:-mvn}" -B -q --no-transfer-progress -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIBS.tmp" >"$CACHE/mvn.log" 2>&1 \
    || { cat "$CACHE/mvn.log" >&2; die "mvn could not fetch the Kafka jars"; }
  rm -rf "$LIBS"; mv "$LIBS.tmp" "$LIBS"
  echo "$stamp" >"$CACHE/.complete"
}

# ---- cluster layout -------------------------------------------------------------------
load_layout() {
  if [[ -f $DATA/cluster.env ]]; then
    # shellcheck disable=SC1091
    . "$DATA/cluster.env"               # NODES PORT CPORT CLUSTER_ID
  else
    NODES="${KAFKA_NODES:-1}"; PORT="${KAFKA_PORT:-9092}"
    CPORT="${KAFKA_CONTROLLER_PORT:-$((PORT + 100))}"; CLUSTER_ID=""
  fi
}
ndir()  { echo "$DATA/node-$1"; }
bport() { echo $((PORT + $1 - 1)); }
cport() { echo $((CPORT + $1 - 1)); }
pport() { echo $((PORT + 200 + $1 - 1)); }   # PROXIED listener
aport() { echo $((PORT + 300 + $1 - 1)); }   # ... advertised: the fault proxy's port
sport() { echo $((PORT + 400 + $1 - 1)); }   # SECURE listener (SASL_SSL)
node_ports() { echo "$(bport "$1") $(cport "$1") $(pport "$1") $(sport "$1")"; }   # the ports node N listens on
# The SECURE listener's PLAIN user; a test broker's, not a secret.
SASL_USER=dedup
SASL_PASSWORD=dedup-secret
# kill -0 also succeeds on a zombie; a zombie broker is dead for our purposes.
alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
# listening P: a socket listens on port P (any address), read from /proc/net/tcp{,6}. No
# connection is attempted: a connect to a local port nobody listens on can connect to
# itself when the port is in the ephemeral range, and its TIME_WAIT then keeps the
# broker from binding the port.
listening() {
  awk -v p="$(printf ':%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# started_since LOG OFFSET: the READY line appears in LOG at or after byte OFFSET (1-based).
started_since() { grep -qF "$READY" <(tail -c +"$2" "$1" 2>/dev/null); }
check_node() { { [[ $1 =~ ^[0-9]+$ ]] && ((1 <= $1 && $1 <= NODES)); } || die "no node '$1' (nodes: 1..$NODES)"; }

# Prints the pid of node N's broker if it is alive. The cmdline check guards against a
# recycled pid (and a zombie, whose cmdline is empty).
pid_of() {
  local f pid; f="$(ndir "$1")/kafka.pid"
  [[ -f $f ]] && pid="$(cat "$f")" && [[ -n $pid ]] && alive "$pid" \
    && grep -qaF "$(ndir "$1")/server.properties" "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}

write_config() {
  local n=$1 d i voters="" rf minisr
  d="$(ndir "$n")"
  for ((i = 1; i <= NODES; i++)); do voters+="${voters:+,}$i@127.0.0.1:$(cport "$i")"; done
  rf=$((NODES < 3 ? NODES : 3)); minisr=$((rf > 1 ? 2 : 1))
  cat >"$d/server.properties" <<EOF
# Written by kafka.sh at each start; edits are lost (use KAFKA_EXTRA_PROPS).
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(bport "$n"),CONTROLLER://127.0.0.1:$(cport "$n"),PROXIED://127.0.0.1:$(pport "$n"),SECURE://127.0.0.1:$(sport "$n")
advertised.listeners=PLAINTEXT://127.0.0.1:$(bport "$n"),PROXIED://127.0.0.1:$(aport "$n"),SECURE://127.0.0.1:$(sport "$n")
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT,SECURE:SASL_SSL
# SECURE: TLS with kafka.sh's certificate (ensure_tls), SASL PLAIN and SCRAM.
ssl.keystore.type=PEM
ssl.keystore.location=$DATA/tls/broker.pem
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.secure.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$SASL_PASSWORD";
listener.name.secure.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.secure.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# ACLs apply to SECURE's users other than $SASL_USER: everyone on the other listeners
# (and the nodes themselves) is ANONYMOUS, a super user, as without an authorizer.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:$SASL_USER
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$d/data
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$minisr
default.replication.factor=$rf
min.insync.replicas=$minisr
# Test-friendly: no join delay, small internal topics for a fast start, eager compaction.
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
auto.create.topics.enable=true
num.partitions=1
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
log.cleaner.backoff.ms=1000
log.cleaner.min.cleanable.ratio=0.01
num.network.threads=2
num.io.threads=4
EOF
  tr -s '[:blank:]' '\n' <<<"${KAFKA_EXTRA_PROPS:-}" | grep -v '^$' >>"$d/server.properties" || true
}

# A SIGKILLed JVM's main thread shows as a zombie before its other threads have closed
# its sockets: for about 50 ms after alive() says no, its ports still listen. A `start N`
# in that window failed with "port is taken" (make chaos, a restart applied 0.1 s after
# the kill because the plan was late), so kill and down wait for the ports.
ports_free() { local p; for p in $(node_ports "$1"); do ! listening "$p" || return 1; done; }
wait_ports_free() { local i; for ((i = 0; i < 100; i++)); do ports_free "$1" && return 0; sleep 0.1; done
  log "node $1: its ports still accept connections 10 s after its process ended"; }

# A port in the kernel's ephemeral range can be taken at any moment as the local end of
# an outgoing connection (the nodes' own connections among them), and the node then fails
# to bind it: seen once with KAFKA_PORT=39092 on three nodes ("Address already in use"
# while nothing listened). Refuse such a shape instead of failing now and then.
check_range() {
  local lo hi n p
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
  for ((n = 1; n <= NODES; n++)); do
    for p in $(node_ports "$n") "$(aport "$n")"; do
      ((p < lo || p > hi)) || die "port $p (node $n) is in the kernel's ephemeral port range $lo-$hi" \
        "(net.ipv4.ip_local_port_range), where an outgoing connection can take it before the node binds it;" \
        "choose KAFKA_PORT (and KAFKA_CONTROLLER_PORT) so that every port up to KAFKA_PORT+400+nodes is below $lo"
    done
  done
}
check_ports() {
  local p; for p in $(node_ports "$1"); do
    ! listening "$p" || die "port $p is taken by another process (not a node of $DATA); stop it or set KAFKA_PORT"; done
}

# The SECURE listener's CA and broker certificate, made once per data dir: a PEM keystore
# (PKCS#8 key, then the certificate) for the brokers, the CA's certificate for clients.
ensure_tls() {
  local t="$DATA/tls"
  [[ -f $t/broker.pem && -f $t/ca.pem ]] && return 0
  command -v openssl >/dev/null || die "openssl not found; it makes the SECURE listener's certificate (apt-get install openssl)"
  rm -rf "$t.tmp"; mkdir -p "$t.tmp"
  {
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kafka.sh test CA" \
      -keyout "$t.tmp/ca.key" -out "$t.tmp/ca.pem" \
    && openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
      -keyout "$t.tmp/broker.key" -out "$t.tmp/broker.csr" \
    && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$t.tmp/san.ext" \
    && openssl x509 -req -in "$t.tmp/broker.csr" -CA "$t.tmp/ca.pem" -CAkey "$t.tmp/ca.key" \
      -CAcreateserial -days 3650 -extfile "$t.tmp/san.ext" -out "$t.tmp/broker.crt" \
    && openssl pkcs8 -topk8 -nocrypt -in "$t.tmp/broker.key" -out "$t.tmp/broker.p8"
  } >"$t.tmp/openssl.log" 2>&1 || { cat "$t.tmp/openssl.log" >&2; die "openssl could not make the test certificates"; }
  cat "$t.tmp/broker.p8" "$t.tmp/broker.crt" >"$t.tmp/broker.pem"
  rm -rf "$t"; mv "$t.tmp" "$t"
}

secure_env() {
  local n out=""
  for ((n = 1; n <= NODES; n++)); do out+="${out:+,}127.0.0.1:$(sport "$n")"; done
  printf 'KAFKA_SECURE_BROKERS=%s\nKAFKA_TLS_CA_FILE=%s\nKAFKA_SASL_USER=%s\nKAFKA_SASL_PASSWORD=%s\n' \
    "$out" "$DATA/tls/ca.pem" "$SASL_USER" "$SASL_PASSWORD"
}

# Writes node N's config and, on first use, formats its storage (a JVM run of ~2 s).
format_node() {
  local d; d="$(ndir "$1")"
  mkdir -p "$d/data" "$d/logs"
  ensure_tls
  write_config "$1"
  [[ -f $d/data/meta.properties ]] && return 0
  "$JAVA" -cp "$LIBS/*" -Dlog4j.configuration="file:$HERE/tools-log4j.properties" \
    kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$d/server.properties" >"$d/format.log" 2>&1 \
    || { cat "$d/format.log" >&2; die "storage format failed for node $1"; }
}

# Starts node N in the background unless it already runs; does not wait.
start_node() {
  local n=$1 d pid
  d="$(ndir "$n")"
  pid="$(pid_of "$n")" && { log "node $n already running (pid $pid) on 127.0.0.1:$(bport "$n")"; return 0; }
  check_ports "$n"
  format_node "$n"
  # Readiness is judged only on log lines written after this point (the log is appended).
  echo $(($(stat -c%s "$d/logs/server.log" 2>/dev/null || echo 0) + 1)) >"$d/log.offset"
  # 8>&- 9>&-: the broker must not inherit our lock fds, or it would hold the locks forever.
  # shellcheck disable=SC2086
  nohup "$JAVA" ${KAFKA_HEAP:--Xmx512m -Xms256m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true ${KAFKA_JVM_OPTS:-} \
    -Dlog4j.configuration="file:$HERE/log4j.properties" -Dkafka.logs.dir="$d/logs" \
    -cp "$LIBS/*" kafka.Kafka "$d/server.properties" >>"$d/stdout.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$d/kafka.pid"
  log "node $n starting (pid $!) on 127.0.0.1:$(bport "$n"), controller :$(cport "$n")"
}

# Waits until node N's port accepts connections AND its log says the server started.
# grep reads the log from a file, not from a pipe: `tail | grep -q` under pipefail
# fails whenever grep stops at the match while tail still has more than a pipe
# buffer (64 KiB) to write, and a broker with a hundred partitions logs megabytes
# while it starts.
# Liveness here is `alive` on the pid start_node recorded, not pid_of: until the
# background child has opened its redirections and exec'd java, its cmdline is still
# this script's, and pid_of's cmdline check would call a starting broker dead (a CI
# run on a busy machine failed that way in 4 s).
wait_ready() {
  local n=$1 d off pid deadline=$((SECONDS + TIMEOUT))
  d="$(ndir "$n")"; off="$(cat "$d/log.offset" 2>/dev/null || echo 1)"
  pid="$(cat "$d/kafka.pid" 2>/dev/null)" || die "node $n has no pid file; was it started?"
  until listening "$(bport "$n")" && started_since "$d/logs/server.log" "$off"; do
    alive "$pid" || { [[ ! -f $d/stdout.log ]] || tail -n 20 "$d/stdout.log" >&2 || true; die "node $n exited during startup; see $d/stdout.log, $d/logs/server.log"; }
    ((SECONDS < deadline)) || die "node $n not ready after ${TIMEOUT}s; see $d/logs/server.log"
    sleep 0.5
  done
}

# ---- commands -------------------------------------------------------------------------
up() {
  check_range
  fetch
  load_layout    # again, under the lock: a concurrent `up` may have just created the cluster
  if [[ -f $DATA/cluster.env ]] && [[ ${KAFKA_NODES:-$NODES} != "$NODES" || ${KAFKA_PORT:-$PORT} != "$PORT" ]]; then
    die "$DATA holds a $NODES-node cluster on port $PORT; run 'kafka.sh clean' to change its shape"
  fi
  local n pids=() p
  if [[ ! -f $DATA/cluster.env ]]; then
    for ((n = 1; n <= NODES; n++)); do check_ports "$n"; done   # before committing to a shape
    # A cluster id is 16 random bytes in unpadded base64url (Kafka's Uuid); a leading '-'
    # would read as a CLI flag, so draw again.
    while CLUSTER_ID="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)"; [[ $CLUSTER_ID == -* ]]; do :; done
    printf 'NODES=%s\nPORT=%s\nCPORT=%s\nCLUSTER_ID=%s\n' "$NODES" "$PORT" "$CPORT" "$CLUSTER_ID" >"$DATA/cluster.env"
  fi
  # Format new nodes in parallel (saves seconds on 3 nodes); start every node before
  # waiting on any, as a broker only becomes ready once a quorum of controllers is up.
  ensure_tls     # once, before the nodes are formatted in parallel
  for ((n = 1; n <= NODES; n++)); do pid_of "$n" >/dev/null || { format_node "$n" & pids+=("$!"); }; done
  for p in "${pids[@]}"; do wait "$p" || exit 1; done
  for ((n = 1; n <= NODES; n++)); do start_node "$n"; done
  for ((n = 1; n <= NODES; n++)); do wait_ready "$n"; done
  log "ready: $(brokers)"
}

# SIGTERM every live node at once (a lone survivor of a 3-node quorum could not shut
# down cleanly), then SIGKILL whatever is left after 30 s.
down() {
  local f n pid pids=() nodes=() deadline=$((SECONDS + 30))
  for f in "$DATA"/node-*/kafka.pid; do
    [[ -f $f ]] || continue
    n="${f%/kafka.pid}"; n="${n##*/node-}"
    if pid="$(pid_of "$n")"; then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); nodes+=("$n"); fi
  done
  for pid in "${pids[@]}"; do
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
    if alive "$pid"; then log "pid $pid ignored SIGTERM; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  done
  for n in "${nodes[@]}"; do wait_ports_free "$n"; done
  rm -f "$DATA"/node-*/kafka.pid
  ((${#pids[@]} == 0)) || log "stopped ${#pids[@]} node(s)"
  if [[ ${KAFKA_CLEAN:-0} == 1 && -d $DATA ]]; then
    # Only delete what looks like our data dir, never an arbitrary KAFKA_DATA.
    [[ -f $DATA/cluster.env || -d $DATA/node-1 ]] || die "$DATA does not look like a kafka.sh data dir; not deleting"
    rm -rf "$DATA"; log "deleted $DATA"
  fi
}

kill_node() {   # returns once the process is gone and its ports are free for `start N`
  local pid i
  pid="$(pid_of "$1")" || { log "node $1 was not running"; return 0; }
  kill -KILL "$pid"; for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.1; done
  wait_ports_free "$1"
  rm -f "$(ndir "$1")/kafka.pid"; log "node $1 (pid $pid) killed"
}

status() {
  local n pid state
  for ((n = 1; n <= NODES; n++)); do
    if pid="$(pid_of "$n")"; then state=alive; else state=dead pid=-; fi
    echo "node $n pid $pid broker 127.0.0.1:$(bport "$n") controller 127.0.0.1:$(cport "$n") $state"
  done
}

brokers() {
  local n out=""
  for ((n = 1; n <= NODES; n++)); do out+="${out:+,}127.0.0.1:$(bport "$n")"; done
  echo "$out"
}

proxy_routes() {
  local n out=""
  for ((n = 1; n <= NODES; n++)); do out+="${out:+,}127.0.0.1:$(aport "$n")=127.0.0.1:$(pport "$n")"; done
  echo "$out"
}

# The data dir ignores itself, so <repo>/.kafka never shows up in git status.
lock_data() { mkdir -p "$DATA"; [[ -f $DATA/.gitignore ]] || echo '*' >"$DATA/.gitignore"; exec 9>"$DATA/.lock"; flock 9; }

load_layout
case "${1:-}" in
  fetch)   fetch ;;
  up)      lock_data; up ;;
  down)    [[ -d $DATA ]] || exit 0; lock_data; down ;;
  clean)   [[ -d $DATA ]] || exit 0; lock_data; KAFKA_CLEAN=1 down ;;
  kill)    check_node "${2:-}"; lock_data; kill_node "$2" ;;
  start)   check_node "${2:-}"; [[ -f $DATA/cluster.env ]] || die "no cluster in $DATA; run 'kafka.sh up'"
           fetch; lock_data; start_node "$2"; wait_ready "$2" ;;
  status)  status ;;
  brokers) brokers ;;
  proxy-routes) proxy_routes ;;
  secure-env) secure_env ;;
  libs)    fetch; echo "$LIBS" ;;
  run)     shift; [[ $# -gt 0 ]] || die "usage: kafka.sh run CLASS [ARGS...]"; fetch
           exec "$JAVA" -cp "$LIBS/*" -Dlog4j.configuration="file:$HERE/tools-log4j.properties" "$@" 8>&- ;;
  *)       sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
