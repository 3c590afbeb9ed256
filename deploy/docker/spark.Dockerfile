# syntax=docker/dockerfile:1
# The Spark job image: `tidelake ingest` (PySpark 3.5.7 + the Hudi bundle) with Java 17 and
# every pinned jar (src/tidelake/runtime/jars.txt: Hudi and S3A) baked in by `tidelake setup`,
# verified by SHA-256, so the job never downloads anything at run time.
# It runs Spark in local mode (the default), or as a client of a cluster
# (lake.spark.master: spark://…), or through `tidelake submit`. Build from the repository
# root, tagged with the package version as the manifests and the release workflow name it:
#   docker build -f deploy/docker/spark.Dockerfile -t tidelake-spark:0.1.0 .

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
COPY --from=wheel /wheels/ /tmp/wheels/
COPY constraints.txt /tmp/constraints.txt
# The extras of what this image runs: PySpark, S3A/S3 staging; every version pinned by
# constraints.txt (`make constraints`), so a rebuild installs the same packages. Then the
# jars the wheel cannot carry, as a user's `tidelake setup --s3` fetches them (exit 0 only
# with every jar verified by its SHA-256, Java and PySpark in place).
# hadolint ignore=DL3013
RUN wheel="$(ls /tmp/wheels/tidelake-*.whl)" \
 && pip install --no-cache-dir -c /tmp/constraints.txt "${wheel}[spark,s3]" \
 && rm -rf /tmp/wheels /tmp/constraints.txt \
 && tidelake setup --s3 --jar-cache /opt/tidelake/jars \
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
