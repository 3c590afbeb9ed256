# syntax=docker/dockerfile:1
# The Spark job image: `tidelake ingest` (PySpark 3.5.7 + the Hudi bundle) with Java 17 and
# every jar of scripts/jars.txt baked in, so the job never downloads anything at run time.
# It runs Spark in local mode (the default), or as a client of a cluster
# (lake.spark.master: spark://…), or through `tidelake submit`. Build from the repository
# root, tagged with the package version as the manifests and the release workflow name it:
#   docker build -f deploy/docker/spark.Dockerfile -t tidelake-spark:0.1.0 .

# --- the jars, fetched with Maven as scripts/setup does ---------------------------------------
FROM maven:3.9-eclipse-temurin-17 AS jars
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY scripts/jars.txt /tmp/jars.txt
RUN grep -Ev '^(#|$)' /tmp/jars.txt | while read -r coord; do \
      mvn -q -B dependency:copy -Dartifact="$coord" -DoutputDirectory=/opt/tidelake/jars; \
    done && ls -l /opt/tidelake/jars

# --- the wheel (no dashboard: the ingest serves nothing) -------------------------------------
FROM python:3.11-slim-bookworm AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src/ src/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- runtime ----------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="tidelake-spark" \
      org.opencontainers.image.description="tidelake ingest: PySpark + Apache Hudi" \
      org.opencontainers.image.licenses="Apache-2.0"
# The Debian release pins the JRE's major version; exact package versions leave the mirror.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=jars /opt/tidelake/jars/ /opt/tidelake/jars/
COPY --from=wheel /wheels/ /tmp/wheels/
# The extras of what this image runs: PySpark, S3A/S3 staging. Versions come from the
# wheel's own requirements.
# hadolint ignore=DL3013
RUN wheel="$(ls /tmp/wheels/tidelake-*.whl)" \
 && pip install --no-cache-dir "${wheel}[spark,s3]" \
 && rm -rf /tmp/wheels \
 && useradd --uid 10001 --home-dir /var/lib/tidelake --create-home tidelake \
 && install -d -o 10001 -g 10001 /var/lib/tidelake/state
USER 10001
WORKDIR /var/lib/tidelake
# java is on the PATH (amd64 and arm64 alike): PySpark needs no JAVA_HOME.
ENV TIDELAKE_JAR_CACHE=/opt/tidelake/jars \
    TIDELAKE_HOME=/var/lib/tidelake \
    PYTHONUNBUFFERED=1
ENTRYPOINT ["tidelake"]
CMD ["ingest", "--continuous"]
