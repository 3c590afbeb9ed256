"""The one configuration: a YAML file, ``TIDELAKE_…`` environment overrides, pydantic checks.

With no file at all every default runs locally (embedded nats-server, local staging and lake
under ``home``, Spark ``local[*]``). Nested fields are overridden from the environment with
``__`` between levels: ``TIDELAKE_BUS__URL=nats://host:4222``,
``TIDELAKE_STAGE__MAX_EVENTS=5000``. Values are parsed as YAML scalars.

Secrets (passwords, tokens) are never read from the YAML file: only from the environment or
from a file named in the config. They are :class:`pydantic.SecretStr`, so printing the config
masks them.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePath
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from tidelake.errors import ConfigError

ENV_PREFIX = "TIDELAKE_"
#: A route's name: part of its consumer's name, its dead-letter subject and env overrides.
ROUTE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
VIEW_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
#: A source's name (``sources.<name>``): part of its process's, cursor file's and log's names.
SOURCE_NAME = ROUTE_NAME
#: Fields that hold secrets: rejected in the YAML file, accepted from the environment.
SECRET_FIELDS = frozenset(
    {"password", "token", "secret_key", "access_key", "pii_key", "signing_key", "otlp_headers"}
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TlsConfig(_Model):
    """TLS towards an external NATS server (or Kafka brokers); paths to PEM files."""

    ca_file: Path | None = Field(None, description="CA bundle that signs the server certificate")
    cert_file: Path | None = Field(None, description="client certificate (mutual TLS)")
    key_file: Path | None = Field(None, description="client private key (mutual TLS)")


class AuthConfig(_Model):
    """NATS credentials. Secrets only from the environment or files."""

    user: str | None = Field(None, description="user name (password from env or file)")
    password: SecretStr | None = Field(None, description="env TIDELAKE_BUS__AUTH__PASSWORD")
    password_file: Path | None = Field(None, description="file holding the password")
    token: SecretStr | None = Field(None, description="env TIDELAKE_BUS__AUTH__TOKEN")
    token_file: Path | None = Field(None, description="file holding the token")
    creds_file: Path | None = Field(None, description="NATS .creds file (JWT + nkey seed)")
    nkey_seed_file: Path | None = Field(None, description="nkey seed file (nkey auth)")

    def resolved_password(self) -> str | None:
        return _secret(self.password, self.password_file)

    def resolved_token(self) -> str | None:
        return _secret(self.token, self.token_file)


class StreamConfig(_Model):
    """The JetStream CDC stream every producer publishes to."""

    name: str = Field("TIDELAKE_CDC", description="JetStream stream name")
    subjects: list[str] = Field(["cdc.>"], description="subjects producers publish to")
    max_age_s: float = Field(7 * 24 * 3600, gt=0, description="how long messages are kept")
    max_bytes: int = Field(-1, description="stream size limit in bytes; -1 = unlimited")
    duplicate_window_s: float = Field(
        120, gt=0, description="Nats-Msg-Id de-duplication window (docs/architecture.md §3 rule 2)"
    )
    replicas: int = Field(1, ge=1, le=5, description="stream replicas (clustered NATS)")


class DlqConfig(_Model):
    """The dead-letter stream: messages that cannot be decoded or exhausted MaxDeliver."""

    name: str = Field("TIDELAKE_DLQ", description="dead-letter stream name")
    subject_prefix: str = Field("dlq", description="DLQ subject = <prefix>.<original subject>")
    max_age_s: float = Field(30 * 24 * 3600, gt=0, description="how long dead letters are kept")


class ConsumerConfig(_Model):
    """The stager's durable pull consumer on the CDC stream."""

    durable: str = Field("tidelake-stager", description="durable consumer name")
    ack_wait_s: float = Field(60, gt=0, description="redelivery after this long without an ack")
    max_deliver: int = Field(5, ge=1, description="deliveries before a message is dead-lettered")
    max_ack_pending: int = Field(200_000, ge=1, description="unacked messages in flight, at most")
    filter_subject: str | None = Field(None, description="consume only this subject filter")
    filter_subjects: list[str] = Field(
        [],
        description="consume only these subject filters (a worker's share of the stream, "
        "docs/deployment.md, Several workers); not with filter_subject",
    )

    @model_validator(mode="after")
    def _one_filter_kind(self) -> ConsumerConfig:
        if self.filter_subject is not None and self.filter_subjects:
            raise ValueError("set filter_subject or filter_subjects, not both")
        if len(set(self.filter_subjects)) != len(self.filter_subjects):
            raise ValueError("filter_subjects holds a subject twice")
        if any(not s.strip() for s in self.filter_subjects):
            raise ValueError("filter_subjects holds an empty subject")
        return self

    @property
    def filters(self) -> list[str]:
        """The subject filters this consumer takes: ``[">"]`` (every subject) when none is set."""
        if self.filter_subjects:
            return list(self.filter_subjects)
        return [self.filter_subject or ">"]


class EmbeddedNatsConfig(_Model):
    """The nats-server child process used when ``bus.url`` is not set."""

    binary: str | None = Field(
        None,
        description=(
            "nats-server executable; unset = $TIDELAKE_NATS_SERVER, <repo>/.cache/bin/nats-server "
            "(scripts/gotools), then the PATH"
        ),
    )
    host: Literal["127.0.0.1"] = Field("127.0.0.1", description="embedded server binds loopback")
    port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="unset = 4222 (monitoring 8222) when free, else a free port; 0 = always a "
        "free port; where it listens is recorded in <home>/bus.json",
    )
    store_dir: Path | None = Field(None, description="default: <home>/nats")
    sync_always: bool = Field(
        True,
        description="JetStream's sync_interval: always, an fsync before every PubAck; false = "
        "nats-server's default schedule (every 2 minutes: an OS crash can lose what was "
        "acknowledged since), for measurements only (docs/nats.md)",
    )


