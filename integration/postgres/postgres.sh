#!/usr/bin/env bash
# postgres.sh - run a PostgreSQL server on 127.0.0.1 for dedupkit's tests (the inbox
# package's processed_messages table). No Docker: Debian's postgresql package, a cluster of
# its own per checkout, the stock settings (fsync and synchronous_commit on: durable).
#
# Usage: postgres.sh COMMAND
#   up      initdb a cluster if the data dir has none, start postgres, wait until it
#           accepts connections (reuses the cluster, and a server already running)
#   down    stop the server (pg_ctl stop -m fast: sessions end, a clean shutdown)
#   clean   down, then delete the data dir (and the cluster, wherever it lives)
#   status  one line: pid, address, cluster dir, alive|starting|dead
#   dsn     the connection string: postgres://postgres@127.0.0.1:15432/postgres?sslmode=disable
# Environment (default):
#   POSTGRES_PORT (15432)  TCP port on 127.0.0.1, below the kernel's ephemeral range
#                          (net.ipv4.ip_local_port_range, usually from 32768)
#   POSTGRES_DATA (<repo>/.postgres)  the cluster in $POSTGRES_DATA/cluster, the server's
#                          log in $POSTGRES_DATA/postgres.log
#   POSTGRES_START_TIMEOUT (60) seconds
# The programs: the newest /usr/lib/postgresql/<version>/bin (the cluster's own version once
# there is one), else initdb, pg_ctl and postgres on PATH; as root, apt-get installs Debian's
# postgresql package when there are none. Superuser `postgres`, trust authentication:
# anyone on this machine can connect as superuser, a test server only.
# PostgreSQL refuses to run as root: as root, initdb, pg_ctl and postgres run as the
# `postgres` user the package creates, which owns the cluster. When that user cannot reach
# the data dir (a checkout under /root, mode 0700), the cluster and its log live in a
# directory of their own, /var/tmp/dedupkit-postgres.XXXXXX, that `clean` deletes.
# The port and the cluster's place are saved in $POSTGRES_DATA/cluster.env by the first
# `up`; other commands read it, so only `up` needs the env vars. Change them with `clean`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DATA="${POSTGRES_DATA:-$ROOT/.postgres}"
[[ $DATA == /* ]] || DATA="$PWD/$DATA"
TIMEOUT="${POSTGRES_START_TIMEOUT:-60}"

log() { echo "postgres.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- layout ---------------------------------------------------------------------------
load_layout() {
  if [[ -f $DATA/cluster.env ]]; then
    # shellcheck disable=SC1091
    . "$DATA/cluster.env"               # PORT SUPERUSER BASE
  else
    PORT="${POSTGRES_PORT:-15432}"; SUPERUSER=postgres; BASE="$DATA"
  fi
  CLUSTER="$BASE/cluster"; LOGFILE="$BASE/postgres.log"
}

# ---- running as the postgres user -----------------------------------------------------
# as_pg CMD...: CMD as the user that owns the cluster, from / (a cwd that user cannot
# reach makes initdb and pg_ctl complain).
if ((EUID == 0)); then
  RUNAS=postgres
  as_pg() { (cd / && exec runuser -u postgres -- "$@"); }
  need_pg_user() {
    id -u postgres >/dev/null 2>&1 \
      || die "running as root, and there is no postgres user to run PostgreSQL as (Debian's postgresql package creates it)"
  }
else
  RUNAS="$(id -un 2>/dev/null || echo "$EUID")"
  as_pg() { (cd / && exec "$@"); }
  need_pg_user() { :; }
fi
# own PATH: PATH belongs to the user the server runs as (as root, chown it to postgres).
own() { ((EUID != 0)) || chown postgres: "$1"; }

# ---- programs -------------------------------------------------------------------------
# Sets BIN to a directory with initdb, pg_ctl and postgres: the cluster's own version if it
# has one and it is installed, else the newest of /usr/lib/postgresql/*/bin, else PATH's.
find_bin() {
  local want="" d v best="" bestv=0
  [[ -f $CLUSTER/PG_VERSION ]] && want="$(cat "$CLUSTER/PG_VERSION")"
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]] || continue
    v="${d%/bin}"; v="${v##*/}"
    if [[ $v == "$want" ]]; then BIN="$d"; return 0; fi
    if ((${v%%.*} > bestv)); then bestv="${v%%.*}"; best="$d"; fi
  done
  if [[ -n $best ]]; then BIN="$best"
  elif command -v initdb >/dev/null && command -v pg_ctl >/dev/null && command -v postgres >/dev/null; then
    BIN="$(dirname "$(command -v pg_ctl)")"
  elif ((EUID == 0)) && command -v apt-get >/dev/null && [[ ${1:-} != installed ]]; then
    log "PostgreSQL not found; installing Debian's postgresql package with apt-get"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; } >&2 \
      || die "apt-get could not install postgresql"
    find_bin installed; return 0
  else
    die "PostgreSQL not found (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH); apt-get install postgresql"
  fi
  if [[ -n $want ]]; then
    v="$(pg_version)"; v="${v%%.*}"
    [[ $v == "$want" ]] || die "the cluster in $CLUSTER is PostgreSQL $want, and only PostgreSQL $v is installed" \
      "($BIN); run 'postgres.sh clean' to start over with a new cluster"
  fi
}

