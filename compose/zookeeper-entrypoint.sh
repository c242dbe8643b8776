#!/bin/sh
# Writes zoo.cfg from the environment, then runs ZooKeeper (QuorumPeerMain: standalone without
# ZOO_SERVERS, a member of an ensemble with them) as PID 1.
#
#   ZOO_MY_ID       this server's id in an ensemble (1..255)
#   ZOO_SERVERS     the ensemble, space separated, as zoo.cfg writes it:
#                   "server.1=zookeeper:2888:3888;2181 server.2=zookeeper-2:2888:3888;2181 ..."
#   ZOO_TICK_TIME_MS  ZooKeeper's tick (default 2000); sessions may last up to 20 ticks
#   ZOO_HEAP_MAX    the JVM's -Xmx (default 256m)
set -eu

data=/var/lib/zookeeper/data
config=/etc/zookeeper-kafkasim/zoo.cfg
mkdir -p "$data"

cat >"$config" <<CFG
tickTime=${ZOO_TICK_TIME_MS:-2000}
initLimit=10
syncLimit=5
dataDir=$data
clientPort=2181
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
CFG
if [ -n "${ZOO_SERVERS:-}" ]; then
    : "${ZOO_MY_ID:?ZOO_MY_ID must be set with ZOO_SERVERS}"
    echo "$ZOO_MY_ID" >"$data/myid"
    # Peers reach this server by its service name, which resolves to another interface
    # than the one a container binds first: listen on all of them.
    echo "quorumListenOnAllIPs=true" >>"$config"
    for server in $ZOO_SERVERS; do
        echo "$server" >>"$config"
    done
fi

classpath=/usr/share/java/zookeeper.jar
[ -f /usr/share/java/slf4j-simple.jar ] && classpath=$classpath:/usr/share/java/slf4j-simple.jar
exec java -Xms32m "-Xmx${ZOO_HEAP_MAX:-256m}" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Djava.awt.headless=true -Dorg.slf4j.simpleLogger.defaultLogLevel=info \
    -Dorg.slf4j.simpleLogger.showDateTime=true \
    -cp "$classpath" org.apache.zookeeper.server.quorum.QuorumPeerMain "$config"