class KafkaSaslConfig(_Model):
    """SASL towards Kafka (with ``tls`` set: SASL_SSL, else SASL_PLAINTEXT). Secrets only
    from the environment or files."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="SASL mechanism the brokers enable"
    )
    username: str = Field(..., description="SASL user name")
    password: SecretStr | None = Field(
        None,
        description="env TIDELAKE_BUS__KAFKA__SASL__PASSWORD (capture kafka: "
        "TIDELAKE_CAPTURE__KAFKA__SASL__PASSWORD)",
    )
    password_file: Path | None = Field(None, description="file holding the SASL password")

    def resolved_password(self) -> str | None:
        return _secret(self.password, self.password_file)


class KafkaBusConfig(_Model):
    """``bus.kind: kafka``: the CDC log is one Kafka topic of one partition (docs/kafka.md)."""

    bootstrap_servers: str | None = Field(None, description="host:port[,host:port...] of Kafka")
    topic: str = Field(
        "tidelake.cdc",
        description="the CDC topic: one partition, its offset + 1 is the stream sequence",
    )
    dlq_topic: str = Field("tidelake.cdc.dlq", description="the dead-letter topic")
    group_id: str = Field(
        "tidelake-stager",
        description="the stagers' consumer group: its committed offset is what is staged",
    )
    replication_factor: int = Field(
        1, ge=1, description="replicas of the topics tidelake creates (3 on a real cluster)"
    )
    min_insync_replicas: int = Field(
        1, ge=1, description="replicas that must have a message before it is acknowledged"
    )
    retention_ms: int = Field(
        7 * 24 * 3600 * 1000, description="how long the CDC topic keeps messages; -1 = forever"
    )
    dlq_retention_ms: int = Field(
        30 * 24 * 3600 * 1000, description="how long the dead-letter topic keeps messages"
    )
    duplicate_window_s: float = Field(
        120,
        gt=0,
        description="a message carrying a Tidelake-Msg-Id stored this long or less after "
        "another with that id is a republished copy: skipped and counted (JetStream's "
        "Nats-Msg-Id window)",
    )
    tls: TlsConfig | None = Field(None, description="TLS towards the brokers; unset = plain")
    sasl: KafkaSaslConfig | None = Field(None, description="SASL towards the brokers; unset = none")


class BusConfig(_Model):
    """Where the CDC log is: NATS JetStream, an external server (``url``) or an embedded child
    process; or, with ``kind: kafka``, a Kafka topic (``bus.kafka``)."""

    kind: Literal["nats", "kafka"] = Field(
        "nats", description="nats: JetStream (default); kafka: a Kafka topic (docs/kafka.md)"
    )
    kafka: KafkaBusConfig = KafkaBusConfig()
    url: str | None = Field(
        None,
        description=(
            "nats://host:port, or several comma-separated (the nodes of a cluster); "
            "unset = embedded server"
        ),
    )
    monitor_url: str | None = Field(
        None,
        description=(
            "http://host:8222 of the server's monitoring port: `status` reads /varz there and "
            "warns unless JetStream runs with sync_interval: always (docs/nats.md)"
        ),
    )
    auth: AuthConfig = AuthConfig()
    tls: TlsConfig | None = Field(None, description="TLS towards the server; unset = plain")
    embedded: EmbeddedNatsConfig = EmbeddedNatsConfig()
    stream: StreamConfig = StreamConfig()
    dlq: DlqConfig = DlqConfig()
    consumer: ConsumerConfig = ConsumerConfig()
    connect_timeout_s: float = Field(5, gt=0, description="connect timeout per attempt")

    @model_validator(mode="after")
    def _filters_need_jetstream(self) -> BusConfig:
        if self.kind == "kafka" and self.consumer.filters != [">"]:
            # The Kafka stager reads its one partition whole: a worker's share of the
            # stream is a set of JetStream subjects.
            raise ValueError("consumer.filter_subject(s) need bus.kind: nats")
        return self


class RetentionConfig(_Model):
    """What happens to a staged batch once every table has passed it (lake/retention.py)."""

    mode: Literal["delete", "archive"] = Field(
        "delete", description="delete passed batches, or move them under archive_prefix"
    )
    archive_prefix: str = Field(
        "archive", description="archive mode: where passed batches go, under the staging root"
    )
    interval_s: float = Field(
        10.0, ge=0, description="retire passed batches at most this often (0: every round)"
    )

    @model_validator(mode="after")
    def _archive_prefix(self) -> RetentionConfig:
        parts = self.archive_prefix.strip("/").split("/")
        if not self.archive_prefix.strip("/") or parts[0] in ("manifests", "batches", "retired"):
            raise ValueError(
                f"archive_prefix {self.archive_prefix!r} must name a folder of its own"
            )
        return self


class TablesConfig(_Model):
    """Which source tables the stager admits (stage/admission.py, docs/names.md): a table it
    refuses is dead-lettered with the reason, never created in the lake."""

    allow: list[str] = Field(
        [], description="glob patterns over 'db.table' ids; when set, only matching tables"
    )
    deny: list[str] = Field([], description="glob patterns over 'db.table' ids; wins over allow")
    max_tables: int = Field(
        10_000, ge=1, description="tables the stager admits in all (new ones past it: DLQ)"
    )
    max_tables_per_database: int = Field(
        1_000, ge=1, description="tables the stager admits per source database"
    )


class StageConfig(_Model):
    """The stager: how batches are cut and where they are written."""

    root: str | None = Field(
        None, description="local path or s3://bucket/prefix; default <home>/staging"
    )
    max_events: int = Field(50_000, ge=1, description="cut a batch at this many messages")
    max_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="... or this many payload bytes")
    max_age_s: float = Field(1.0, gt=0, description="... or when its first message is this old")
    fetch_batch: int = Field(2_000, ge=1, description="messages asked for per pull request")
    pii: dict[str, dict[str, Literal["hash", "mask", "null"]]] = Field(
        {},
        description=(
            "per table 'db.table': column -> hash (keyed HMAC-SHA256), mask or null, applied "
            "before anything is staged; primary-key columns cannot be masked (stage/pii.py)"
        ),
    )
    pii_key: SecretStr | None = Field(
        None, description="env TIDELAKE_STAGE__PII_KEY: the HMAC key of stage.pii 'hash'"
    )
    retention: RetentionConfig = RetentionConfig()
    tables: TablesConfig = TablesConfig()

    @model_validator(mode="after")
    def _pii_rules(self) -> StageConfig:
        for table in self.pii:
            database, sep, name = table.partition(".")
            if not sep or not database or not name:
                raise ValueError(f"pii: {table!r} is not a 'database.table' name")
        return self


class SparkConfig(_Model):
    """The one Spark session of the ingest (lake/spark.py)."""

    master: str = Field("local[*]", description="Spark master URL (spark://..., yarn, ...)")
    driver_memory: str = Field("3g", description="spark.driver.memory")
    shuffle_partitions: int = Field(4, ge=1, description="spark.sql.shuffle.partitions")
    jar_cache: Path | None = Field(
        None,
        description="jar directory `tidelake setup` fills (default: TIDELAKE_JAR_CACHE, a "
        "checkout's .cache/jars, else $XDG_CACHE_HOME/tidelake/jars)",
    )
    conf: dict[str, str] = Field({}, description="extra Spark settings, applied last")


class S3Config(_Model):
    """S3-compatible object storage (AWS S3, MinIO, ...) behind ``s3://`` and ``s3a://`` roots.

    One section for every client: the staging storage (boto3), the Hudi writer (Hadoop S3A in
    the Spark JVM) and the JVM-free reader (hudi-rs). Without keys, each client uses the
    standard AWS credential chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles,
    web identity, instance and container roles). docs/object-storage.md.
    """

    endpoint: str | None = Field(
        None, description="S3 API URL, e.g. http://minio:9000; unset = AWS S3 of the region"
    )
    region: str = Field("us-east-1", description="region requests are signed for")
    path_style: bool = Field(
        False, description="bucket in the URL path (MinIO, most S3-compatible servers)"
    )
    access_key: SecretStr | None = Field(
        None, description="env TIDELAKE_STORAGE__S3__ACCESS_KEY; unset = AWS credential chain"
    )
    access_key_file: Path | None = Field(None, description="file holding the access key id")
    secret_key: SecretStr | None = Field(None, description="env TIDELAKE_STORAGE__S3__SECRET_KEY")
    secret_key_file: Path | None = Field(None, description="file holding the secret key")
    max_attempts: int = Field(
        5, ge=1, le=20, description="attempts per request (throttling, transient errors)"
    )

    @model_validator(mode="after")
    def _check(self) -> S3Config:
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must be an http:// or https:// URL, not {self.endpoint!r}")
        has_key = self.access_key is not None or self.access_key_file is not None
        has_secret = self.secret_key is not None or self.secret_key_file is not None
        if has_key != has_secret:
            raise ValueError(
                "set both access_key and secret_key (or their *_file), or neither to use the "
                "AWS credential chain"
            )
        return self

    def resolved_credentials(self) -> tuple[str, str] | None:
        """``(access key id, secret key)`` when configured; None = the AWS credential chain."""
        key = _secret(self.access_key, self.access_key_file)
        secret = _secret(self.secret_key, self.secret_key_file)
        if key is None or secret is None:
            return None
        return key, secret


class StorageConfig(_Model):
    """Object storage shared by the staging area and the lake (local roots need none)."""

    s3: S3Config = S3Config()


class TableServicesConfig(_Model):
    """Hudi table services the writer runs itself: compaction, cleaning, file sizing.

    docs/deployment.md (table services) explains each and what to expect on disk.
    """

    compaction: Literal["inline", "external"] = Field(
        "inline",
        description="MERGE_ON_READ: compact inside the writer, or leave it to an external Hudi "
        "compactor (which then needs a lock provider in lake.hudi_options)",
    )
    compaction_delta_commits: int = Field(
        5, ge=1, description="MERGE_ON_READ: compact a file group after this many delta commits"
    )
    clean_retain_commits: int = Field(
        10,
        ge=1,
        description="cleaning keeps the file versions the latest N commits read (time travel, "
        "long queries); older versions are deleted after each commit",
    )
    max_file_mb: int = Field(120, ge=1, description="target size of a base (Parquet) file")
    small_file_mb: int = Field(
        100, ge=0, description="base files below this receive new inserts (file sizing); 0 = off"
    )

    @model_validator(mode="after")
    def _sizes(self) -> TableServicesConfig:
        if self.small_file_mb >= self.max_file_mb:
            raise ValueError("small_file_mb must be below max_file_mb")
        return self


class CatalogConfig(_Model):
    """Where the lake's tables are registered (lake/catalog.py)."""

    hive_metastore_uri: str | None = Field(
        None,
        description="thrift://host:9083: register tables in this Hive metastore; unset = "
        "Spark's in-memory catalog, rebuilt from the lake at each session start",
    )


