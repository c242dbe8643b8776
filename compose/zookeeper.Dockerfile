# The ZooKeeper image: Debian's ZooKeeper jars (libzookeeper-java) run by a headless JRE, as
# controller/zk_process.py runs them on a host, as the unprivileged user zookeeper, data in
# the volume /var/lib/zookeeper.
#
# BASE_IMAGE: the same Debian bookworm base as the broker's. compose/build-offline.sh passes a
# debootstrap base that already holds the packages; from the public default they are
# installed with apt-get here.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

COPY compose/zookeeper-entrypoint.sh /usr/local/bin/zookeeper-entrypoint
RUN set -eu; \
    if [ ! -f /usr/share/java/zookeeper.jar ]; then \
        apt-get update; \
        mkdir -p /usr/share/man/man1; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            libzookeeper-java default-jre-headless; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    chmod 0755 /usr/local/bin/zookeeper-entrypoint; \
    useradd --system --user-group --home-dir /var/lib/zookeeper --shell /usr/sbin/nologin zookeeper; \
    mkdir -p /var/lib/zookeeper /etc/zookeeper-kafkasim; \
    chown zookeeper:zookeeper /var/lib/zookeeper /etc/zookeeper-kafkasim

USER zookeeper
WORKDIR /var/lib/zookeeper
VOLUME /var/lib/zookeeper
EXPOSE 2181 2888 3888
ENTRYPOINT ["zookeeper-entrypoint"]
