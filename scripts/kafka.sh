#!/usr/bin/env bash
# A real Apache Kafka broker for the broker tests (tests/broker), run from jars that Maven fetches
# into a cache outside the repository ($KSD_KAFKA_CACHE, default ~/.cache/kafka-segments-ds).
#
#   scripts/kafka.sh fetch            the jars of the pinned Kafka (first run downloads); prints
#                                     the cache dir
#   scripts/kafka.sh classpath        fetch, compile the Java helper (tests/broker/java, cached
#                                     by a hash of its source); prints the classpath
#   scripts/kafka.sh run CLASS ARG..  run a class (Kafka's own tools, e.g.
#                                     kafka.tools.DumpLogSegments, or BrokerTool) on it
#   scripts/kafka.sh start DIR        a single-node KRaft broker (broker + controller) whose
#                                     files live in DIR: DIR/server.properties (written on the
#                                     first start from free loopback ports and the lines of
#                                     DIR/extra.properties, if present), data in DIR/data,
#                                     formatted once; waits until it serves, prints its
#                                     bootstrap address; pid in DIR/broker.pid, log DIR/broker.log.
#                                     Tiered storage is on: topics created with
#                                     remote.storage.enable=true upload their rolled segments to
#                                     Kafka's LocalTieredStorage in DIR/tiered
#   scripts/kafka.sh start-legacy DIR  the same for a Kafka 3.9 broker in ZooKeeper mode with
#                                     message format 0.10.2 (magic 1; magic 0 for topics with
#                                     message.format.version=0.8.2), its ZooKeeper's pid in
#                                     DIR/zookeeper.pid
#   scripts/kafka.sh stop DIR [--kill]  stop it cleanly (SIGTERM, waits for the exit) or SIGKILL
#
# KSD_KAFKA_OWNER_PID=PID: start's broker stops (SIGTERM) when process PID is gone.
# Needs Java 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven).
set -euo pipefail
KAFKA_VERSION="${KSD_KAFKA_VERSION:-4.1.1}"
LEGACY_VERSION="3.9.1" # the last release with ZooKeeper mode and magic 0/1 message formats
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
CACHE="${KSD_KAFKA_CACHE:-$HOME/.cache/kafka-segments-ds}/kafka-$KAFKA_VERSION"
HELPER_SRC="$REPO/tests/broker/java"
HEAP="${KSD_KAFKA_HEAP:--Xmx512m}"
START_TIMEOUT_S="${KSD_KAFKA_START_TIMEOUT_S:-120}"

die() { echo "kafka.sh: $*" >&2; exit 1; }

fetch() {
    local stamp want
    want="$KAFKA_VERSION $(sha256sum "$HERE/kafka/pom.xml" | cut -c1-16)"
    stamp="$CACHE/libs/.complete"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    command -v mvn >/dev/null || die "Maven is missing (apt-get install maven)"
    mkdir -p "$CACHE"
    (
        flock 9
        if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
            exit 0
        fi
        rm -rf "$CACHE/libs.tmp" "$CACHE/libs"
        echo "kafka.sh: fetching Kafka $KAFKA_VERSION with Maven into $CACHE" >&2
        mvn -q -B -f "$HERE/kafka/pom.xml" dependency:copy-dependencies \
            -Dkafka.version="$KAFKA_VERSION" -DincludeScope=runtime \
            -DoutputDirectory="$CACHE/libs.tmp" >&2
        echo "$want" >"$CACHE/libs.tmp/.complete"
        mv "$CACHE/libs.tmp" "$CACHE/libs"
    ) 9>"$CACHE/.lock"
}

