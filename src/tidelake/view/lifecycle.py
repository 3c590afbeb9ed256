"""Lifecycle views: the states each row of a table passes through and the time it spends in
each (docs/views.md §7) — an order going new → paid → shipped.

A lake table holds each row as it is now; the states it passed through are in the changes.
A lake commit nets the changes of a round (two updates of one key in one round are one
change in Hudi's change log), so a lifecycle view is not read from the change log: it is kept
from the round's own events, in stream order, exactly those the base table applied
(:func:`applied_events`): up to the base's checkpoint (a table that failed, or was paused or
held back, has not committed its events: they come when it does), each event once, and of
the events a commit covers only those it records as applied (``lake/checkpoint.py``
``AppliedRows``): not the dead-lettered, not the stale. What a commit applied is read from the
commit itself, never from the ingest's memory: the keeper runs before the ingest moves its
cursor, so a round killed before the view commit is read again, and then the ingest finds
every event a duplicate and decides nothing anew, while the commit still says what it
applied. The view's checkpoint, the stream sequence it has applied, is in its own commit, so
the round read again is applied once.

One view row per (row key, state): how many times the row entered the state, the
milliseconds it spent there (closed stays), when it last entered and left, whether it is
there now. Times are the source commit times of the changes (``commit_ts_ms``: TiDB's
commitTs, the binlog's or WAL's commit time): when the transition committed at the source.

History starts when the view is made: a row the table holds then, and that does not change
in the view's first round, enters its state at that moment. The lake cannot recompute the view
(the past states are not in it), but the stream can: a rebuild replays the table's changes
from the stream's first message (``view/replay.py``) and replaces the view table, its history
then whole from the first change on. A changed definition, or a view broken by a round it
missed, is rebuilt that way.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from tidelake import names
from tidelake.config import Config
from tidelake.events import ChangeEvent, Op
from tidelake.lake.checkpoint import AppliedRows, event_id
from tidelake.lake.hudi import ORDERING_FIELD, split_table_id, table_path
from tidelake.lake.store import applied_since, read_checkpoint
from tidelake.view.definition import KEY
from tidelake.view.maintain import DELETED, StepResult, VerifyResult
from tidelake.view.replay import Replayed
from tidelake.view.table import ViewCheckpoint, ViewTable, instant_seconds, now_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = structlog.get_logger("tidelake.view")

ENTITY = "_tl_entity"
POSITION = "_tl_position"
STATE = "state"


class LifecycleError(ValueError):
    """The events cannot be placed in a lifecycle (the reason says why)."""


class DefinitionChangedError(LifecycleError):
    """The view table was made for another table or state column: only a rebuild (by replay)
    makes it this view."""


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _moment(ms: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=ms)  # integers: no float rounding


def applied_events(
    events: Iterable[ChangeEvent],
    done: int,
    upto: int,
    commits: Sequence[tuple[int, AppliedRows | None]],
) -> list[ChangeEvent]:
    """Of one table's row ``events``, those with a stream sequence above ``done`` and at most
    ``upto`` that the table applied, each ``(seq, position)`` once, in stream order.

    ``commits``: ``(checkpoint seq, what it applied)`` of the table's commits (any order,
    ``lake/store.py`` :func:`applied_since`). An event belongs to the commit with the lowest
    checkpoint at or above its sequence, and counts when that commit applied it; an event no
    commit covers yet is not applied. A commit from before the lake recorded what it applied
    (None) counts as having applied every event it covers."""
    covers = sorted(commits, key=lambda c: c[0])
    seqs = [seq for seq, _ in covers]
    seen: set[tuple[int, str]] = set()
    out = []
    for event in sorted(events, key=lambda e: e.seq):  # stable: file order within a seq
        ident = event_id(event)
        if not done < event.seq <= upto or ident in seen or event.op is Op.DDL:
            continue
        seen.add(ident)
        at = bisect.bisect_left(seqs, event.seq)
        if at == len(covers):
            continue
        applied = covers[at][1]
        if applied is None or applied.applied(event):
            out.append(event)
    return out


class LifecycleView:
    """One lifecycle view (``kind: lifecycle``) through one Spark session."""

    def __init__(self, config: Config, spark: SparkSession, name: str) -> None:
        view = config.views[name]
        if not (view.table and view.state_column):
            raise LifecycleError(f"view {name} is not a lifecycle view")
        self.config = config
        self.spark = spark
        self.name = name
        database, table = split_table_id(view.table)
        self.base = names.table_id(database, table)
        self.base_path = table_path(config.lake_root, database, table)
        self.state_column = view.state_column
        self.table = ViewTable(config, spark, name)
        self.fingerprint = hashlib.sha256(
            orjson.dumps(["lifecycle", self.base, self.state_column])
        ).hexdigest()[:16]

    # -- schema

    def _key_fields(self) -> tuple[list[str], StructType]:
        from pyspark.sql.types import StructType

        snapshot = self.spark.read.format("hudi").load(self.base_path)
        pk = self._pk()
        types = {f.name: f for f in snapshot.schema.fields}
        return pk, StructType([types[c] for c in pk])

    def _pk(self) -> list[str]:
        from tidelake.lake.store import hoodie_properties

        return hoodie_properties(self.spark, self.base_path)["hoodie.table.recordkey.fields"].split(
            ","
        )

    def _schema(self, key: StructType) -> StructType:
        from pyspark.sql.types import (
            BooleanType,
            LongType,
            StringType,
            StructField,
            StructType,
            TimestampType,
        )

        return StructType(
            [
                StructField(KEY, StringType(), False),
                *key.fields,
                StructField(STATE, StringType(), True),
                StructField("times_entered", LongType(), False),
                StructField("ms_in_state", LongType(), False),
                StructField("entered_at", TimestampType(), True),
                StructField("left_at", TimestampType(), True),
                StructField("is_current", BooleanType(), False),
                StructField(ENTITY, StringType(), False),
                StructField(POSITION, StringType(), True),
                StructField(DELETED, BooleanType(), False),
            ]
        )

    # -- the step

    def apply(self, events: Sequence[ChangeEvent], seq_last: int | None) -> StepResult:
        """Apply the events of the base table that the lake applied, of a round read through
        stream sequence ``seq_last`` (None: no round, outside the ingest)."""
        committed = read_checkpoint(self.spark, self.base_path)
        if committed is None:
            return StepResult(self.name, "waiting", reason=f"{self.base} has no commit yet")
        through = committed.checkpoint.seq
        held = self.table.checkpoint() if self.table.exists() else None
        if held is not None and held.definition != self.fingerprint:
            raise DefinitionChangedError(
                f"view {self.name}: the definition changed: rebuild it (tidelake view rebuild)"
            )
        done = int(held.base.get(self.base, 0)) if held is not None else 0
        # A new view starts its history at the base's commit (the rows the round does not
        # touch are seeded from it). Else only as far as the round reads: a commit may cover
        # more (made before a crash, the round read again shorter), its events come next.
        read = done if seq_last is None else seq_last
        upto = through if held is None else max(done, min(through, read))
        todo = self._applied(events, done, upto)
        if not todo and held is not None and done >= upto:
            if done >= through:
                return StepResult(
                    self.name, "current", checkpoint=held, instants={self.base: committed.instant}
                )
            return StepResult(
                self.name,
                "waiting",
                reason=f"{self.base} committed through seq {through}, the view has applied "
                f"{done}: the rest comes with the ingest's rounds",
            )
        pk, key_schema = self._key_fields()
        schema = self._schema(key_schema)
        entities = {self._entity(e, pk) for e in todo}
        stored = self._stored(entities) if held is not None else {}
        rows = _Rows(stored)
        for e in todo:
            self._place(rows, e, pk)
        if held is None:  # the first round: rows it did not touch enter their state now
            self._seed(rows, pk, entities, committed.completion_time or committed.instant)
        # Every event the table applied up to ``upto`` is applied now (this round's here,
        # earlier rounds' before; a failed round marks the view broken: keeper.py).
        checkpoint = ViewCheckpoint(self.fingerprint, {self.base: str(upto)}, now_ms(), "step")
        changed = rows.changed()
        df = self._typed(changed, schema, pk, key_schema)
        self.table.write(df, checkpoint, rebuild=False)
        if held is None:
            self.table.register()
        log.info("lifecycle step", view=self.name, events=len(todo), rows=len(changed), seq=upto)
        return StepResult(
            self.name,
            "step" if held is not None else "rebuild",
            reason="" if held is not None else "the view table is new",
            records=len(todo),
            groups=len(changed),
            checkpoint=checkpoint,
            # The base's latest commit, once the view includes all of it.
            instants={self.base: committed.instant} if upto >= through else {},
        )

    def through(self) -> int | None:
        """The stream sequence the base table has committed (None: no commit yet)."""
        committed = read_checkpoint(self.spark, self.base_path)
        return None if committed is None else committed.checkpoint.seq

    def rebuild(self, replayed: Replayed) -> StepResult:
        """The view recomputed from the table's whole history as the stream holds it
        (``view/replay.py``), replacing the view table in one ``insert_overwrite_table``
        commit whose checkpoint is the replay's last sequence."""
        through = self.through()
        if through is None:
            return StepResult(self.name, "waiting", reason=f"{self.base} has no commit yet")
        if replayed.table != self.base or replayed.through != through:
            raise LifecycleError(
                f"view {self.name}: the replay of {replayed.table} reaches seq "
                f"{replayed.through}, {self.base} has committed seq {through}"
            )
        pk, key_schema = self._key_fields()
        rows = _Rows({})
        for event in sorted(replayed.events, key=lambda e: e.seq):  # stream order
            self._place(rows, event, pk)
        seq = str(through)
        checkpoint = ViewCheckpoint(self.fingerprint, {self.base: seq}, now_ms(), "rebuild")
        changed = rows.changed()
        df = self._typed(changed, self._schema(key_schema), pk, key_schema)
        self.table.write(df, checkpoint, rebuild=True)
        self.table.register()
        log.info(
            "lifecycle rebuilt by replay",
            view=self.name,
            events=len(replayed.events),
            rows=len(changed),
            seq=through,
        )
        return StepResult(
            self.name,
            "rebuild",
            reason=f"replayed {replayed.messages} stream messages",
            records=len(replayed.events),
            groups=len(changed),
            rows=len(changed),
            checkpoint=checkpoint,
        )

    def _applied(self, events: Sequence[ChangeEvent], done: int, upto: int) -> list[ChangeEvent]:
        """The base table's events in ``(done, upto]`` that its commits applied."""
        mine = [
            e
            for e in events
            if e.table_id == self.base and e.op is not Op.DDL and done < e.seq <= upto
        ]
        if not mine:
            return []
        commits = applied_since(self.spark, self.base_path, min(e.seq for e in mine))
        return applied_events(mine, done, upto, commits)

    def _entity(self, event: ChangeEvent, pk: Sequence[str]) -> str:
        key = event.key or {}
        missing = [c for c in pk if c not in key]
        if missing:
            raise LifecycleError(
                f"view {self.name}: an event of {self.base} (seq {event.seq}) has no "
                f"{', '.join(missing)} in its key"
            )
        return orjson.dumps([key[c] for c in pk]).decode()

    def _stored(self, entities: set[str]) -> dict[str, dict[str, Any]]:
        from pyspark.sql import functions as F  # noqa: N812

        if not entities:
            return {}
        wanted = self.spark.createDataFrame([(e,) for e in sorted(entities)], [ENTITY])
        picked = self.table.read().join(F.broadcast(wanted), ENTITY, "left_semi")
        return {r[KEY]: r.asDict() for r in picked.collect()}

    def _place(self, rows: _Rows, event: ChangeEvent, pk: Sequence[str]) -> None:
        if event.commit_ts_ms is None:
            raise LifecycleError(
                f"view {self.name}: an event of {self.base} (seq {event.seq}) has no commit time"
            )
        entity = self._entity(event, pk)
        position = event.position.encode()
        last = rows.position(entity)
        if last is not None and position <= last:
            return  # applied already (a republished copy)
        at = _moment(event.commit_ts_ms)
        key_values = dict(zip(pk, orjson.loads(entity), strict=True))
        if event.op is Op.DELETE:
            rows.leave(entity, at, position)
            return
        after = event.after or {}
        if self.state_column not in after or self.state_column in event.unchanged:
            rows.touch(entity, position)
            return
        state = after[self.state_column]
        state = None if state is None else str(state)
        current = rows.current(entity)
        if current is not None and current[STATE] == state:
            rows.touch(entity, position)
            return
        rows.leave(entity, at, position)
        rows.enter(entity, key_values, state, at, position)

    def _seed(self, rows: _Rows, pk: Sequence[str], touched: set[str], completed: str) -> None:
        at = dt.datetime.fromtimestamp(instant_seconds(completed), tz=dt.UTC)
        snapshot = self.spark.read.format("hudi").load(self.base_path)
        for row in snapshot.select(*pk, self.state_column, ORDERING_FIELD).collect():
            values = [row[c] for c in pk]
            entity = orjson.dumps([None if v is None else str(v) for v in values]).decode()
            if entity in touched:
                continue
            state = row[self.state_column]
            rows.enter(
                entity,
                dict(zip(pk, values, strict=True)),
                None if state is None else str(state),
                at,
                # The row's position in the lake: an event older than it is not a change of
                # the row (Hudi keeps the stored row: lake/hudi.py), nor of the view's.
                row[ORDERING_FIELD],
            )

    def _typed(
        self,
        changed: list[dict[str, Any]],
        schema: StructType,
        pk: Sequence[str],
        key_schema: StructType,
    ) -> Any:
        """The changed rows as a DataFrame of the view's schema, key columns typed as the
        base table types them (the events carry them as text)."""
        from pyspark.sql import functions as F  # noqa: N812
        from pyspark.sql.types import StringType, StructField, StructType

        text = StructType(
            [StructField(f.name, StringType(), True) if f.name in pk else f for f in schema.fields]
        )
        rows = [
            tuple(
                (None if r.get(f.name) is None else str(r[f.name]))
                if f.name in pk
                else r.get(f.name)
                for f in schema.fields
            )
            for r in changed
        ]
        df = self.spark.createDataFrame(rows, text)
        types = {f.name: f.dataType for f in key_schema.fields}
        return df.select(
            *(
                F.col(f.name).cast(types[f.name]).alias(f.name) if f.name in pk else F.col(f.name)
                for f in schema.fields
            )
        )

    # -- the check

    def verify(self) -> VerifyResult:
        """Each row's current state in the view equals its state in the base table, as of the
        base commit the view has applied; no row has two current states or a negative stay."""
        from pyspark.sql import functions as F  # noqa: N812

        held = self.table.checkpoint() if self.table.exists() else None
        base_now = read_checkpoint(self.spark, self.base_path)
        if held is None or base_now is None:
            raise LifecycleError(f"view {self.name} has not been built yet (tidelake view run)")
        seq = int(held.base[self.base])
        if base_now.checkpoint.seq != seq:
            raise LifecycleError(
                f"view {self.name} has applied seq {seq}, {self.base} is at "
                f"{base_now.checkpoint.seq}: run it (tidelake view run) and verify again"
            )
        pk = self._pk()
        view = self.table.read()
        current = view.where(F.col("is_current")).select(*pk, F.col(STATE).alias(self.state_column))
        base = self.spark.read.format("hudi").load(self.base_path)
        expected = base.select(*pk, F.col(self.state_column).cast("string"))
        bad = view.where(F.col("ms_in_state") < 0).count()
        doubled = current.groupBy(*pk).count().where(F.col("count") > 1).count()
        return VerifyResult(
            self.name,
            rows=current.count(),
            expected=expected.count(),
            extra=current.exceptAll(expected).count() + bad + doubled,
            missing=expected.exceptAll(current).count(),
            base={self.base: str(seq)},
        )