class TableDefinitionConfig(_Model):
    """What tidelake is told about one source table, for producers whose messages do not say
    it (Debezium Server sends no key; TiCDC's default canal-json has ``decimal`` without its
    precision and scale, ENUM indexes without labels)."""

    primary_key: list[str] = Field(
        [], description="record-key columns in key order (a producer's key list wins if sent)"
    )
    columns: dict[str, str] = Field(
        {},
        description="column → source type as the source declares it ('decimal(12,2)', "
        "\"enum('new','paid')\", 'numeric', 'timestamp(3) without time zone'); overrides "
        "the types a message carries, never a column the table already stores another way",
    )


class SourceCatalogConfig(_Model):
    """A source database tidelake may read its tables' definitions from (read only)."""

    dsn: str | None = Field(
        None,
        description="mysql://user@host:port/ (MySQL, MariaDB, TiDB) or "
        "postgresql://user@host:port/dbname: column types and primary keys are read from "
        "information_schema / pg_catalog for tables the stream does not define",
    )
    password: SecretStr | None = Field(
        None, description="env TIDELAKE_LAKE__SOURCE_CATALOG__PASSWORD"
    )
    password_file: Path | None = Field(None, description="file holding the password")

    def resolved_password(self) -> str | None:
        return _secret(self.password, self.password_file)


class LakeConfig(_Model):
    """The Hudi lake: where tables live and how they are written."""

    root: str | None = Field(None, description="local path or s3a://...; default <home>/lake")
    table_type: Literal["COPY_ON_WRITE", "MERGE_ON_READ"] = Field(
        "COPY_ON_WRITE", description="Hudi table type of new tables"
    )
    table_version: Literal[6, 8, 9] = Field(
        9,
        description="Hudi table version of new tables (an existing table keeps its own): 9 is "
        "Hudi 1.1's; 6 for readers still on Hudi 0.x (docs/query-engines.md says which engine "
        "reads which)",
    )
    partition_by: dict[str, list[str]] = Field(
        {}, description="per table 'db.table': partition columns; none by default"
    )
    hudi_options: dict[str, str] = Field({}, description="extra Hudi write options, all tables")
    record_index_from_mb: float = Field(
        64,
        ge=0,
        description="an unpartitioned table is indexed by Hudi's SIMPLE index, without a "
        "metadata table, until its newest base files reach this size; from then on by the "
        "metadata table's record index (0: from its first commit)",
    )
    record_index_file_groups: int = Field(
        2,
        ge=1,
        le=10_000,
        description="metadata-table file groups of a small table's record index (fixed when "
        "the index is built; a large table gets more; more spread lookups over executors)",
    )
    table_services: TableServicesConfig = TableServicesConfig()
    source_timezone: str = Field(
        "UTC", description="zone of the source's TIMESTAMP / DATETIME text (IANA name)"
    )
    spark: SparkConfig = SparkConfig()
    state_dir: Path | None = Field(
        None,
        description="ingest state (commits.jsonl, cursor, paused, heartbeat, logs); default "
        "<lake>/_tidelake, or <home>/state when the lake is on object storage",
    )
    catalog: CatalogConfig = CatalogConfig()
    tables: dict[str, TableDefinitionConfig] = Field(
        {}, description="per table 'db.table' (PostgreSQL 'schema.table'): key and column types"
    )
    source_catalog: SourceCatalogConfig = SourceCatalogConfig()


