#!/usr/bin/env bash
# A real Apache Kafka broker (KRaft) for development and tests, without Docker.
#
# The broker's jars come from Maven Central (docker/broker/pom.xml); everything the
# brokers write lives under .kafka/ at the project root (override: KAFKA_STATE_DIR).
#
#   kafka.sh up              one combined broker+controller on 127.0.0.1:19092
#   kafka.sh down            stop it
#   kafka.sh cluster-up      three combined nodes on 127.0.0.1:29092,29094,29096
#   kafka.sh cluster-down    stop them
#   kafka.sh kill-node N     SIGKILL cluster node N (1-3), for fault tests
#   kafka.sh start-node N    start cluster node N again, keeping its data
#   kafka.sh status          what is running; exit 0 if any broker of ours runs, else 3
#   kafka.sh classpath       only assemble the broker classpath (download the jars)
#
# `up` and `cluster-up` print the bootstrap address on stdout (all else goes to stderr)
# and write it to .kafka/env (STREAMWATCH_BOOTSTRAP=...) and .kafka/cluster.env
# (STREAMWATCH_CLUSTER_BOOTSTRAP=...). Each `up` starts from empty data directories.
# Logs: .kafka/single/server.log, .kafka/cluster/nodeN/server.log (stdout.log beside them).
# Only processes recorded in this script's pid files are ever signalled.
#
# Environment (defaults in brackets):
#   KAFKA_PORT [19092]  KAFKA_CONTROLLER_PORT [19093]  KAFKA_HEAP [512m]
#   KAFKA_CLUSTER_PORT_BASE [29092]: node N listens on BASE+2(N-1), its controller on +1
#   KAFKA_CLUSTER_HEAP [384m]  KAFKA_START_TIMEOUT [90] s  KAFKA_STOP_TIMEOUT [30] s
#   KAFKA_JVM_OPTS: extra JVM flags  KAFKA_CDS [1]: 0 turns the class archive off
#   KAFKA_STATE_DIR [<project>/.kafka]
#   JAVA_HOME or java on PATH (17+); MVN [mvn]; MAVEN_REPO_LOCAL [Maven's, ~/.m2/repository]
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd -P)
POM="$SCRIPT_DIR/broker/pom.xml"
STATE=$(realpath -m -- "${KAFKA_STATE_DIR:-$ROOT/.kafka}")

HOST=127.0.0.1
PORT=${KAFKA_PORT:-19092}
CPORT=${KAFKA_CONTROLLER_PORT:-19093}
HEAP=${KAFKA_HEAP:-512m}
CLUSTER_BASE=${KAFKA_CLUSTER_PORT_BASE:-29092}
CLUSTER_HEAP=${KAFKA_CLUSTER_HEAP:-384m}
NODES=3
START_TIMEOUT=${KAFKA_START_TIMEOUT:-90}
STOP_TIMEOUT=${KAFKA_STOP_TIMEOUT:-30}
MVN=${MVN:-mvn}
if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then JAVA="$JAVA_HOME/bin/java"; else JAVA=java; fi

SINGLE_DIR="$STATE/single"
CLUSTER_DIR="$STATE/cluster"
LIB_DIR="$STATE/lib"
READY_LINE='Kafka Server started'

say() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

usage() {
  sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
}

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

# ---------------------------------------------------------------- processes

# pid_of FILE: the pid recorded in FILE, or nothing.
pid_of() {
  local f=$1 pid
  [[ -f "$f" ]] || return 0
  pid=$(head -n 1 "$f" 2>/dev/null || true)
  if is_uint "$pid"; then printf '%s' "$pid"; fi
}

# owned PID CONFIG: PID is a live (not zombie) broker started with CONFIG.
owned() {
  local pid=$1 cfg=$2 cmd state
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null || true)
  [[ -n "$state" && "$state" != Z && "$state" != X ]] || return 1
  cmd=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  grep -qxF 'kafka.Kafka' <<<"$cmd" && grep -qxF "$cfg" <<<"$cmd"
}

# running DIR: prints the pid of the broker whose files are in DIR, if it runs.
running() {
  local dir=$1 pid
  pid=$(pid_of "$dir/broker.pid")
  if [[ -n "$pid" ]] && owned "$pid" "$dir/server.properties"; then printf '%s' "$pid"; fi
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# port_free PORT: nothing listens on PORT (checked by connecting).
port_free() { ! port_open "$1"; }

rss_mb() {
  local kb
  kb=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null || true)
  if [[ -n "$kb" ]]; then printf '%s MB' "$((kb / 1024))"; else printf '?'; fi
}