class _Rows:
    """The view rows of the entities a round touches, as they change."""

    def __init__(self, stored: Mapping[str, dict[str, Any]]) -> None:
        self.rows = {k: dict(v) for k, v in stored.items()}
        self.dirty: set[str] = set()
        self._current: dict[str, str] = {
            r[ENTITY]: k for k, r in self.rows.items() if r.get("is_current")
        }
        self._position: dict[str, str] = {}
        for r in self.rows.values():
            if r.get(POSITION) and r[POSITION] > self._position.get(r[ENTITY], ""):
                self._position[r[ENTITY]] = r[POSITION]

    def position(self, entity: str) -> str | None:
        return self._position.get(entity)

    def current(self, entity: str) -> dict[str, Any] | None:
        key = self._current.get(entity)
        return self.rows[key] if key else None

    def touch(self, entity: str, position: str) -> None:
        self._position[entity] = position
        current = self.current(entity)
        if current is not None:
            current[POSITION] = position
            self.dirty.add(current[KEY])

    def leave(self, entity: str, at: dt.datetime, position: str) -> None:
        current = self.current(entity)
        self._position[entity] = position
        if current is None:
            return
        entered = current["entered_at"]
        if entered is not None:
            if entered.tzinfo is None:  # read back from Spark: local time, as PySpark gives
                entered = entered.astimezone(dt.UTC)
            stay = (at - entered) // dt.timedelta(milliseconds=1)  # integers: exact
            current["ms_in_state"] += max(0, stay)
        current["left_at"] = at
        current["is_current"] = False
        current[POSITION] = position
        self.dirty.add(current[KEY])
        del self._current[entity]

    def enter(
        self,
        entity: str,
        key_values: Mapping[str, Any],
        state: str | None,
        at: dt.datetime,
        position: str | None,
    ) -> None:
        key = orjson.dumps([entity, state]).decode()
        row = self.rows.setdefault(
            key,
            {
                KEY: key,
                **key_values,
                STATE: state,
                "times_entered": 0,
                "ms_in_state": 0,
                ENTITY: entity,
                DELETED: False,
            },
        )
        row["times_entered"] += 1
        row["entered_at"] = at
        row["left_at"] = None
        row["is_current"] = True
        row[POSITION] = position
        self._current[entity] = key
        if position is not None:
            self._position[entity] = position
        self.dirty.add(key)

    def changed(self) -> list[dict[str, Any]]:
        return [self.rows[k] for k in sorted(self.dirty)]