class IngestConfig(_Model):
    """The ingest loop."""

    interval_s: float = Field(1.0, gt=0, description="continuous mode: pause when idle")
    max_batch_events: int = Field(500_000, ge=1, description="events merged into one commit")
    warm_up: bool = Field(
        True, description="continuous mode: warm the JVM's Hudi write path before reporting ready"
    )
    parallel_tables: int = Field(
        4, ge=1, le=64, description="tables committed at once (one Spark job each)"
    )
    tables: list[str] = Field(
        [],
        description="glob patterns over 'db.table' ids: the tables this ingest owns when "
        "several workers write one lake (docs/deployment.md, Several workers); it never "
        "writes, drops or renames another; empty = every table",
    )

    def owns(self, table_id: str) -> bool:
        """Whether this ingest may write ``table_id`` (``ingest.tables``; empty: every table)."""
        return not self.tables or any(fnmatch.fnmatchcase(table_id, p) for p in self.tables)


class KafkaSourceConfig(_Model):
    """``tidelake capture kafka``: TiCDC or Debezium topics in Kafka into JetStream
    (docs/kafka.md)."""

    bootstrap_servers: str | None = Field(None, description="host:port[,host:port...] of Kafka")
    topics: list[str] = Field([], description="topics to read (or topic_pattern)")
    topic_pattern: str | None = Field(
        None, description="a regular expression: every matching topic is read (or topics)"
    )
    group_id: str = Field(
        "tidelake-capture",
        description="Kafka consumer group: its committed offsets are what was stored in JetStream",
    )
    order: Literal["watermark", "partition"] = Field(
        "watermark",
        description="watermark: TiCDC canal-json with enable-tidb-extension=true, merged across "
        "partitions by commitTs once every partition's TIDB_WATERMARK passed it; partition: "
        "each partition in offset order (Debezium; a topic of one partition)",
    )
    subject_prefix: str = Field(
        "cdc.kafka", description="JetStream subject of a message: <subject_prefix>.<topic>"
    )
    commit_interval_s: float = Field(
        1.0, gt=0, description="commit the stored offsets to Kafka at most this often"
    )
    tls: TlsConfig | None = Field(None, description="TLS towards the brokers; unset = plain")
    sasl: KafkaSaslConfig | None = Field(None, description="SASL towards the brokers; unset = none")


class RestSourceConfig(_Model):
    """``tidelake capture rest``: an HTTP API's records, polled by an ``updated_since`` cursor,
    into the bus as one table (docs/rest-source.md)."""

    url: str | None = Field(None, description="the API's list endpoint (http:// or https://)")
    database: str | None = Field(None, description="database part of the table the records become")
    table: str | None = Field(None, description="table the records become (<database>.<table>)")
    primary_key: list[str] = Field(["id"], min_length=1, description="fields keying a record")
    cursor_field: str = Field(
        "updated_at", description="record field that grows with every change (the cursor)"
    )
    cursor_type: Literal["timestamp", "integer"] = Field(
        "timestamp",
        description="timestamp: ISO-8601 text (no zone = UTC), position = nanoseconds since "
        "1970; integer: a non-negative integer (JSON number or digits), position = the value",
    )
    cursor_param: str = Field(
        "updated_since",
        description="query parameter given the saved cursor; the API must return records whose "
        "cursor is greater than or equal to it",
    )
    initial_cursor: str | None = Field(
        None, description="cursor of the first poll; unset = no cursor parameter (every record)"
    )
    pagination: Literal["page", "next_link", "none"] = Field(
        "page",
        description="page: page_param/limit_param until a page holds fewer than limit records; "
        "next_link: follow next_field in the body, else the Link header's rel=next; none: one "
        "request",
    )
    page_param: str = Field("page", description="pagination page: the page number parameter")
    first_page: int = Field(1, ge=0, description="pagination page: number of the first page")
    limit_param: str = Field("limit", description="page size parameter ('' = not sent)")
    limit: int = Field(100, ge=1, description="records asked per page")
    max_pages: int = Field(
        10_000, ge=1, description="pages one poll follows at most (else an error)"
    )
    next_field: str | None = Field(
        "next", description="pagination next_link: dotted path of the next page's URL in the body"
    )
    records_path: str | None = Field(
        "data", description="dotted path of the record list in the body; unset = the body itself"
    )
    params: dict[str, str] = Field({}, description="further query parameters of every poll")
    headers: dict[str, str] = Field({}, description="further request headers (no secrets)")
    token: SecretStr | None = Field(
        None, description="env TIDELAKE_CAPTURE__REST__TOKEN: sent as Authorization: Bearer"
    )
    token_file: Path | None = Field(None, description="file holding the bearer token")
    interval_s: float = Field(10.0, gt=0, description="seconds between the starts of two polls")
    timeout_s: float = Field(30.0, gt=0, description="timeout of one HTTP request")
    give_up_s: float = Field(
        300.0,
        gt=0,
        description="how long one request is retried (connection errors, 5xx, 429) before the "
        "poller stops with an error",
    )
    deleted_field: str | None = Field(
        None, description="boolean record field meaning a soft delete: true = a DELETE event"
    )
    column_types: dict[str, str] = Field(
        {},
        description="field -> source SQL type ('decimal(12,2)', 'bigint', 'timestamp', "
        "'boolean', 'json'); a field not named is 'longtext': its exact JSON text",
    )
    subject_prefix: str = Field(
        "cdc", description="JetStream subject of a record: <subject_prefix>.<database>.<table>"
    )
    state_file: Path | None = Field(
        None, description="saved cursor; default: <home>/capture/rest-<database>.<table>.json"
    )

    def resolved_token(self) -> str | None:
        return _secret(self.token, self.token_file)

    def state_path(self, home: Path, name: str | None = None) -> Path:
        """Where the cursor is saved: ``state_file``, else, for the source ``sources.<name>``,
        ``<home>/capture/sources/<name>.cursor.json``, else (``capture.rest``) one file per
        table under home."""
        if self.state_file is not None:
            return self.state_file.resolve()
        if name is not None:
            return (home / "capture" / "sources" / f"{name}.cursor.json").resolve()
        file = f"rest-{self.database}.{self.table}.json".replace("/", "_")
        return (home / "capture" / file).resolve()


