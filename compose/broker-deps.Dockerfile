# kafkasim's dependencies in /opt/kafkasim, from a wheelhouse: the base that
# compose/build-offline.sh builds broker.Dockerfile on, so that a change to kafkasim's sources
# rebuilds only the small layer with kafkasim itself (and not grpcio & co. under vfs).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY wheelhouse /tmp/wheelhouse
RUN python3 -m venv /opt/kafkasim \
    && /opt/kafkasim/bin/pip install --quiet --no-index /tmp/wheelhouse/*.whl \
    && rm -rf /tmp/wheelhouse
