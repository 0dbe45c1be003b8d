# crossfeed: streaming translation proxy between the OpenAI Responses and Chat Completions APIs.
#
#   docker build -t crossfeed .            (podman: podman build --format docker -t crossfeed .)
#   docker run --rm -p 127.0.0.1:8080:8080 --add-host=host.docker.internal:host-gateway \
#       -e CROSSFEED_INBOUND_KEYS="$(openssl rand -hex 24)" \
#       -e CROSSFEED_UPSTREAM=http://host.docker.internal:8000/v1 crossfeed
#   (podman: drop --add-host and use http://host.containers.internal:8000/v1; see deploy/README.md)
# The port is published on the host's loopback only: publish it on another address (-p 8080:8080)
# only on purpose, with CROSSFEED_INBOUND_KEYS set.
#
# No registry reachable (only a Debian mirror): sudo deploy/make-base-image.sh, then build with
# --build-arg PYTHON_IMAGE=localhost/debian-python:bookworm. deploy/smoke.sh builds and checks the
# image end to end (health, a streamed request, read-only and --user 12345 runs, a clean stop).
# The image holds no pip, setuptools or wheel: nothing inside can install packages.
#
# Configuration: a mounted TOML file (--config FILE, or CROSSFEED_CONFIG=FILE) and/or CROSSFEED_*
# environment variables (CROSSFEED_UPSTREAM, CROSSFEED_UPSTREAM_API, CROSSFEED_UPSTREAM_API_KEY_ENV,
# CROSSFEED_PORT, CROSSFEED_LOG_LEVEL, CROSSFEED_LOG_FORMAT...). Arguments after the image name are
# flags of `crossfeed serve`. On SIGTERM crossfeed drains open streams, then exits 0.

ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# Optional, for a build behind a package mirror or a TLS-intercepting proxy (only this stage sees
# them): --build-arg PIP_INDEX_URL=... / PIP_CERT=<a CA file mounted into the build, podman -v>.
# Empty by default (so a plain build warns about nothing); the install below drops them when empty.
ARG PIP_INDEX_URL=
ARG PIP_CERT=
# python3, not python: a base made from Debian's packages (deploy/make-base-image.sh) has no alias.
RUN python3 -m venv /opt/crossfeed
ENV PATH=/opt/crossfeed/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crossfeed ./crossfeed
COPY proxy ./proxy
COPY translators ./translators
# The same install command as the README. Then the venv loses what only installing needs (pip,
# setuptools, wheel: a 3.11 venv has setuptools too), the activate scripts and the bytecode pip
# compiled: the runtime stage copies nothing else from this stage. (-qq: no "Skipping wheel as it
# is not installed" warning where the venv has no wheel, as on the Debian-made base.)
RUN if [ -z "$PIP_INDEX_URL" ]; then unset PIP_INDEX_URL; fi; \
    if [ -z "$PIP_CERT" ]; then unset PIP_CERT; fi; \
    pip install .
RUN python3 -m pip uninstall -qq --yes pip setuptools wheel \
 && rm -f /opt/crossfeed/bin/activate* /opt/crossfeed/bin/Activate.ps1 \
 && find /opt/crossfeed -depth -name __pycache__ -type d -exec rm -rf {} + \
 && ! python3 -c 'import pip' 2>/dev/null

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/crossfeed/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CROSSFEED_DATA_DIR=/var/lib/crossfeed
# CROSSFEED_PORT and CROSSFEED_LOG_FORMAT are not set here: an environment variable would override
# the mounted file's [server] port and [logging] format. Logs are JSON anyway without a terminal.
# The healthcheck reads CROSSFEED_PORT (default 8080): set it when the port is not 8080.
# No pip in the running image: the base interpreter's pip, setuptools and wheel and the wheels
# ensurepip would install are removed too (they stay in the base image's own layer, shared with
# every other image on it, but nothing here can run them).
# uid 10001 runs in group 0, and the data directory belongs to group 0, group-writable (the
# OpenShift convention): a container started with another uid (--user 12345, OpenShift's arbitrary
# uids) is in group 0 too and can still write it, and so can any uid on a tmpfs that podman makes
# root-owned with the directory's mode (--read-only --tmpfs /var/lib/crossfeed). Group 0 grants
# nothing else: no other file of the image is group-writable. (-K SYS_UID_MAX: a system user above
# login.defs' 999, without useradd's warning.)
RUN set -eu; \
    for d in $(python3 -c 'import os, sys; print(" ".join(p for p in sys.path if os.path.isdir(p)))'); do \
        rm -rf "$d"/pip "$d"/pip-* "$d"/setuptools "$d"/setuptools-* "$d"/pkg_resources \
               "$d"/_distutils_hack "$d"/distutils-precedence.pth "$d"/wheel "$d"/wheel-*; \
    done; \
    rm -rf /usr/local/bin/pip /usr/local/bin/pip3* /usr/bin/pip /usr/bin/pip3* /usr/share/python-wheels; \
    find /usr -path '*/ensurepip/_bundled/*.whl' -delete; \
    if python3 -c 'import pip' 2>/dev/null; then echo 'pip is still importable' >&2; exit 1; fi; \
    useradd --system -K SYS_UID_MAX=10001 --uid 10001 --gid 0 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin crossfeed; \
    mkdir -p /etc/crossfeed /var/lib/crossfeed; \
    chown 10001:0 /var/lib/crossfeed; \
    chmod 0770 /var/lib/crossfeed
COPY --from=build /opt/crossfeed /opt/crossfeed
USER 10001:0
# The response store (SQLite, the default [store] backend) lives here: mount a volume to keep it.
VOLUME ["/var/lib/crossfeed"]
WORKDIR /var/lib/crossfeed
EXPOSE 8080
STOPSIGNAL SIGTERM
# Liveness only (/healthz). /readyz also waits for the upstreams: use it for readiness probes.
# slim images have no curl: the check is Python's urllib, `python` being the venv's own (first on
# PATH, there with any base, even one without a `python` alias).
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CROSSFEED_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["crossfeed", "serve", "--host", "0.0.0.0"]
CMD []