class RestNamedSourceConfig(RestSourceConfig):
    """``sources.<name>`` of kind ``rest``: a REST API polled as ``capture.rest`` is, run by
    ``tidelake source run NAME`` and supervised by ``tidelake run`` (docs/rest-source.md,
    Managed sources)."""

    kind: Literal["rest"] = Field(
        "rest", description="the kind of source: rest (an HTTP API polled by its cursor)"
    )
    url: str = Field(..., description="the API's list endpoint (http:// or https://)")
    database: str = Field(..., min_length=1, description="database part of the records' table")
    table: str = Field(..., min_length=1, description="table the records become")
    paused: bool = Field(False, description="a paused source polls nothing; its cursor is kept")
    token: SecretStr | None = Field(
        None, description="env TIDELAKE_SOURCES__<NAME>__TOKEN: sent as Authorization: Bearer"
    )
    give_up_s: float = Field(
        300.0,
        gt=0,
        description="how long one request is retried (connection errors, 5xx, 429) before the "
        "poll counts as failed (the source polls again at its next interval)",
    )
    state_file: Path | None = Field(
        None, description="saved cursor; default: <home>/capture/sources/<name>.cursor.json"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {url!r}")
        return url


#: A source of ``sources.<name>``, told apart by ``kind`` (only ``rest`` today).
SourceConfig = RestNamedSourceConfig


class CaptureConfig(_Model):
    """``tidelake capture``: change capture from MySQL/MariaDB or PostgreSQL (docs/capture.md)."""

    source: str | None = Field(
        None, description="mysql://user@host:port/ or postgresql://user@host:port/dbname"
    )
    password: SecretStr | None = Field(None, description="env TIDELAKE_CAPTURE__PASSWORD")
    password_file: Path | None = Field(None, description="file holding the source password")
    tables: list[str] = Field(
        [], description="'db.table' or 'db.*' (PostgreSQL: 'schema.table'); empty = all"
    )
    snapshot: Literal["initial", "incremental", "never"] = Field(
        "initial",
        description="at the first start: read existing rows first in one consistent snapshot "
        "(initial), read them in parallel chunks while streaming from the log's end "
        "(incremental: docs/capture.md, Snapshots on demand), or stream changes only (never)",
    )
    chunk_rows: int = Field(10_000, ge=1, description="rows per snapshot chunk (keyset reads)")
    snapshot_workers: int = Field(
        4,
        ge=1,
        le=64,
        description="connections reading chunks of an incremental snapshot in parallel (a table "
        "added to capture.tables, `tidelake capture snapshot`: docs/capture.md, Snapshots on "
        "demand)",
    )
    server_id: int = Field(
        4_000_001, ge=1, description="MySQL replica server_id (unique on the source)"
    )
    slot: str = Field("tidelake", description="PostgreSQL logical replication slot")
    publication: str = Field("tidelake", description="PostgreSQL publication")
    heartbeat_s: float = Field(
        10.0, gt=0, description="PostgreSQL: confirm idle WAL at least this often"
    )
    outbox: bool = Field(False, description="PostgreSQL: capture through a transactional outbox")
    position_file: Path | None = Field(None, description="default: <home>/capture/position.json")
    position_mode: Literal["auto", "gtid", "file"] = Field(
        "auto",
        description="MySQL/MariaDB: save the GTID position besides binlog file/offset (gtid), "
        "file/offset only (file), or GTID when the server writes GTIDs (auto: MariaDB always, "
        "MySQL with gtid_mode=ON); a GTID position lets the capture resume on another server "
        "(docs/capture.md, Positions and failover)",
    )
    failover_sources: list[str] = Field(
        [],
        description="MySQL/MariaDB: other servers of the source's replication topology "
        "('mysql://host:port/'; user and password default to capture.source's), tried in order "
        "when the server in use is unreachable; the capture resumes there by GTID",
    )
    failover_timeout_s: float = Field(
        60.0,
        gt=0,
        description="MySQL/MariaDB: how long a lost source and capture.failover_sources are "
        "retried before the capture stops with an error",
    )
    lag_interval_s: float = Field(
        5.0,
        gt=0,
        description="seconds between two lag probes on a connection of their own (slot lag and "
        "retained WAL, binlog bytes/GTIDs behind): status, metrics, alerts (docs/metrics.md)",
    )
    keys: dict[str, list[str]] = Field(
        {},
        description="'db.table' -> key columns, for a table without a primary key (or to "
        "override it): used by snapshot, stream and lake (docs/capture.md, Tables without a "
        "primary key); PostgreSQL also needs REPLICA IDENTITY FULL or USING INDEX on it",
    )
    keyless: Literal["skip", "full_row"] = Field(
        "skip",
        description="a table without a primary key and not in capture.keys: skip (reported in "
        "status) or full_row (every column is the key; identical rows collapse into one)",
    )
    ddl_log: bool = Field(
        False,
        description="PostgreSQL: install event triggers (superuser, once) that log CREATE, DROP "
        "and RENAME of tables into tidelake.ddl_log, streamed with the rows, so dropped and "
        "renamed tables reach the lake (docs/capture.md, PostgreSQL DDL)",
    )
    kafka: KafkaSourceConfig = KafkaSourceConfig()
    rest: RestSourceConfig = RestSourceConfig()

    def resolved_password(self) -> str | None:
        return _secret(self.password, self.password_file)


class ApiConfig(_Model):
    """``tidelake serve``."""

    host: str = Field("127.0.0.1", description="bind address; off loopback needs a token")
    port: int = Field(8321, ge=1, le=65535, description="HTTP port")
    token: SecretStr | None = Field(None, description="env TIDELAKE_API__TOKEN")
    allowed_hosts: list[str] = Field(
        [],
        description="Host header names the API answers besides the bind address, localhost, "
        "127.0.0.1 and [::1] (a DNS-rebinding page sends its own name): 'api.example.com', "
        "'*.example.com', or '*' for any (only behind a proxy that checks Host itself)",
    )

    @property
    def on_loopback(self) -> bool:
        """Whether :attr:`host` is a loopback address (the API may then run without a token)."""
        return self.host in ("127.0.0.1", "localhost", "::1")

    def require_token_to_listen(self) -> None:
        """Raise :class:`ConfigError` unless this API may listen: off loopback it needs a token.

        Called where the API listens (``tidelake serve``, and ``run`` when it starts the API),
        not at config load: one config file serves every process of a deployment, and the
        stager, capture and ingest never listen, so they must start without the API's secret
        (which only the API process is given)."""
        if not self.on_loopback and self.token is None:
            raise ConfigError(
                f"api: a bearer token is required to serve on {self.host} (off loopback): set "
                "TIDELAKE_API__TOKEN in this process's environment, or bind api.host to 127.0.0.1"
            )

    @model_validator(mode="after")
    def _token_off_loopback(self) -> ApiConfig:
        # An empty TIDELAKE_API__TOKEN reads as "no token": refused outright rather than
        # served open, whatever the bind address (an operator who set it meant a token).
        # A missing token off loopback is refused where the API listens
        # (require_token_to_listen), not here: every verb loads this config.
        if self.token is not None and not self.token.get_secret_value().strip():
            raise ValueError("TIDELAKE_API__TOKEN is empty: set a token or unset the variable")
        for pattern in self.allowed_hosts:
            # Starlette's TrustedHostMiddleware asserts on other wildcards; say it here.
            if "*" in pattern[1:] or (
                pattern.startswith("*") and pattern != "*" and not pattern.startswith("*.")
            ):
                raise ValueError(f"api.allowed_hosts: {pattern!r}: a wildcard is '*.domain' or '*'")
        return self


class MetricsConfig(_Model):
    """Each long-running process's own ``GET /metrics`` and ``GET /healthz`` (docs/metrics.md).

    ``stage``, ``ingest`` (continuous), ``capture`` and ``run`` serve them on ``port`` when it
    is set; ``serve`` has its own ``/metrics`` on the API port."""

    host: str = Field("127.0.0.1", description="bind address of the metrics/health endpoint")
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="serve /metrics and /healthz on this port (9464 in the shipped deployments); "
        "unset = off; under `run` its stage children use port+1, port+2, ...",
    )
    healthy_within_s: float = Field(
        300.0,
        gt=0,
        description="/healthz answers 503 once the process's main loop has not turned for this "
        "long; above the longest legitimate step (an ingest round's Hudi commit, JVM warm-up)",
    )