# the compiled helper: one dir per hash of its sources, so an edit recompiles
helper_classes() {
    local hash dir
    hash="$(cat "$HELPER_SRC"/*.java | sha256sum | cut -c1-16)"
    dir="$CACHE/helper-$hash"
    if [ ! -f "$dir/.complete" ]; then
        command -v javac >/dev/null || die "javac is missing (apt-get install openjdk-17-jdk-headless)"
        (
            flock 9
            if [ ! -f "$dir/.complete" ]; then
                rm -rf "$dir.tmp"
                mkdir -p "$dir.tmp"
                javac -nowarn -encoding UTF-8 -d "$dir.tmp" -cp "$CACHE/libs/*" "$HELPER_SRC"/*.java >&2
                touch "$dir.tmp/.complete"
                rm -rf "$dir"
                mv "$dir.tmp" "$dir"
            fi
        ) 9>"$CACHE/.lock"
    fi
    echo "$dir"
}

classpath() {
    fetch
    echo "$(helper_classes):$CACHE/libs/*"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cluster_id() {
    # Kafka's Uuid: 16 random bytes, URL-safe base64 without padding, not starting with '-'
    python3 -c 'import base64, os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break'
}

# the settings both kinds of broker share: one node, small, quick to start tasks
common_properties() {
    cat <<EOF
auto.create.topics.enable=false
num.network.threads=2
num.io.threads=2
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
log.initial.task.delay.ms=0
EOF
}

write_properties() {
    local dir="$1" port cport
    port="$(free_port)"
    cport="$(free_port)"
    while [ "$cport" = "$port" ]; do cport="$(free_port)"; done
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
$(common_properties)
# a KRaft snapshot of the metadata log every few seconds (of new records), for the tests that
# read them (the default is an hour)
metadata.log.max.snapshot.interval.ms=3000
num.partitions=1
background.threads=2
num.recovery.threads.per.data.dir=1
transaction.state.log.num.partitions=1
log.retention.check.interval.ms=1000
log.cleaner.threads=1
log.cleaner.backoff.ms=200
log.cleaner.dedupe.buffer.size=4194304
log.segment.delete.delay.ms=0
remote.log.storage.system.enable=true
remote.log.storage.manager.class.name=org.apache.kafka.server.log.remote.storage.LocalTieredStorage
remote.log.storage.manager.impl.prefix=rsm.config.
rsm.config.dir=$dir/tiered
remote.log.metadata.manager.listener.name=PLAINTEXT
remote.log.metadata.manager.impl.prefix=rlmm.config.
rlmm.config.remote.log.metadata.topic.replication.factor=1
rlmm.config.remote.log.metadata.topic.num.partitions=1
remote.log.manager.task.interval.ms=500
EOF
    if [ -f "$dir/extra.properties" ]; then
        cat "$dir/extra.properties" >>"$dir/server.properties"
    fi
}

is_running() {
    local dir="$1"
    [ -f "$dir/broker.pid" ] && kill -0 "$(cat "$dir/broker.pid")" 2>/dev/null
}

# with KSD_KAFKA_OWNER_PID, process PID (a broker) goes when the process that owns it (a test
# session) is gone
watch_owner() {
    local pid="$1"
    [ -n "${KSD_KAFKA_OWNER_PID:-}" ] || return 0
    (
        while kill -0 "$pid" 2>/dev/null; do
            if ! kill -0 "$KSD_KAFKA_OWNER_PID" 2>/dev/null; then
                kill -TERM "$pid"
                break
            fi
            sleep 1
        done
    ) </dev/null >/dev/null 2>&1 &
}

# the broker's log4j2 configuration: warnings, and the INFO lines of the loggers given
write_log4j2() {
    local dir="$1" n=0 name
    shift
    cat >"$dir/log4j2.properties" <<EOF
appender.file.type=File
appender.file.name=file
appender.file.fileName=$dir/broker.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
EOF
    for name in "$@"; do
        n=$((n + 1))
        printf 'logger.l%s.name=%s\nlogger.l%s.level=INFO\n' "$n" "$name" "$n" >>"$dir/log4j2.properties"
    done
}

# wait until every pattern (-e P, fixed strings) shows in DIR/broker.log past its first SEEN
# lines; fail if pid dies (a legacy broker's ZooKeeper is stopped with it)
wait_logged() {
    local dir="$1" seen="$2" pid="$3" pattern found
    shift 3
    local patterns=()
    while [ $# -gt 0 ]; do
        [ "$1" = -e ] && shift
        patterns+=("$1")
        shift
    done
    for _ in $(seq "$((START_TIMEOUT_S * 10))"); do
        found=1
        for pattern in "${patterns[@]}"; do
            tail -n "+$((seen + 1))" "$dir/broker.log" | grep -qF -- "$pattern" || { found=0; break; }
        done
        [ "$found" = 1 ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/broker.pid"
    stop_pid "$dir/zookeeper.pid" --kill
    tail -n 40 "$dir/broker.out" "$dir/broker.log" >&2 || true
    die "the broker did not start within ${START_TIMEOUT_S}s (or exited)"
}

start() {
    local dir="$1" cp bootstrap pid seen
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    is_running "$dir" && die "a broker already runs from $dir (pid $(cat "$dir/broker.pid"))"
    cp="$(classpath)"
    [ -f "$dir/server.properties" ] || write_properties "$dir"
    write_log4j2 "$dir" kafka.server.KafkaRaftServer \
        org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager
    if [ ! -f "$dir/data/meta.properties" ]; then
        java $HEAP -cp "$cp" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
            kafka.tools.StorageTool format -t "$(cluster_id)" -c "$dir/server.properties" \
            >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "format failed"; }
    fi
    bootstrap="$(sed -n 's|^advertised.listeners=PLAINTEXT://||p' "$dir/server.properties")"
    # each start appends to broker.log: look past the lines of the earlier starts
    touch "$dir/broker.log"
    seen="$(wc -l <"$dir/broker.log")"
    # its own process group, so that a test run's Ctrl-C doesn't reach it before the fixture
    setsid java $HEAP -Xms128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$cp" \
        kafka.Kafka "$dir/server.properties" >"$dir/broker.out" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/broker.pid"
    watch_owner "$pid"
    # it logs its start once it is unfenced (so it serves), and its remote log metadata manager
    # sets itself up after that (a stop while that is under way waits minutes for it)
    wait_logged "$dir" "$seen" "$pid" -e "Kafka Server started" \
        -e "Initialized topic-based RLMM resources"
    echo "$bootstrap"
}

# A legacy broker: Kafka $LEGACY_VERSION in ZooKeeper mode (its own ZooKeeper), with
# inter.broker.protocol.version and log.message.format.version 0.10.2, so that it converts what
# producers send to magic 1 (and to magic 0 for a topic created with message.format.version=0.8.2)
start_legacy() {
    local dir="$1" libs bootstrap pid zpid seen zport port
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    is_running "$dir" && die "a broker already runs from $dir (pid $(cat "$dir/broker.pid"))"
    KSD_KAFKA_VERSION="$LEGACY_VERSION" bash "$0" fetch >/dev/null
    libs="$(dirname "$CACHE")/kafka-$LEGACY_VERSION/libs"
    if [ ! -f "$dir/server.properties" ]; then
        zport="$(free_port)"
        port="$(free_port)"
        cat >"$dir/zookeeper.properties" <<EOF
dataDir=$dir/zookeeper
clientPort=$zport
clientPortAddress=127.0.0.1
admin.enableServer=false
EOF
        cat >"$dir/server.properties" <<EOF
broker.id=0
zookeeper.connect=127.0.0.1:$zport
listeners=PLAINTEXT://127.0.0.1:$port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
log.dirs=$dir/data
inter.broker.protocol.version=0.10.2
log.message.format.version=0.10.2
$(common_properties)
EOF
    fi
    write_log4j2 "$dir" kafka.server.KafkaServer
    bootstrap="$(sed -n 's|^advertised.listeners=PLAINTEXT://||p' "$dir/server.properties")"
    zport="$(sed -n 's|^clientPort=||p' "$dir/zookeeper.properties")"
    setsid java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$libs/*" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zookeeper.properties" \
        >"$dir/zookeeper.out" 2>&1 </dev/null &
    zpid=$!
    echo "$zpid" >"$dir/zookeeper.pid"
    watch_owner "$zpid"
    local serving=0
    for _ in $(seq "$((START_TIMEOUT_S * 10))"); do
        (exec 3<>"/dev/tcp/127.0.0.1/$zport") 2>/dev/null && { serving=1; break; }
        kill -0 "$zpid" 2>/dev/null || die "ZooKeeper exited: $(tail -n 20 "$dir/zookeeper.out")"
        sleep 0.1
    done
    if [ "$serving" != 1 ]; then
        stop_pid "$dir/zookeeper.pid" --kill
        die "ZooKeeper did not serve on port $zport within ${START_TIMEOUT_S}s"
    fi
    touch "$dir/broker.log"
    seen="$(wc -l <"$dir/broker.log")"
    setsid java $HEAP -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$libs/*" \
        kafka.Kafka "$dir/server.properties" >"$dir/broker.out" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/broker.pid"
    watch_owner "$pid"
    wait_logged "$dir" "$seen" "$pid" -e "started (kafka.server.KafkaServer)"
    echo "$bootstrap"
}

# stop the process whose pid FILE holds: SIGTERM and wait for its exit, or --kill (SIGKILL)
stop_pid() {
    local file="$1" mode="${2:-}" pid
    [ -f "$file" ] || return 0
    pid="$(cat "$file")"
    if kill -0 "$pid" 2>/dev/null; then
        if [ "$mode" = "--kill" ]; then
            kill -9 "$pid"
        else
            kill -TERM "$pid"
        fi
        # wait for the exit (a clean shutdown flushes, writes the clean-shutdown marker)
        for _ in $(seq 1200); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -9 "$pid" 2>/dev/null || true
            die "pid $pid ($file) did not stop within 120 s; killed"
        fi
    fi
    rm -f "$file"
}

stop() {
    stop_pid "$1/broker.pid" "${2:-}"
    stop_pid "$1/zookeeper.pid" # a legacy broker's
}

case "${1:-}" in
fetch) fetch; echo "$CACHE" ;;
classpath) classpath ;;
run)
    shift
    [ $# -ge 1 ] || die "run CLASS ARGS..."
    cp="$(classpath)"
    # tools log warnings to stderr (log4j's default would write errors to stdout)
    cat >"$CACHE/log4j2-tools.properties.$$" <<EOF
appender.err.type=Console
appender.err.name=err
appender.err.target=SYSTEM_ERR
appender.err.layout.type=PatternLayout
appender.err.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=WARN
rootLogger.appenderRef.err.ref=err
logger.net.name=org.apache.kafka.clients.NetworkClient
logger.net.level=ERROR
EOF
    mv "$CACHE/log4j2-tools.properties.$$" "$CACHE/log4j2-tools.properties"
    exec java $HEAP -XX:+UseSerialGC -Dlog4j2.configurationFile="$CACHE/log4j2-tools.properties" \
        -cp "$cp" "$@"
    ;;
start) [ $# -eq 2 ] || die "start DIR"; start "$2" ;;
start-legacy) [ $# -eq 2 ] || die "start-legacy DIR"; start_legacy "$2" ;;
stop) [ $# -ge 2 ] || die "stop DIR [--kill]"; stop "$2" "${3:-}" ;;
*) sed -n '2,27p' "$0" >&2; exit 2 ;;
esac
