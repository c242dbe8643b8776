# The broker image: kafkasim installed in a virtual environment (/opt/kafkasim), run as the
# unprivileged user kafkasim, data in the volume /var/lib/kafkasim.
#
# BASE_IMAGE is any Debian bookworm image with python3.11 and its venv module. The default is
# the public Python image (pip then installs kafkasim's dependencies from PyPI, with the
# repository as build context); compose/build-offline.sh passes a base made with debootstrap
# and a staged context holding a wheelhouse/, and nothing is downloaded during the build.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# Under the classic builder every instruction is a step, and under the vfs storage driver every
# step copies the whole root filesystem (~30 s each here). So whatever does not depend on
# kafkasim's sources comes first, where the build cache keeps it across source changes, and a
# change to the sources rebuilds four steps: COPY, RUN, VOLUME, USER. (VOLUME stays after the
# RUN: a build step's changes under a declared volume are discarded.)
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 \
    PATH=/opt/kafkasim/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /var/lib/kafkasim
EXPOSE 9092 9093
ENTRYPOINT ["kafkasim-entrypoint"]
COPY . /src
RUN set -eu; \
    # A base from build-offline.sh has the environment with the dependencies already.
    [ -x /opt/kafkasim/bin/pip ] || python3 -m venv /opt/kafkasim; \
    if [ -d /src/wheelhouse ]; then \
        /opt/kafkasim/bin/pip install --quiet --no-index --find-links /src/wheelhouse kafkasim; \
    else \
        /opt/kafkasim/bin/pip install --quiet /src; \
    fi; \
    install -m 0755 /src/compose/broker-entrypoint.sh /usr/local/bin/kafkasim-entrypoint; \
    useradd --system --user-group --home-dir /var/lib/kafkasim --shell /usr/sbin/nologin kafkasim; \
    mkdir -p /var/lib/kafkasim /etc/kafkasim; \
    chown kafkasim:kafkasim /var/lib/kafkasim /etc/kafkasim; \
    rm -rf /src
VOLUME /var/lib/kafkasim
USER kafkasim