class TracingConfig(_Model):
    """OpenTelemetry traces from publish to staging to the Hudi commit (docs/tracing.md).

    Off by default: then nothing of the OpenTelemetry SDK is imported and no header is added.
    On, each process exports its spans by OTLP/HTTP (protobuf) to ``otlp_endpoint`` as the
    service ``<service_name>-capture``, ``-stager``, ``-ingest`` or ``-route``."""

    enabled: bool = Field(False, description="export traces (needs tidelake[tracing])")
    otlp_endpoint: str = Field(
        "http://127.0.0.1:4318",
        description="OTLP/HTTP base URL of the collector; /v1/traces is appended",
    )
    service_name: str = Field(
        "tidelake",
        min_length=1,
        description="prefix of each process's service.name: <prefix>-capture, -stager, -ingest, "
        "-route",
    )
    sample_ratio: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="share of new traces recorded (publish spans without a parent, stage, "
        "ingest and route spans: each starts one); a child span keeps its parent's decision",
    )
    max_links: int = Field(
        128,
        ge=0,
        le=1024,
        description="most span links a stage, ingest or route span carries (the first distinct "
        "contexts of its batch); the rest are counted in tidelake.links.unlinked, not linked",
    )
    otlp_headers: SecretStr | None = Field(
        None,
        description="request headers of the export, key=value,key=value (OTEL_EXPORTER_OTLP_"
        "HEADERS format); env TIDELAKE_TRACING__OTLP_HEADERS",
    )
    otlp_headers_file: Path | None = Field(None, description="file holding otlp_headers")
    timeout_s: float = Field(10.0, gt=0, description="timeout of one export request")

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"tracing.otlp_endpoint: {url!r} is not an http(s) URL")
        return url.rstrip("/")

    def resolved_headers(self) -> dict[str, str]:
        """The export's headers from ``otlp_headers`` or its file (``k=v,k=v``)."""
        text = _secret(self.otlp_headers, self.otlp_headers_file) or ""
        out: dict[str, str] = {}
        for part in text.split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ConfigError("tracing.otlp_headers: expected key=value[,key=value]")
            out[key.strip()] = value.strip()
        return out


class RunConfig(_Model):
    """``tidelake run``: the local pipeline on this machine (pipeline/run.py)."""

    serve: bool = Field(
        False,
        description="also start `tidelake serve` (API and dashboard on api.host:api.port) as a "
        "supervised child, as `run --serve` does",
    )


class PostgresSinkConfig(_Model):
    """A route into PostgreSQL: batched upserts and deletes, one transaction per batch
    (route/sinks/postgres.py)."""

    kind: Literal["postgres"]
    dsn: str = Field(
        ..., description="libpq URI or key=value string of the target database, without password"
    )
    password: SecretStr | None = Field(
        None, description="env TIDELAKE_ROUTES__<ROUTE>__SINK__PASSWORD"
    )
    password_file: Path | None = Field(None, description="file holding the password")
    target_schema: str | None = Field(
        None,
        description="schema of the tables the sink creates; unset = the source database's name",
    )

    def password_value(self) -> str | None:
        return _secret(self.password, self.password_file)


class RedisSinkConfig(_Model):
    """A route into Redis: the latest row of each key (route/sinks/redis.py)."""

    kind: Literal["redis"]
    url: str = Field("redis://127.0.0.1:6379/0", description="redis:// or rediss:// URL")
    password: SecretStr | None = Field(
        None, description="env TIDELAKE_ROUTES__<ROUTE>__SINK__PASSWORD"
    )
    password_file: Path | None = Field(None, description="file holding the password")
    key_prefix: str = Field("tidelake", description="first part of every key the sink writes")
    ttl_s: int | None = Field(
        None, gt=0, description="expire a row's key this long after its last change; unset = never"
    )

    def password_value(self) -> str | None:
        return _secret(self.password, self.password_file)


class WebhookSinkConfig(_Model):
    """A route to an HTTP endpoint: batched, signed JSON POSTs (route/sinks/webhook.py)."""

    kind: Literal["webhook"]
    url: str = Field(..., description="the endpoint the batches are POSTed to")
    signing_key: SecretStr | None = Field(
        None,
        description="HMAC-SHA256 key of the signature header; env "
        "TIDELAKE_ROUTES__<ROUTE>__SINK__SIGNING_KEY",
    )
    signing_key_file: Path | None = Field(None, description="file holding the signing key")
    timeout_s: float = Field(10.0, gt=0, description="one POST's timeout")
    max_tries: int = Field(
        5, ge=1, description="POSTs of one batch before its changes are dead-lettered"
    )
    backoff_s: float = Field(0.5, gt=0, description="first wait between tries (doubled, jittered)")
    max_backoff_s: float = Field(30.0, gt=0, description="longest wait between tries")
    headers: dict[str, str] = Field({}, description="extra request headers")

    def signing_key_value(self) -> str | None:
        return _secret(self.signing_key, self.signing_key_file)


class OpenSearchSinkConfig(_Model):
    """A route into OpenSearch: the latest row of each key as a document
    (route/sinks/opensearch.py)."""

    kind: Literal["opensearch"]
    url: str = Field("http://127.0.0.1:9200", description="http:// or https:// URL of the REST API")
    username: str | None = Field(None, description="basic-auth user; unset = no auth")
    password: SecretStr | None = Field(
        None, description="env TIDELAKE_ROUTES__<ROUTE>__SINK__PASSWORD"
    )
    password_file: Path | None = Field(None, description="file holding the password")
    index_prefix: str = Field(
        "tidelake-",
        pattern=r"^[a-z0-9][a-z0-9._-]*$",
        description="first part of every index and alias name the sink writes (lower case)",
    )
    timeout_s: float = Field(30.0, gt=0, description="one request's timeout")

    def password_value(self) -> str | None:
        return _secret(self.password, self.password_file)


SinkConfig = PostgresSinkConfig | RedisSinkConfig | WebhookSinkConfig | OpenSearchSinkConfig