pg_version() { "$BIN/postgres" --version | awk '{ print $3 }'; }   # e.g. 15.14

# ---- the server -----------------------------------------------------------------------
# kill -0 also succeeds on a zombie; a zombie server is dead for our purposes.
alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
# Prints the postmaster's pid if it is alive. postmaster.pid holds the pid (line 1) and,
# from PostgreSQL 10 on, the state (line 8: starting, ready, stopping); the cmdline check
# guards against a recycled pid.
pid_of() {
  local pid
  pid="$(sed -n 1p "$CLUSTER/postmaster.pid" 2>/dev/null)" && [[ -n $pid ]] && alive "$pid" \
    && grep -qaF "$CLUSTER" "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}
pm_state() { sed -n '8{s/[[:space:]]*$//;p}' "$CLUSTER/postmaster.pid" 2>/dev/null; }
# listening P: a socket listens on port P (any address), read from /proc/net/tcp{,6}
# without connecting (as kafka.sh).
listening() {
  awk -v p="$(printf ':%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# A port in the kernel's ephemeral range can be taken at any moment as the local end of
# an outgoing connection, and the server then fails to bind it (kafka.sh refuses them too).
check_range() {
  local lo hi
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
  ((PORT < lo || PORT > hi)) || die "port $PORT is in the kernel's ephemeral port range $lo-$hi" \
    "(net.ipv4.ip_local_port_range), where an outgoing connection can take it before the server binds it;" \
    "choose a POSTGRES_PORT below $lo"
}

# A new cluster: in $DATA if the user that runs the server can reach it, else (as root)
# in a directory of its own under /var/tmp. cluster.env is written once initdb succeeded.
init_cluster() {
  need_pg_user
  if [[ ! -f $DATA/cluster.env ]]; then
    BASE="$DATA"
    if ((EUID == 0)) && ! runuser -u postgres -- test -x "$DATA" 2>/dev/null; then
      BASE="$(mktemp -d /var/tmp/dedupkit-postgres.XXXXXX)"; chmod 755 "$BASE"
      log "the postgres user cannot reach $DATA; the cluster goes to $BASE"
    fi
    CLUSTER="$BASE/cluster"; LOGFILE="$BASE/postgres.log"
  fi
  # shellcheck disable=SC2174 # the mode is for $BASE itself, not for its parents
  mkdir -p -m 755 "$BASE"
  rm -rf "$CLUSTER"                     # what an interrupted initdb left behind
  mkdir -m 700 "$CLUSTER"; own "$CLUSTER"
  log "initdb: a new PostgreSQL $(pg_version) cluster in $CLUSTER"
  # --no-sync: initdb's files are not flushed to disk (a crash right after it would need a
  # clean); the server itself runs with fsync on.
  as_pg "$BIN/initdb" -D "$CLUSTER" -U "$SUPERUSER" --auth=trust -E UTF8 --locale=C --no-sync \
    >"$BASE/initdb.log" 2>&1 9>&- || { tail -n 20 "$BASE/initdb.log" >&2; die "initdb failed; see $BASE/initdb.log"; }
  printf 'PORT=%s\nSUPERUSER=%s\nBASE=%q\n' "$PORT" "$SUPERUSER" "$BASE" >"$DATA/cluster.env"
}

up() {
  load_layout    # again, under the lock: a concurrent `up` may have just made the cluster
  if [[ -f $DATA/cluster.env && ${POSTGRES_PORT:-$PORT} != "$PORT" ]]; then
    die "$DATA holds a cluster on port $PORT; run 'postgres.sh clean' to change its port"
  fi
  local pid deadline=$((SECONDS + TIMEOUT)) sock out
  # A server already running (of an earlier `up`) is waited for, not started again.
  while pid="$(pid_of)"; do
    [[ $(pm_state) == ready ]] && { log "already running (pid $pid) on 127.0.0.1:$PORT"; return 0; }
    ((SECONDS < deadline)) || die "the server (pid $pid) is still $(pm_state) after ${TIMEOUT}s; see $LOGFILE"
    sleep 0.5
  done
  find_bin       # as root, installs PostgreSQL (and so its user) when missing
  check_range
  ! listening "$PORT" || die "port $PORT is taken by another process (not the server of $DATA);" \
    "stop it, or run 'postgres.sh clean' and set POSTGRES_PORT"
  if [[ -f $CLUSTER/PG_VERSION ]]; then
    need_pg_user
    [[ $(stat -c %u "$CLUSTER") == "$(id -u "$RUNAS")" ]] || die "the cluster in $CLUSTER belongs to" \
      "$(stat -c %U "$CLUSTER"), and the server would run as $RUNAS; run postgres.sh as that user, or clean"
  else
    init_cluster
  fi
  find_bin       # again: the cluster's own version
  [[ $CLUSTER != *"'"* ]] || die "the cluster's path $CLUSTER contains a single quote; set POSTGRES_DATA"
  # A Unix socket's path has at most 107 bytes; beyond that the server gets no socket
  # (the tests connect over TCP).
  sock="$CLUSTER"
  if ((${#CLUSTER} + ${#PORT} + 10 > 107)); then
    log "$CLUSTER is too long a path for a Unix socket; TCP only"; sock=""
  fi
  touch "$LOGFILE"; own "$LOGFILE"
  # pg_ctl -w returns once postmaster.pid says "ready": the server accepts connections.
  # It starts postgres in a session of its own; 9>&-: the server must not inherit our lock.
  if ! out="$(as_pg "$BIN/pg_ctl" start -D "$CLUSTER" -l "$LOGFILE" -w -t "$TIMEOUT" \
      -o "-p $PORT -k '$sock' -c listen_addresses=127.0.0.1 -c max_connections=100" 2>&1 9>&-)"; then
    echo "$out" >&2; tail -n 20 "$LOGFILE" >&2 || true
    die "the server did not start (pg_ctl start -w, at most ${TIMEOUT}s); see $LOGFILE"
  fi
  pid="$(pid_of)" || { tail -n 20 "$LOGFILE" >&2 || true; die "the server exited during startup; see $LOGFILE"; }
  listening "$PORT" || die "the server (pid $pid) is ready but nothing listens on port $PORT; see $LOGFILE"
  log "ready (pid $pid): $(dsn)"
}

down() {
  local pid
  if pid="$(pid_of)"; then
    find_bin
    # Fast: the sessions are ended, the server writes a checkpoint and exits.
    if ! as_pg "$BIN/pg_ctl" stop -D "$CLUSTER" -m fast -w -t 60 >/dev/null 2>&1 9>&-; then
      log "fast shutdown did not finish within 60 s; immediate shutdown"
      as_pg "$BIN/pg_ctl" stop -D "$CLUSTER" -m immediate -w -t 30 >/dev/null 2>&1 9>&- || true
    fi
    ! alive "$pid" || die "the server (pid $pid) is still running; see $LOGFILE"
    log "stopped (pid $pid)"
  fi
  if [[ ${POSTGRES_CLEAN:-0} == 1 ]]; then
    # Only delete what looks like our data dir, never an arbitrary POSTGRES_DATA.
    ours || die "$DATA does not look like a postgres.sh data dir; not deleting"
    if [[ $BASE != "$DATA" ]]; then
      [[ $BASE == /var/tmp/dedupkit-postgres.* ]] || die "cluster.env names $BASE, not a postgres.sh directory; not deleting"
      rm -rf "$BASE"; log "deleted $BASE"
    fi
    rm -rf "$DATA"; log "deleted $DATA"
  fi
}

# ours: $DATA is a postgres.sh data dir: it has a cluster, or only what an `up` that
# failed before initdb left behind.
ours() {
  local f
  [[ -f $DATA/cluster.env || -d $DATA/cluster ]] && return 0
  for f in "$DATA"/* "$DATA"/.[!.]*; do
    [[ -e $f ]] || continue
    case "${f##*/}" in .gitignore | .lock | postgres.log | initdb.log) ;; *) return 1 ;; esac
  done
}

status() {
  local pid state
  if pid="$(pid_of)"; then
    state="$(pm_state)"; [[ $state == ready || -z $state ]] && state=alive
  else
    state=dead pid=-
  fi
  echo "postgres pid $pid server 127.0.0.1:$PORT cluster $CLUSTER $state"
}

dsn() { echo "postgres://$SUPERUSER@127.0.0.1:$PORT/postgres?sslmode=disable"; }

# The data dir ignores itself, so <repo>/.postgres never shows up in git status. 0755: as
# root, the postgres user must reach the cluster in it.
lock_data() {
  # shellcheck disable=SC2174 # the mode is for $DATA itself, not for its parents
  mkdir -p -m 755 "$DATA"; [[ -f $DATA/.gitignore ]] || echo '*' >"$DATA/.gitignore"
  exec 9>"$DATA/.lock"; flock 9
}

load_layout
case "${1:-}" in
  up)     lock_data; up ;;
  down)   [[ -d $DATA ]] || exit 0; lock_data; down ;;
  clean)  [[ -d $DATA ]] || exit 0; lock_data; POSTGRES_CLEAN=1 down ;;
  status) status ;;
  dsn)    dsn ;;
  *)      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
