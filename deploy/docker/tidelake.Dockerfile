# syntax=docker/dockerfile:1
# The tidelake image: capture, stage, serve and every CLI verb that needs no JVM; no PySpark
# (the wheel with the `capture` and `s3` extras only). The ingest (PySpark + Hudi) runs in
# spark.Dockerfile. Build from the repository root, tagged with the package version as the
# manifests (deploy/compose, deploy/k8s) and the release workflow name it:
#   docker build -f deploy/docker/tidelake.Dockerfile -t tidelake:0.1.0 .

# --- the dashboard: Astro → static files shipped inside the Python package -------------------
FROM node:20-bookworm-slim AS dashboard
WORKDIR /src/dashboard
COPY dashboard/package.json dashboard/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY dashboard/ ./
ENV ASTRO_TELEMETRY_DISABLED=1
# astro.config.mjs writes to ../src/tidelake/api/static
RUN mkdir -p ../src/tidelake/api && npx --no-install astro build --silent \
 && rm -f ../src/tidelake/api/static/content-assets.mjs ../src/tidelake/api/static/content-modules.mjs

# --- the wheel --------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src/ src/
COPY --from=dashboard /src/src/tidelake/api/static/ src/tidelake/api/static/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- runtime ----------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="tidelake" \
      org.opencontainers.image.description="tidelake capture, stager and API server" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=wheel /wheels/ /tmp/wheels/
COPY constraints.txt /tmp/constraints.txt
# The extras of what this image runs: binlog/pgoutput capture, S3 staging (no PySpark);
# every version pinned by constraints.txt (`make constraints`), so a rebuild installs the
# same packages.
# hadolint ignore=DL3013
RUN wheel="$(ls /tmp/wheels/tidelake-*.whl)" \
 && pip install --no-cache-dir -c /tmp/constraints.txt "${wheel}[capture,s3]" \
 && rm -rf /tmp/wheels /tmp/constraints.txt \
 && useradd --uid 10001 --home-dir /var/lib/tidelake --create-home tidelake \
 && install -d -o 10001 -g 10001 /var/lib/tidelake/state
USER 10001
WORKDIR /var/lib/tidelake
# Local state (capture position, heartbeats) lives under home; mount a volume there.
ENV TIDELAKE_HOME=/var/lib/tidelake \
    PYTHONUNBUFFERED=1
EXPOSE 8321
ENTRYPOINT ["tidelake"]
CMD ["--help"]