class RouteConfig(_Model):
    """One route: which changes of the stream, shaped how, into which sink (docs/routes.md).
    Each route is its own durable JetStream consumer (``route-<name>``)."""

    tables: list[str] = Field(
        ["*"], description="database.table patterns (shell style: shop.*, *.orders) to take"
    )
    ops: list[Literal["insert", "update", "delete"]] = Field(
        ["insert", "update", "delete"], description="source operations to take"
    )
    where: str | None = Field(
        None,
        description="SQL condition over a row's columns (status = 'paid' AND amount > 10); an "
        "UPDATE is taken when its new or old row matches (a row leaving the condition is "
        "deleted from the sink), a DELETE when its old row matches",
    )
    compute: dict[str, str] = Field(
        {},
        description="column → SQL expression over the source row (amount * qty, "
        "UPPER(code) || '-' || id, COALESCE(a, b), CASE WHEN … END): a column added before "
        "mask, drop and rename",
    )
    drop: list[str] = Field([], description="columns left out of the sink")
    rename: dict[str, str] = Field({}, description="column → name in the sink")
    mask: dict[str, Literal["hash", "mask"]] = Field(
        {},
        description="column → hash (keyed HMAC, stage.pii_key) or mask (fixed text), as the "
        "stage's personal-data rules",
    )
    keys: dict[str, list[str]] = Field(
        {},
        description="database.table → primary-key columns, for producers that send no key",
    )
    batch_size: int = Field(500, ge=1, description="changes per sink write at most")
    paused: bool = Field(False, description="a paused route consumes nothing")
    sink: SinkConfig = Field(
        ...,
        discriminator="kind",
        description="the destination: kind postgres, redis, webhook or opensearch, with its "
        "settings below",
    )


class ViewConfig(_Model):
    """One materialized view over lake tables, kept as a Hudi table of its own after each
    ingest round (docs/views.md)."""

    kind: Literal["aggregate", "lifecycle"] = Field(
        "aggregate",
        description="aggregate: a GROUP BY over one lake table or a join of two (sql), kept "
        "from the tables' change logs; lifecycle: the states each row of a table passes "
        "through (table, state_column), from the changes as they are applied",
    )
    sql: str | None = Field(
        None,
        description="aggregate: SELECT over one lake table (db.table), or two joined by one "
        "INNER or LEFT JOIN ON equal columns: plain columns in GROUP BY, COUNT(*), "
        "COUNT/SUM/MIN/MAX of a column, an optional WHERE",
    )
    table: str | None = Field(None, description="lifecycle: the lake table (db.table)")
    state_column: str | None = Field(
        None, description="lifecycle: the column holding the row's state (status)"
    )
    description: str = Field("", description="what the view is for, shown by `view list`")
    paused: bool = Field(False, description="a paused view is not updated (status shows it)")

    @model_validator(mode="after")
    def _shape(self) -> ViewConfig:
        if self.kind == "aggregate" and not self.sql:
            raise ValueError("an aggregate view needs sql")
        if self.kind == "lifecycle" and not (self.table and self.state_column):
            raise ValueError("a lifecycle view needs table and state_column")
        return self


class Config(_Model):
    """The whole tidelake configuration."""

    home: Path = Field(
        default_factory=lambda: default_home(os.environ),
        description="base directory of embedded defaults (bus store, staging, lake, bus.json); "
        "--home or TIDELAKE_HOME, else $XDG_DATA_HOME/tidelake, else ~/.local/share/tidelake",
        json_schema_extra={"shown_default": "~/.local/share/tidelake"},
    )
    bus: BusConfig = BusConfig()
    storage: StorageConfig = StorageConfig()
    stage: StageConfig = StageConfig()
    lake: LakeConfig = LakeConfig()
    ingest: IngestConfig = IngestConfig()
    api: ApiConfig = ApiConfig()
    capture: CaptureConfig = CaptureConfig()
    run: RunConfig = RunConfig()
    metrics: MetricsConfig = MetricsConfig()
    tracing: TracingConfig = TracingConfig()
    routes: dict[str, RouteConfig] = Field(
        {}, description="name → route: the stream's changes into other sinks (docs/routes.md)"
    )
    sources: dict[str, SourceConfig] = Field(
        {},
        description="name → source: an HTTP API polled into the bus, each its own process "
        "under `tidelake run` (docs/rest-source.md, Managed sources)",
    )
    views: dict[str, ViewConfig] = Field(
        {},
        description="name → materialized view over the lake, queryable as views.<name> "
        "(docs/views.md)",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="structlog level of every stage"
    )
    log_format: Literal["console", "json"] = Field(
        "console",
        description="logs on stderr: console (key=value lines for a person) or json (one JSON "
        "object per line, for Loki, Elasticsearch, journald and the like)",
    )

    @model_validator(mode="after")
    def _worker_names_its_tables(self) -> Config:
        if self.bus.consumer.filter_subjects and not self.ingest.tables:
            # Empty means every table: this worker's ingest would apply a DROP DATABASE to
            # the other workers' tables too (docs/deployment.md, Several workers).
            raise ValueError(
                "bus.consumer.filter_subjects makes this a worker with a share of the stream: "
                "name its tables in ingest.tables as well (empty means every table)"
            )
        return self

    @field_validator("routes")
    @classmethod
    def _route_names(cls, routes: dict[str, RouteConfig]) -> dict[str, RouteConfig]:
        for name in routes:
            if not ROUTE_NAME.fullmatch(name):
                raise ValueError(
                    f"route name {name!r}: lower-case letters, digits, '-' and '_', "
                    "starting with a letter (it names a JetStream consumer)"
                )
        return routes

    @field_validator("sources")
    @classmethod
    def _source_names(cls, sources: dict[str, SourceConfig]) -> dict[str, SourceConfig]:
        for name in sources:
            if not SOURCE_NAME.fullmatch(name):
                raise ValueError(
                    f"source name {name!r}: lower-case letters, digits, '-' and '_', "
                    "starting with a letter (it names a process and a cursor file)"
                )
        return sources

    @field_validator("views")
    @classmethod
    def _view_names(cls, views: dict[str, ViewConfig]) -> dict[str, ViewConfig]:
        for name in views:
            if not VIEW_NAME.fullmatch(name):
                raise ValueError(
                    f"view name {name!r}: lower-case letters, digits and '_', starting with a "
                    "letter (it names a table: views.<name>)"
                )
        return views

    @field_validator("home")
    @classmethod
    def _home_expanded(cls, home: Path) -> Path:
        return home.expanduser()

    @property
    def stage_root(self) -> str:
        return self.stage.root or str((self.home / "staging").resolve())

    @property
    def lake_root(self) -> str:
        return self.lake.root or str((self.home / "lake").resolve())

    @property
    def lake_state_dir(self) -> Path:
        """The ingest's own files: ``lake.state_dir``, else ``<lake>/_tidelake`` for a local
        lake, else ``<home>/state`` (object storage has no append and no rename)."""
        if self.lake.state_dir is not None:
            return self.lake.state_dir.resolve()
        root = self.lake_root
        if root.startswith("file://"):
            return Path(root[len("file://") :]) / "_tidelake"
        if "://" in root:
            return (self.home / "state").resolve()
        return Path(root) / "_tidelake"

    @property
    def capture_position_file(self) -> Path:
        return (self.capture.position_file or self.home / "capture" / "position.json").resolve()

    @property
    def nats_store_dir(self) -> Path:
        return (self.bus.embedded.store_dir or self.home / "nats").resolve()

    def masked(self) -> dict[str, Any]:
        """The effective config as plain data, secrets shown as ``**********``."""
        return self.model_dump(mode="json")