tail_logs() {
  local dir=$1 f errors
  f="$dir/server.log"
  if [[ -s "$f" ]]; then
    errors=$(grep -E '^\[[^]]*\] (ERROR|FATAL) ' "$f" | tail -n 10 || true)
    if [[ -n "$errors" ]]; then printf -- '--- errors in %s ---\n%s\n' "$f" "$errors" >&2; fi
    printf -- '--- last lines of %s ---\n' "$f" >&2
    tail -n 25 "$f" >&2
  fi
  f="$dir/stdout.log"
  if [[ -s "$f" ]]; then
    printf -- '--- last lines of %s ---\n' "$f" >&2
    tail -n 15 "$f" >&2
  fi
}

# Whether stop_dirs keeps a class archive written at exit (not after a failed start).
KEEP_ARCHIVES=1

# stop_dirs SIGNAL DIR...: signal every running broker among DIRs, wait for all to exit,
# SIGKILL whatever is left after STOP_TIMEOUT seconds.
stop_dirs() {
  local sig=$1 dir pid deadline left killed=0 i
  shift
  local -a dirs=() pids=()
  for dir in "$@"; do
    pid=$(running "$dir")
    if [[ -n "$pid" ]]; then
      dirs+=("$dir")
      pids+=("$pid")
      kill "-$sig" "$pid" 2>/dev/null || true
    else
      rm -f "$dir/broker.pid"
    fi
  done
  ((${#pids[@]})) || return 0
  deadline=$((SECONDS + STOP_TIMEOUT))
  while :; do
    left=0
    for i in "${!pids[@]}"; do
      if owned "${pids[$i]}" "${dirs[$i]}/server.properties"; then left=1; fi
    done
    ((left)) || break
    if ((SECONDS >= deadline)); then
      ((killed == 0)) || die "pid(s) ${pids[*]} survived SIGKILL"
      for i in "${!pids[@]}"; do
        if owned "${pids[$i]}" "${dirs[$i]}/server.properties"; then
          say "pid ${pids[$i]} still running after ${STOP_TIMEOUT}s: sending SIGKILL"
          kill -KILL "${pids[$i]}" 2>/dev/null || true
        fi
      done
      killed=1
      deadline=$((SECONDS + 10))
    fi
    sleep 0.2
  done
  for dir in "${dirs[@]}"; do
    rm -f "$dir/broker.pid"
    # A JVM that had to be killed may have left half an archive.
    if [[ "$sig" == TERM && $killed == 0 && $KEEP_ARCHIVES == 1 ]]; then
      adopt_archive "$dir"
    else
      rm -f "$dir/kafka.jsa"
    fi
  done
}

# ---------------------------------------------------------------- prerequisites

JAVA_ID=""

check_java() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found (install Java 17+ or set JAVA_HOME)"
  local v
  JAVA_ID=$("$JAVA" -version 2>&1) || die "$JAVA -version failed: $JAVA_ID"
  v=$(sed -n 's/.*version "\([0-9]*\).*/\1/p' <<<"$JAVA_ID" | head -n 1)
  if [[ -n "$v" ]] && ((v < 17)); then die "Kafka 4 needs Java 17 or newer; $JAVA is Java $v"; fi
  JAVA_ID="$(command -v "$JAVA")"$'\n'"$JAVA_ID"
}

# Class-data sharing. The first broker that stops cleanly leaves an archive of the classes
# it loaded (-XX:ArchiveClassesAtExit); later JVMs map it instead of parsing the jars, which
# roughly halves the CPU a start-up needs. The archive belongs to one JVM build and this
# classpath (the JVM ignores one that does not match), and Java 17 can crash on a damaged
# one, so an archive is kept only after a test load, with its size and the JVM that made it
# recorded beside it. KAFKA_CDS=0 turns this off.
CDS_ARCHIVE="$LIB_DIR/kafka.jsa"

cds_stamp() { printf '%s\n%s\n' "$(stat -c %s "$1" 2>/dev/null)" "$JAVA_ID"; }

# cds_opts [DIR]: flags that use the archive, or (with DIR) create one in DIR at exit.
cds_opts() {
  local dir=${1:-}
  [[ "${KAFKA_CDS:-1}" != 0 && -n "$JAVA_ID" ]] || return 0
  if [[ -f "$CDS_ARCHIVE" ]]; then
    if [[ "$(cat "$CDS_ARCHIVE.jvm" 2>/dev/null)" == "$(cds_stamp "$CDS_ARCHIVE")" ]]; then
      printf '%s\n' "-XX:SharedArchiveFile=$CDS_ARCHIVE"
      return 0
    fi
    rm -f "$CDS_ARCHIVE" "$CDS_ARCHIVE.jvm"
  fi
  # Dumping needs the JDK's base archive; without it the JVM would refuse to start.
  if [[ -n "$dir" ]] && "$JAVA" -Xshare:on -version >/dev/null 2>&1; then
    printf '%s\n' "-XX:ArchiveClassesAtExit=$dir/kafka.jsa"
  fi
}

# adopt_archive DIR: keeps the archive a broker in DIR wrote at exit, if none is kept yet.
adopt_archive() {
  local f="$1/kafka.jsa"
  [[ -s "$f" ]] || return 0
  if [[ ! -f "$CDS_ARCHIVE" && -d "$LIB_DIR" ]]; then
    [[ -n "$JAVA_ID" ]] || check_java
    if ("$JAVA" -Xshare:on "-XX:SharedArchiveFile=$f" "-XX:ErrorFile=$1/hs_err_%p.log" \
      -cp "$LIB_DIR/*" -version) >/dev/null 2>&1; then
      cds_stamp "$f" >"$CDS_ARCHIVE.jvm"
      mv -f "$f" "$CDS_ARCHIVE"
    fi
  fi
  rm -f "$f"
}

# Assembles the broker classpath in $LIB_DIR once per version of the POM.
ensure_classpath() {
  local sum stamp tmp log
  sum=$(sha256sum "$POM" | cut -d' ' -f1)
  stamp="$LIB_DIR/.pom.sha256"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$sum" ]]; then return 0; fi
  command -v "$MVN" >/dev/null 2>&1 || die "Maven ($MVN) not found: it downloads the broker's jars"
  say "downloading the Kafka broker's jars with Maven (once)..."
  tmp="$STATE/lib.tmp.$$"
  log="$STATE/maven.log"
  rm -rf "$tmp"
  local -a args=(-B -q -Dstyle.color=never -f "$POM" dependency:copy-dependencies
    -DincludeScope=runtime "-DoutputDirectory=$tmp")
  if [[ -n "${MAVEN_REPO_LOCAL:-}" ]]; then args+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL"); fi
  if ! "$MVN" "${args[@]}" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -rf "$tmp"
    die "Maven could not assemble the broker classpath (full output: $log)"
  fi
  ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || die "no kafka_2.13 jar in $tmp (see $log)"
  printf '%s\n' "$sum" >"$tmp/.pom.sha256"
  rm -rf "$LIB_DIR"
  mv "$tmp" "$LIB_DIR"
}

# jvm_opts HEAP DIR [FLAG...]: the flags of bin/kafka-server-start.sh, then the extra ones.
jvm_opts() {
  local heap=$1 dir=$2
  shift 2
  printf '%s\n' -server "-Xmx$heap" "-Xms$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true "-Dlog4j2.configurationFile=$dir/log4j2.properties" \
    "-Dkafka.logs.dir=$dir" "-XX:ErrorFile=$dir/hs_err_%p.log" "$@"
  cds_opts "$dir"
  # shellcheck disable=SC2086 # KAFKA_JVM_OPTS is a list of flags
  if [[ -n "${KAFKA_JVM_OPTS:-}" ]]; then printf '%s\n' ${KAFKA_JVM_OPTS}; fi
}

# ---------------------------------------------------------------- configuration

# A random cluster id: 16 random bytes in unpadded URL-safe base64, as Kafka's Uuid
# prints them (and not starting with '-', which a command line would take for an option).
cluster_id() {
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    if [[ ${#id} == 22 && "$id" != -* ]]; then
      printf '%s\n' "$id"
      return 0
    fi
  done
}

write_log4j() {
  local dir=$1
  cat >"$dir/log4j2.properties" <<EOF
# Written by docker/kafka.sh: the broker logs to $dir/server.log only.
status = warn
name = kafka
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $dir/server.log
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.zk.name = org.apache.zookeeper
logger.zk.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
EOF
}

# Settings every node shares: fast start on a small machine.
common_props() {
  cat <<'EOF'
process.roles=broker,controller
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
offsets.topic.num.partitions=5
transaction.state.log.num.partitions=5
log.cleaner.dedupe.buffer.size=33554432
EOF
}

write_single_config() {
  local dir=$1
  {
    printf '# Written by docker/kafka.sh up: one combined broker+controller.\n'
    common_props
    cat <<EOF
node.id=1
controller.quorum.bootstrap.servers=$HOST:$CPORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
log.dirs=$dir/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
EOF
  } >"$dir/server.properties"
  write_log4j "$dir"
}

node_port() { printf '%s' "$((CLUSTER_BASE + 2 * ($1 - 1)))"; }
node_cport() { printf '%s' "$((CLUSTER_BASE + 2 * ($1 - 1) + 1))"; }

cluster_bootstrap() {
  local n out=""
  for ((n = 1; n <= NODES; n++)); do out+="${out:+,}$HOST:$(node_port "$n")"; done
  printf '%s' "$out"
}

write_node_config() {
  local n=$1 dir=$2 voters="" m
  for ((m = 1; m <= NODES; m++)); do voters+="${voters:+,}$m@$HOST:$(node_cport "$m")"; done
  {
    printf '# Written by docker/kafka.sh cluster-up: node %s of %s.\n' "$n" "$NODES"
    common_props
    cat <<EOF
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$(node_port "$n"),CONTROLLER://$HOST:$(node_cport "$n")
advertised.listeners=PLAINTEXT://$HOST:$(node_port "$n"),CONTROLLER://$HOST:$(node_cport "$n")
log.dirs=$dir/data
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
broker.session.timeout.ms=6000
# Stopping all nodes at once, the last broker would wait for a controller quorum that is
# already gone to approve its controlled shutdown; these throwaway nodes skip that step.
controlled.shutdown.enable=false
EOF
  } >"$dir/server.properties"
  write_log4j "$dir"
}

# format DIR CLUSTER_ID [--standalone]
format_storage() {
  local dir=$1 id=$2
  shift 2
  local -a opts
  # A short-lived tool: the client compiler and the serial collector start fastest.
  mapfile -t opts < <(cds_opts)
  if ! "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC "${opts[@]}" \
    "-XX:ErrorFile=$dir/hs_err_%p.log" "-Dlog4j2.configurationFile=$dir/log4j2.properties" \
    -cp "$LIB_DIR/*" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" "$@" \
    >"$dir/format.log" 2>&1 9>&-; then
    cat "$dir/format.log" >&2
    die "formatting the storage in $dir failed"
  fi
}

# ---------------------------------------------------------------- start / wait

# launch DIR HEAP [FLAG...]: starts the broker in the background and records its pid.
launch() {
  local dir=$1 heap=$2 pid
  shift 2
  local -a opts
  mapfile -t opts < <(jvm_opts "$heap" "$dir" "$@")
  # The log offset lets readiness checks look only at what this start writes.
  stat -c %s "$dir/server.log" 2>/dev/null >"$dir/log.offset" || echo 0 >"$dir/log.offset"
  printf '\n=== start %s ===\n' "$(date '+%F %T')" >>"$dir/stdout.log"
  nohup "$JAVA" "${opts[@]}" -cp "$LIB_DIR/*" kafka.Kafka "$dir/server.properties" \
    >>"$dir/stdout.log" 2>&1 </dev/null 9>&- &
  pid=$!
  printf '%s\n' "$pid" >"$dir/broker.pid"
}

# ready DIR PORT: the broker in DIR accepts connections and has logged that it started.
ready() {
  local dir=$1 port=$2 offset
  offset=$(cat "$dir/log.offset" 2>/dev/null || echo 0)
  port_open "$port" || return 1
  [[ -f "$dir/server.log" ]] || return 1
  grep -qF "$READY_LINE" < <(tail -c "+$((offset + 1))" "$dir/server.log")
}

# wait_ready "DIR:PORT"...: waits for all of them; on failure stops them and exits.
wait_ready() {
  local deadline=$((SECONDS + START_TIMEOUT)) spec dir pending pid
  local -a dirs=()
  for spec in "$@"; do dirs+=("${spec%:*}"); done
  while :; do
    pending=0
    for spec in "$@"; do
      dir=${spec%:*}
      pid=$(pid_of "$dir/broker.pid")
      if ! owned "$pid" "$dir/server.properties"; then
        say "the broker in $dir exited during start-up"
        tail_logs "$dir"
        KEEP_ARCHIVES=0
        stop_dirs TERM "${dirs[@]}"
        die "broker start failed"
      fi
      ready "$dir" "${spec##*:}" || pending=1
    done
    ((pending)) || return 0
    if ((SECONDS >= deadline)); then
      for spec in "$@"; do
        dir=${spec%:*}
        if ! ready "$dir" "${spec##*:}"; then
          say "the broker in $dir is not ready after ${START_TIMEOUT}s"
          tail_logs "$dir"
        fi
      done
      KEEP_ARCHIVES=0
      stop_dirs TERM "${dirs[@]}"
      die "timed out waiting for Kafka (port open and '$READY_LINE' logged)"
    fi
    sleep 0.1
  done
}

# ---------------------------------------------------------------- commands

cmd_up() {
  local pid t0=$SECONDS id
  pid=$(running "$SINGLE_DIR")
  if [[ -n "$pid" ]]; then
    say "already up (pid $pid) on $HOST:$PORT"
    write_env_single
    printf '%s:%s\n' "$HOST" "$PORT"
    return 0
  fi
  port_free "$PORT" || die "port $PORT is in use by another process (set KAFKA_PORT)"
  port_free "$CPORT" || die "port $CPORT is in use by another process (set KAFKA_CONTROLLER_PORT)"
  check_java
  ensure_classpath
  rm -rf "$SINGLE_DIR"
  mkdir -p "$SINGLE_DIR/data"
  write_single_config "$SINGLE_DIR"
  id=$(cluster_id)
  format_storage "$SINGLE_DIR" "$id" --standalone
  launch "$SINGLE_DIR" "$HEAP"
  wait_ready "$SINGLE_DIR:$PORT"
  write_env_single
  say "up in $((SECONDS - t0))s: pid $(pid_of "$SINGLE_DIR/broker.pid"), log $SINGLE_DIR/server.log"
  printf '%s:%s\n' "$HOST" "$PORT"
}

# STREAMWATCH_BOOTSTRAP for the tests, STREAMWATCH_BOOTSTRAP_SERVERS for the CLI (--bootstrap-servers)
write_env_single() {
  printf 'STREAMWATCH_BOOTSTRAP=%s:%s\nSTREAMWATCH_BOOTSTRAP_SERVERS=%s:%s\n' \
    "$HOST" "$PORT" "$HOST" "$PORT" >"$STATE/env"
}
write_env_cluster() {
  printf 'STREAMWATCH_CLUSTER_BOOTSTRAP=%s\n' "$(cluster_bootstrap)" >"$STATE/cluster.env"
}

cmd_down() {
  if [[ -z "$(running "$SINGLE_DIR")" ]]; then
    say "not running"
  else
    stop_dirs TERM "$SINGLE_DIR"
    say "stopped"
  fi
  rm -f "$SINGLE_DIR/broker.pid" "$STATE/env"
}

node_dir() { printf '%s/node%s' "$CLUSTER_DIR" "$1"; }

# Three JVMs share two cores: cluster nodes, which exist for fault tests rather than for
# throughput, use only the client compiler, which starts them in about half the CPU time.
CLUSTER_JIT=(-XX:TieredStopAtLevel=1)

cmd_cluster_up() {
  local n pid t0=$SECONDS id dir any=0 down=""
  local -a specs=()
  for ((n = 1; n <= NODES; n++)); do
    pid=$(running "$(node_dir "$n")")
    if [[ -n "$pid" ]]; then any=1; else down+=" $n"; fi
  done
  if ((any)); then
    if [[ -n "$down" ]]; then
      say "already up, but node(s)$down are down (kafka.sh start-node N restarts one)"
    else
      say "already up on $(cluster_bootstrap)"
    fi
    write_env_cluster
    cluster_bootstrap
    printf '\n'
    return 0
  fi
  for ((n = 1; n <= NODES; n++)); do
    port_free "$(node_port "$n")" || die "port $(node_port "$n") is in use (set KAFKA_CLUSTER_PORT_BASE)"
    port_free "$(node_cport "$n")" || die "port $(node_cport "$n") is in use (set KAFKA_CLUSTER_PORT_BASE)"
  done
  check_java
  ensure_classpath
  rm -rf "$CLUSTER_DIR"
  id=$(cluster_id)
  local -a fmt=()
  for ((n = 1; n <= NODES; n++)); do
    dir=$(node_dir "$n")
    mkdir -p "$dir/data"
    write_node_config "$n" "$dir"
    # Static voters: formatted without --standalone.
    format_storage "$dir" "$id" &
    fmt+=($!)
  done
  for pid in "${fmt[@]}"; do wait "$pid" || die "formatting the cluster's storage failed"; done
  for ((n = 1; n <= NODES; n++)); do
    dir=$(node_dir "$n")
    launch "$dir" "$CLUSTER_HEAP" "${CLUSTER_JIT[@]}"
    specs+=("$dir:$(node_port "$n")")
  done
  wait_ready "${specs[@]}"
  write_env_cluster
  say "cluster up in $((SECONDS - t0))s, logs in $CLUSTER_DIR/node*/server.log"
  cluster_bootstrap
  printf '\n'
}

cmd_cluster_down() {
  local n any=0
  local -a dirs=()
  for ((n = 1; n <= NODES; n++)); do
    dirs+=("$(node_dir "$n")")
    [[ -z "$(running "$(node_dir "$n")")" ]] || any=1
  done
  if ((any)); then
    # All at once: stopped one by one, the last nodes would wait for a lost quorum.
    stop_dirs TERM "${dirs[@]}"
    say "cluster stopped"
  else
    say "cluster not running"
  fi
  rm -f "$STATE/cluster.env"
}

node_arg() {
  local n=${1:-}
  if ! is_uint "$n" || ((n < 1 || n > NODES)); then die "expected a node number 1..$NODES"; fi
  [[ -f "$(node_dir "$n")/server.properties" ]] || die "no cluster here: run kafka.sh cluster-up first"
  printf '%s' "$n"
}

cmd_kill_node() {
  local n dir pid
  n=$(node_arg "${1:-}")
  dir=$(node_dir "$n")
  pid=$(running "$dir")
  if [[ -z "$pid" ]]; then
    say "node $n is not running"
    return 0
  fi
  stop_dirs KILL "$dir"
  say "node $n (pid $pid) killed"
}

cmd_start_node() {
  local n dir pid t0=$SECONDS
  n=$(node_arg "${1:-}")
  dir=$(node_dir "$n")
  pid=$(running "$dir")
  if [[ -n "$pid" ]]; then
    say "node $n already running (pid $pid)"
    return 0
  fi
  port_free "$(node_port "$n")" || die "port $(node_port "$n") is in use by another process"
  check_java
  ensure_classpath
  launch "$dir" "$CLUSTER_HEAP" "${CLUSTER_JIT[@]}"
  wait_ready "$dir:$(node_port "$n")"
  say "node $n up in $((SECONDS - t0))s (pid $(pid_of "$dir/broker.pid"))"
}

status_line() {
  local name=$1 dir=$2 port=$3 pid
  pid=$(running "$dir")
  if [[ -n "$pid" ]]; then
    local p=closed
    if port_open "$port"; then p=open; fi
    printf '%-8s up    pid %-7s %s:%s (%s)  rss %s\n' "$name" "$pid" "$HOST" "$port" "$p" "$(rss_mb "$pid")"
    return 0
  fi
  printf '%-8s down\n' "$name"
  return 1
}

cmd_status() {
  local any=0 n
  if status_line single "$SINGLE_DIR" "$PORT"; then any=1; fi
  if [[ -d "$CLUSTER_DIR" ]]; then
    for ((n = 1; n <= NODES; n++)); do
      if status_line "node$n" "$(node_dir "$n")" "$(node_port "$n")"; then any=1; fi
    done
  fi
  ((any)) || return 3
}

main() {
  local cmd=${1:-}
  shift || true
  case "$cmd" in
    up | down | cluster-up | cluster-down | kill-node | start-node | classpath) ;;
    status)
      cmd_status
      return
      ;;
    -h | --help | help)
      usage
      return 0
      ;;
    *)
      usage
      exit 2
      ;;
  esac
  mkdir -p "$STATE"
  # One command at a time changes the state directory.
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$STATE/.lock"
    flock -w 300 9 || die "another kafka.sh is still running (lock $STATE/.lock)"
  fi
  case "$cmd" in
    up) cmd_up ;;
    down) cmd_down ;;
    cluster-up) cmd_cluster_up ;;
    cluster-down) cmd_cluster_down ;;
    kill-node) cmd_kill_node "$@" ;;
    start-node) cmd_start_node "$@" ;;
    classpath)
      check_java
      ensure_classpath
      say "classpath: $LIB_DIR"
      ;;
  esac
}

main "$@"