def default_home(environ: Mapping[str, str]) -> Path:
    """The home when neither the config nor ``TIDELAKE_HOME`` (nor ``--home``) names one: the
    XDG data directory, ``$XDG_DATA_HOME/tidelake``, else ``~/.local/share/tidelake`` — one
    absolute place per user, so every verb run from any directory finds the same pipeline and
    none leaves a ``.tidelake`` wherever it was started."""
    xdg = environ.get("XDG_DATA_HOME", "").strip()
    # The XDG spec: a relative $XDG_DATA_HOME is invalid and ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "tidelake"
    home = environ.get("HOME", "").strip()
    base = Path(home) if home else Path.home()
    return base / ".local" / "share" / "tidelake"


def _secret(value: SecretStr | None, path: Path | None) -> str | None:
    if value is not None:
        return value.get_secret_value()
    if path is not None:
        return path.read_text().strip()
    return None


def _reject_secrets_in_file(data: Any, path: str = "") -> None:
    if isinstance(data, dict):
        for k, v in data.items():
            where = f"{path}.{k}" if path else str(k)
            if k in SECRET_FIELDS and v is not None:
                env = ENV_PREFIX + where.upper().replace(".", "__")
                raise ConfigError(
                    f"{where}: secrets are not read from the config file; set {env} or use {k}_file"
                )
            _reject_secrets_in_file(v, where)


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sections = set(Config.model_fields)
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        keys = name[len(ENV_PREFIX) :].lower().split("__")
        if keys[0] not in sections:
            # Not a setting: TIDELAKE_CONFIG, TIDELAKE_JAR_CACHE, the set-up script's
            # TIDELAKE_SETUP_* switches and the like belong to other tools.
            continue
        node = out
        for k in keys[:-1]:
            nxt = node.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"{name}: conflicts with another override")
            node = nxt
        # Secrets and text settings stay strings as written (`TIDELAKE_API__HOST=::` is an
        # address, not a YAML mapping); everything else is a YAML scalar (numbers, booleans,
        # lists).
        if keys[-1] in SECRET_FIELDS:
            node[keys[-1]] = raw
        elif _is_text_setting(keys):
            # YAML's null still unsets an optional text setting (`TIDELAKE_BUS__URL=`).
            node[keys[-1]] = None if raw.strip() in ("", "~", "null", "Null", "NULL") else raw
        else:
            node[keys[-1]] = yaml.safe_load(raw)
    return out


def _is_text_setting(keys: list[str]) -> bool:
    """True when the setting at ``keys`` is declared ``str`` (or ``str | None``); False when
    the path is not a declared field (a key of a mapping such as ``lake.tables``)."""
    model: type[BaseModel] = Config
    for k in keys[:-1]:
        info = model.model_fields.get(k)
        if info is None:
            return False
        nested = [
            a
            for a in (info.annotation, *getattr(info.annotation, "__args__", ()))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not nested:
            return False
        model = nested[0]
    info = model.model_fields.get(keys[-1])
    if info is None:
        return False
    annotation = info.annotation
    if annotation is str:
        return True
    # Only `str | None` (Optional[str]); a dict[str, str] or list[str] has str args too.
    if get_origin(annotation) not in (Union, UnionType):
        return False
    kinds = set(get_args(annotation))
    return str in kinds and kinds <= {str, type(None)}


def merge_settings(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, section by section: nested mappings merge, anything
    else is replaced (environment overrides over the file; a demo's or a worker's settings
    over the shared ones)."""
    merged = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(merged.get(k), Mapping):
            merged[k] = merge_settings(merged[k], v)
        else:
            merged[k] = v
    return merged


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"{where}: {err['msg']}")
    return "\n".join(lines)


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> Config:
    """Read ``path`` (or ``$TIDELAKE_CONFIG``, or nothing), apply env overrides, validate.

    Raises :class:`ConfigError` naming each bad field's dotted path and the reason.
    """
    env = dict(os.environ if environ is None else environ)
    path = path or env.get("TIDELAKE_CONFIG")
    data: dict[str, Any] = {}
    if path:
        p = Path(path)
        try:
            loaded = yaml.safe_load(p.read_text())
        except OSError as exc:
            raise ConfigError(f"{p}: cannot read: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping")
        data = loaded or {}
        _reject_secrets_in_file(data)
    data = merge_settings(data, _env_overrides(env))
    if "home" not in data:
        data["home"] = str(default_home(env))
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc


def reference_rows(model: type[BaseModel] = Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted path, default, description)`` for every setting: docs/configuration.md."""
    rows: list[tuple[str, str, str]] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        models = [
            a
            for a in (info.annotation, *getattr(info.annotation, "__args__", ()))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if models:
            if info.description:
                rows.append((path, "(section)", info.description))
            # A mapping of sections (routes, lake.tables): its keys are the user's names.
            inner = f"{path}.<name>." if get_origin(info.annotation) is dict else f"{path}."
            if len(models) == 1:
                rows.extend(reference_rows(models[0], inner))
                continue
            for kind_model in models:  # a union told apart by `kind`: each kind's settings
                kind = get_args(kind_model.model_fields["kind"].annotation)[0]
                rows.extend(
                    (p, d, f"({kind}) {desc}")
                    for p, d, desc in reference_rows(kind_model, inner)
                    if p != f"{inner}kind"
                )
            continue
        default = info.get_default(call_default_factory=True)
        extra = info.json_schema_extra
        if name in SECRET_FIELDS:
            shown = "(env only)"
        elif info.is_required():
            shown = "(required)"
        elif isinstance(extra, dict) and "shown_default" in extra:
            shown = repr(extra["shown_default"])  # machine-dependent: the rule, not this machine's
        elif isinstance(default, PurePath):
            shown = repr(str(default))  # the path as written, not Python's PosixPath(...)
        else:
            shown = repr(default)
        rows.append((path, shown, info.description or ""))
    return rows


def reference_markdown() -> str:
    """The settings table of docs/configuration.md, generated from the models."""
    lines = ["| setting | default | meaning |", "|---|---|---|"]
    for path, default, desc in reference_rows():
        env = ENV_PREFIX + path.upper().replace(".", "__")
        lines.append(f"| `{path}` (`{env}`) | `{default}` | {desc} |")
    return "\n".join(lines) + "\n"
