"""TiDB DDL as TiCDC sends it: the TiDB parser's *restored* SQL, mapped to lake operations.

Where the text comes from (read, not copied):

* pingcap/tiflow ``cdc/owner/ddl_sink.go``, ``ddlSinkImpl.addSpecialComment``: every DDL query
  is re-parsed and restored with ``RestoreTiDBSpecialComment | RestoreNameBackQuotes |
  RestoreKeyWordUppercase | RestoreStringSingleQuotes | SkipPlacementRuleForRestore |
  RestoreWithTTLEnableOff`` (no ``RestoreStringWithoutCharset``); its golden cases are
  ``cdc/owner/ddl_sink_test.go``, ``TestAddSpecialComment``.
* pingcap/tidb ``pkg/types/parser_driver/value_expr.go``, ``ValueExpr.Restore``: a string
  literal is written ``_`` + charset keyword (upper-cased) + the quoted string (backslash
  doubled, ``'`` doubled by ``RestoreCtx.WriteString``); integers and decimals plain; a hex
  literal ``x'%x'``; a bit literal ``b'…'`` (leading zeros trimmed); floats as ``1e+03``.
* pingcap/parser ``ast/ddl.go``, ``ColumnOption.Restore`` (``DEFAULT ``, ``COMMENT '…'`` with
  no introducer, ``COLLATE name``, ``PRIMARY KEY /*T![clustered_index] CLUSTERED */``,
  ``/*T![auto_rand] AUTO_RANDOM(n) */``) and the restore cases of ``parser_test.go`` /
  ``ast/ddl_test.go`` (``DEFAULT _UTF8MB4''``, ``CURRENT_TIMESTAMP()``, ``RENAME AS``,
  ``ADD COLUMN (…)``, ``SET TIFLASH REPLICA``, ``TRUNCATE PARTITION``…).
* pingcap/tiflow ``pkg/sink/codec/canal/canal_entry.go``, ``convertDdlEventType``: the
  canal-json ``type`` of each DDL job type (the second column below).
"""

from __future__ import annotations

import pytest

from tidelake.lake.ddl import (
    AddColumn,
    ColumnSpec,
    CreateDatabase,
    CreateTable,
    Default,
    DropColumn,
    DropDatabase,
    DropTable,
    ModifyColumn,
    NoOp,
    Operation,
    RenameColumn,
    RenameTable,
    TableName,
    TruncateTable,
    Unsupported,
    normalize_mysql,
    parse_ddl,
)

T = TableName("shop", "t")


def _ops(sql: str) -> list[Operation]:
    return parse_ddl(sql, "mysql", "shop")


def _add(name: str, source_type: str, text: str | None, kind: str = "value") -> AddColumn:
    return AddColumn(T, ColumnSpec(name, source_type, Default(kind, text)))  # type: ignore[arg-type]


#: (restored SQL as TiCDC sends it, canal-json type, the operations it maps to).
CHANGING: list[tuple[str, str, list[Operation]]] = [
    # ActionAddColumn → ALTER. DEFAULT string literals carry the session charset.
    ("ALTER TABLE `t` ADD COLUMN `note` VARCHAR(32) DEFAULT _UTF8MB4'new'", "ALTER",
     [_add("note", "varchar(32)", "new")]),
    ("ALTER TABLE `t` ADD COLUMN `c` CHAR(120) DEFAULT _UTF8MB4'' NOT NULL", "ALTER",
     [_add("c", "char(120)", "")]),
    ("ALTER TABLE `t` ADD COLUMN `k` INT UNSIGNED DEFAULT _UTF8MB4'0' NOT NULL", "ALTER",
     [_add("k", "int unsigned", "0")]),
    ("ALTER TABLE `t` ADD COLUMN `s` VARCHAR(8) DEFAULT _UTF8MB4'it''s'", "ALTER",
     [_add("s", "varchar(8)", "it's")]),
    ("ALTER TABLE `t` ADD COLUMN `s` VARCHAR(8) DEFAULT _UTF8MB4'a\\\\b'", "ALTER",
     [_add("s", "varchar(8)", "a\\b")]),
    ("ALTER TABLE `t` ADD COLUMN `s` VARCHAR(8) DEFAULT _UTF8MB4'x' COLLATE utf8mb4_bin", "ALTER",
     [_add("s", "varchar(8)", "x")]),
    ("ALTER TABLE `t` ADD COLUMN `s` VARCHAR(8) CHARACTER SET UTF8MB4 COLLATE utf8mb4_bin "
     "DEFAULT _UTF8MB4'Zoë' COMMENT 'a note'", "ALTER", [_add("s", "varchar(8)", "Zoë")]),
    ("ALTER TABLE `t` ADD COLUMN `n` INT DEFAULT 10", "ALTER", [_add("n", "int", "10")]),
    ("ALTER TABLE `t` ADD COLUMN `n` INT DEFAULT -1", "ALTER", [_add("n", "int", "-1")]),
    ("ALTER TABLE `t` ADD COLUMN `p` DECIMAL(12,2) DEFAULT 1.10", "ALTER",
     [_add("p", "decimal(12,2)", "1.10")]),
    ("ALTER TABLE `t` ADD COLUMN `p` DECIMAL(12,2) DEFAULT -0.5", "ALTER",
     [_add("p", "decimal(12,2)", "-0.5")]),
    ("ALTER TABLE `t` ADD COLUMN `f` DOUBLE DEFAULT 1e+03", "ALTER",
     [_add("f", "double", "1e+03")]),
    ("ALTER TABLE `t` ADD COLUMN `b` TINYINT(1) DEFAULT TRUE", "ALTER",
     [_add("b", "tinyint(1)", "1")]),
    ("ALTER TABLE `t` ADD COLUMN `bit` BIT(3) DEFAULT b'101'", "ALTER",
     [_add("bit", "bit(3)", "5")]),
    ("ALTER TABLE `t` ADD COLUMN `bit` BIT(1) DEFAULT b'1'", "ALTER", [_add("bit", "bit(1)", "1")]),
    ("ALTER TABLE `t` ADD COLUMN `v` VARBINARY(4) DEFAULT x'0aff'", "ALTER",
     [_add("v", "varbinary(4)", "\n\xff")]),
    ("ALTER TABLE `t` ADD COLUMN `v` VARBINARY(4) DEFAULT _BINARY'ab'", "ALTER",
     [_add("v", "varbinary(4)", "ab")]),
    ("ALTER TABLE `t` ADD COLUMN `v` VARCHAR(4) DEFAULT x'4142'", "ALTER",
     [_add("v", "varchar(4)", "AB")]),
    ("ALTER TABLE `t` ADD COLUMN `n` VARCHAR(4) DEFAULT NULL", "ALTER",
     [_add("n", "varchar(4)", None)]),
    ("ALTER TABLE `t` ADD COLUMN `d` DATE DEFAULT _UTF8MB4'2024-02-29'", "ALTER",
     [_add("d", "date", "2024-02-29")]),
    ("ALTER TABLE `t` ADD COLUMN `ts` TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP() "
     "ON UPDATE CURRENT_TIMESTAMP()", "ALTER",
     [_add("ts", "timestamp", None, "current_timestamp")]),
    ("ALTER TABLE `t` ADD COLUMN `ts` DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3)", "ALTER",
     [_add("ts", "datetime(3)", None, "current_timestamp")]),
    ("ALTER TABLE `t` ADD COLUMN `g` INT GENERATED ALWAYS AS(`n`+1) STORED", "ALTER",
     [_add("g", "int", "GENERATED ALWAYS AS (`n` + 1) STORED", "expression")]),
    ("ALTER TABLE `t` ADD COLUMN `a` SMALLINT UNSIGNED AFTER `b`", "ALTER",
     [_add("a", "smallint unsigned", None)]),
    # ActionAddColumns (before TiDB 6.2) / a multi-schema change keep the parenthesised form.
    ("ALTER TABLE `t` ADD COLUMN (`a` SMALLINT UNSIGNED, `b` VARCHAR(255))", "ALTER",
     [_add("a", "smallint unsigned", None), _add("b", "varchar(255)", None)]),
    ("ALTER TABLE `t` ADD COLUMN (`a1` INT, `a2` INT, UNIQUE `b2`(`a2`))", "ALTER",
     [_add("a1", "int", None), _add("a2", "int", None)]),
    ("ALTER TABLE `t` ADD COLUMN `a` INT, ADD INDEX `i`(`a`)", "ALTER", [_add("a", "int", None)]),
    ("ALTER TABLE `t` ADD COLUMN `a` SMALLINT UNSIGNED, LOCK = NONE", "ALTER",
     [_add("a", "smallint unsigned", None)]),
    ("ALTER TABLE `t` DROP COLUMN `a`", "ALTER", [DropColumn(T, "a")]),
    ("ALTER TABLE `t` DROP COLUMN IF EXISTS `a`", "ALTER", [DropColumn(T, "a")]),
    ("ALTER TABLE `t` RENAME COLUMN `a` TO `b`", "ALTER", [RenameColumn(T, "a", "b")]),
    ("ALTER TABLE `t` MODIFY COLUMN `a` BIGINT", "ALTER", [ModifyColumn(T, "a", "bigint")]),
    ("ALTER TABLE `t` MODIFY COLUMN IF EXISTS `a` VARCHAR(255)", "ALTER",
     [ModifyColumn(T, "a", "varchar(255)")]),
    ("ALTER TABLE `t` CHANGE COLUMN `a` `b` VARCHAR(255) BINARY CHARACTER SET UTF8", "ALTER",
     [ModifyColumn(T, "a", "varchar(255)", "b")]),
    # ActionRenameTable → RENAME; TiDB restores ALTER TABLE … RENAME [TO] as RENAME AS.
    ("ALTER TABLE `t` RENAME AS `t1`", "RENAME", [RenameTable(T, TableName("shop", "t1"))]),
    ("RENAME TABLE `t1` TO `t2`, `t3` TO `t4`", "RENAME",
     [RenameTable(TableName("shop", "t1"), TableName("shop", "t2")),
      RenameTable(TableName("shop", "t3"), TableName("shop", "t4"))]),
    ("TRUNCATE TABLE `t`", "TRUNCATE", [TruncateTable(T)]),
    ("DROP TABLE `t`", "ERASE", [DropTable(T)]),
    # ActionCreateSchema / ActionDropSchema → QUERY, with table "".
    ("CREATE DATABASE `clustered_test`", "QUERY", [CreateDatabase("clustered_test")]),
    ("CREATE DATABASE IF NOT EXISTS `shop` CHARACTER SET = utf8mb4", "QUERY",
     [CreateDatabase("shop")]),
    ("DROP DATABASE `shop`", "QUERY", [DropDatabase("shop")]),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "canal_type", "expected"), CHANGING)
def test_restored_ddl_that_changes_the_lake_maps_to_its_operations(
    sql: str, canal_type: str, expected: list[Operation]
) -> None:
    """Introducers, back-quotes and the restored spellings map to the operation the source
    applied; DEFAULT literals become the existing rows' values in canal-json text form
    (BIT as its number, binary columns one ISO-8859-1 character per byte)."""
    assert canal_type in {"ALTER", "RENAME", "TRUNCATE", "ERASE", "QUERY", "CREATE"}
    assert expected == _ops(sql)


def test_create_table_with_tidb_feature_comments_and_table_options() -> None:
    """CREATE (ActionCreateTable): the clustered-index, auto_random, shard and pre-split
    comments and the table options and partitioning restored after the column list leave
    the columns and key as declared (cases of TestAddSpecialComment and parser_test.go)."""
    cases = {
        "CREATE TABLE `t` (`id` INT PRIMARY KEY /*T![clustered_index] CLUSTERED */,`v` INT)":
            (("id", "int"), ("v", "int")),
        "CREATE TABLE `t` (`id` INT /*T![auto_rand] AUTO_RANDOM(4) */ PRIMARY KEY,`v` INT) "
        "/*T![auto_rand_base] AUTO_RANDOM_BASE = 100 */": (("id", "int"), ("v", "int")),
        "CREATE TABLE `t` (`id` VARCHAR(10) PRIMARY KEY,`v` VARCHAR(10)) ENGINE = InnoDB "
        "DEFAULT CHARACTER SET = UTF8MB4 DEFAULT COLLATE = UTF8MB4_BIN "
        "/*T! SHARD_ROW_ID_BITS = 4 */ /*T! PRE_SPLIT_REGIONS = 3 */":
            (("id", "varchar(10)"), ("v", "varchar(10)")),
        "CREATE TABLE `t` (`id` BIGINT(20) NOT NULL AUTO_INCREMENT,`v` VARCHAR(32) COLLATE "
        "utf8_unicode_ci NOT NULL DEFAULT _UTF8MB4'default',PRIMARY KEY(`id`)) ENGINE = InnoDB "
        "AUTO_INCREMENT = 33703438 DEFAULT CHARACTER SET = UTF8 ROW_FORMAT = COMPACT "
        "COMMENT = '' CHECKSUM = 0 DELAY_KEY_WRITE = 0 PARTITION BY RANGE (`id`) "
        "(PARTITION `p0` VALUES LESS THAN (10),PARTITION `p1` VALUES LESS THAN (MAXVALUE))":
            (("id", "bigint(20)"), ("v", "varchar(32)")),
        "CREATE TABLE `t` (`id` INT,`v` DATETIME, PRIMARY KEY(`id`) "
        "/*T![clustered_index] NONCLUSTERED */) /*T![ttl] TTL = `v` + INTERVAL 1 DAY */ "
        "/*T![ttl] TTL_ENABLE = 'OFF' */": (("id", "int"), ("v", "datetime")),
    }  # fmt: skip
    for sql, columns in cases.items():
        ops = _ops(sql)
        assert 1 == len(ops), sql
        op = ops[0]
        assert isinstance(op, CreateTable), (sql, op)
        actual = (op.table, op.primary_key, tuple((c.name, c.source_type) for c in op.columns))
        assert (T, ("id",), columns) == actual


#: Restored DDL that changes nothing the lake holds: recorded and passed, never a pause.
PASSED: list[tuple[str, str]] = [
    ("ALTER TABLE `t` SET TIFLASH REPLICA 1", "QUERY"),  # ActionSetTiFlashReplica
    ("ALTER TABLE `t` SET TIFLASH REPLICA 2 LOCATION LABELS 'a', 'b'", "QUERY"),
    ("ALTER TABLE `t` ADD INDEX `idx`(`b`)", "CINDEX"),  # ActionAddIndex
    ("ALTER TABLE `t` ADD UNIQUE `u`(`b`)", "CINDEX"),
    ("ALTER TABLE `t` ADD INDEX(`a`) USING BTREE COMMENT 'a'", "CINDEX"),
    ("ALTER TABLE `t` ADD INDEX `idx`(`b`) /*T![pre_split] PRE_SPLIT_REGIONS = (BETWEEN (1) "
     "AND (100) REGIONS 4) */", "CINDEX"),
    ("ALTER TABLE `t` ADD INDEX `j`((CAST(JSON_EXTRACT(`j`, _UTF8MB4'$.number[*]') AS SIGNED "
     "ARRAY)))", "CINDEX"),
    ("CREATE INDEX `idx` ON `t` (`a`)", "CINDEX"),
    ("CREATE UNIQUE INDEX `idx` ON `t` (`a`)", "CINDEX"),
    ("ALTER TABLE `t` ADD CONSTRAINT `fk` FOREIGN KEY (`a`) REFERENCES `u`(`id`)", "CINDEX"),
    ("ALTER TABLE `t` DROP INDEX `a`", "DINDEX"),  # ActionDropIndex
    ("DROP INDEX `a` ON `t`", "DINDEX"),
    ("ALTER TABLE `t` DROP FOREIGN KEY `a`", "DINDEX"),
    ("ALTER TABLE `t` RENAME INDEX `a` TO `b`", "ALTER"),  # ActionRenameIndex
    ("ALTER TABLE `t` ALTER INDEX `a` INVISIBLE", "ALTER"),  # ActionAlterIndexVisibility
    ("ALTER TABLE `t` ALTER INDEX `a` VISIBLE", "ALTER"),
    ("ALTER TABLE `t` COMMENT = 'cmt'", "ALTER"),  # ActionModifyTableComment
    ("ALTER TABLE `t` AUTO_INCREMENT = 3", "ALTER"),  # ActionRebaseAutoID
    ("ALTER TABLE `t` /*T![force_inc] FORCE  */AUTO_INCREMENT = 12", "ALTER"),
    ("ALTER TABLE `t` FORCE /* AlterTableForce is not supported */ , AUTO_INCREMENT = 12",
     "ALTER"),
    ("ALTER TABLE `t` AUTO_RANDOM_BASE = 50", "QUERY"),  # ActionRebaseAutoRandomBase
    ("ALTER TABLE `t` /*T![auto_id_cache] AUTO_ID_CACHE = 100 */", "QUERY"),
    ("ALTER TABLE `t` ALTER COLUMN `a` SET DEFAULT 1", "ALTER"),  # ActionSetDefaultValue
    ("ALTER TABLE `t` ALTER COLUMN `a` SET DEFAULT (CURRENT_TIMESTAMP())", "ALTER"),
    ("ALTER TABLE `t` ALTER COLUMN `a` DROP DEFAULT", "ALTER"),
    ("ALTER TABLE `t` CONVERT TO CHARACTER SET UTF8 COLLATE UTF8_BIN", "ALTER"),
    ("ALTER TABLE `t` DEFAULT CHARACTER SET = UTF8MB4", "ALTER"),
    ("ALTER TABLE `t` ENGINE = '', COMMENT = '', DEFAULT COLLATE = UTF8_GENERAL_CI", "ALTER"),
    ("ALTER TABLE `t` SHARD_ROW_ID_BITS = 1", "QUERY"),  # ActionShardRowID
    ("ALTER TABLE `t` CACHE", "QUERY"),  # ActionAlterCacheTable: convertDdlEventType default
    ("ALTER TABLE `t` NOCACHE", "QUERY"),
    ("ALTER TABLE `t` /*T![ttl] TTL = `t` + INTERVAL 1 DAY */ "
     "/*T![ttl] TTL_ENABLE = 'OFF' */", "QUERY"),  # ActionAlterTTLInfo
    ("ALTER TABLE `t` /*T![ttl] TTL_JOB_INTERVAL = '7h' */", "QUERY"),
    ("ALTER TABLE `t`", "QUERY"),  # ALTER TABLE t PLACEMENT POLICY=p10, placement skipped
    ("", "QUERY"),  # ALTER DATABASE … PLACEMENT POLICY / ALTER PLACEMENT POLICY restore to ""
    ("ALTER TABLE `t` ATTRIBUTES='str1,str2'", "QUERY"),
    ("ALTER TABLE `t` ADD PARTITION (PARTITION `x` VALUES LESS THAN (100))", "ALTER"),
    ("ALTER TABLE `t` REORGANIZE PARTITION `p0` INTO (PARTITION `p0` VALUES LESS THAN (5),"
     "PARTITION `p1` VALUES LESS THAN (10))", "ALTER"),  # ActionReorganizePartition
    ("ALTER TABLE `t` PARTITION BY HASH (`a`) PARTITIONS 4", "ALTER"),  # AlterTablePartitioning
    ("ALTER TABLE `t` COMMENT = 'cmt' PARTITION BY HASH (`a`) PARTITIONS 1", "ALTER"),
    ("ALTER TABLE `t` REMOVE PARTITIONING", "ALTER"),  # ActionRemovePartitioning
    ("ALTER TABLE `t` PARTITION `p1` ATTRIBUTES='x'", "QUERY"),
    ("ALTER DATABASE `shop` CHARACTER SET = utf8mb4", "QUERY"),  # ModifySchemaCharsetAndCollate
    ("ALTER DATABASE `TestResetPlacementDB`  CHARACTER SET = utf8mb4", "QUERY"),
    ("CREATE ALGORITHM = UNDEFINED DEFINER = CURRENT_USER SQL SECURITY DEFINER VIEW `v` AS "
     "SELECT `a` FROM `t`", "QUERY"),  # ActionCreateView
    ("CREATE OR REPLACE ALGORITHM = UNDEFINED DEFINER = `root`@`%` SQL SECURITY DEFINER VIEW "
     "`v` (`a`) AS SELECT `a` FROM `t`", "QUERY"),
    ("DROP VIEW `v`", "QUERY"),  # ActionDropView
    ("CREATE SEQUENCE `seq` START WITH 1 INCREMENT BY 1 CACHE 1000 NOCYCLE ENGINE = innodb",
     "QUERY"),  # ActionCreateSequence
    ("ALTER SEQUENCE `seq` RESTART WITH 10", "QUERY"),
    ("DROP SEQUENCE `seq`", "QUERY"),
    ("CREATE PLACEMENT POLICY `p1` PRIMARY_REGION = 'us-east-1' REGIONS = 'us-east-1'", "QUERY"),
    ("DROP PLACEMENT POLICY `p1`", "QUERY"),
    ("LOCK TABLES `t` READ", "QUERY"),  # ActionLockTable
    ("UNLOCK TABLES", "QUERY"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "canal_type"), PASSED)
def test_restored_ddl_that_changes_nothing_the_lake_holds_passes(sql: str, canal_type: str) -> None:
    """Indexes, TiFlash replicas, placement, comments, auto-id bases, TTL, table options,
    partitioning that keeps every row, views, sequences, locks: only NoOp operations, so the
    table's checkpoint moves and nothing pauses."""
    ops = _ops(sql)
    assert canal_type in {"ALTER", "QUERY", "CINDEX", "DINDEX"}
    assert ops
    assert [NoOp] * len(ops) == [type(op) for op in ops]


#: Restored DDL the lake cannot map exactly: the table pauses, with a reason.
PAUSED: list[tuple[str, str, str]] = [
    ("ALTER TABLE `t` TRUNCATE PARTITION `p0`", "ALTER", "rows of partitions"),
    ("ALTER TABLE `t` TRUNCATE PARTITION `p0`,`p1`", "ALTER", "rows of partitions"),
    ("ALTER TABLE `t` DROP PARTITION `p1`", "ALTER", "rows of partitions"),
    ("ALTER TABLE `t` DROP PARTITION IF EXISTS `p1`,`p2`", "ALTER", "rows of partitions"),
    ("ALTER TABLE `t` EXCHANGE PARTITION `p` WITH TABLE `nt`", "QUERY", "rows of partitions"),
    ("RECOVER TABLE `t`", "QUERY", "brings back"),  # ActionRecoverTable
    ("RECOVER TABLE BY JOB 11", "QUERY", "brings back"),
    ("FLASHBACK TABLE `t` TO `t1`", "QUERY", "brings back"),
    ("FLASHBACK DATABASE `shop`", "QUERY", "earlier time"),
    ("ALTER TABLE `t` ADD PRIMARY KEY(`a`) /*T![clustered_index] CLUSTERED */", "CINDEX",
     "primary key"),
    ("ALTER TABLE `t` DROP PRIMARY KEY", "DINDEX", "primary key"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "canal_type", "reason"), PAUSED)
def test_restored_ddl_that_removes_or_restores_rows_pauses(
    sql: str, canal_type: str, reason: str
) -> None:
    """Rows removed by partition or brought back by RECOVER/FLASHBACK cannot be told apart in
    the lake, and the key is the Hudi record key: one Unsupported with a reason."""
    ops = _ops(sql)
    assert canal_type in {"ALTER", "QUERY", "CINDEX", "DINDEX"}
    assert 1 == len(ops), ops
    assert isinstance(ops[0], Unsupported), ops
    assert reason in ops[0].reason


@pytest.mark.parametrize(
    ("restored", "normalised"),
    [
        ("DEFAULT _UTF8MB4'new'", "DEFAULT 'new'"),
        ("DEFAULT _UTF8'x', _LATIN1'y', _utf8mb4''", "DEFAULT 'x', 'y', ''"),
        ("DEFAULT _BINARY'ab'", "DEFAULT x'6162'"),
        ("DEFAULT _BINARY'a''\\\\'", "DEFAULT x'61275c'"),
        ("`a_UTF8MB4` VARCHAR(3) DEFAULT 'x'", "`a_UTF8MB4` VARCHAR(3) DEFAULT 'x'"),
        ("COMMENT '_UTF8MB4''x'", "COMMENT '_UTF8MB4''x'"),
        ("`id` INT PRIMARY KEY /*T![clustered_index] CLUSTERED */,", "`id` INT PRIMARY KEY  ,"),
        ("(`id` INT) /*T! SHARD_ROW_ID_BITS = 2 */", "(`id` INT)  "),
        ("'/*T![x] kept */' /* gone */", "'/*T![x] kept */'  "),
        ("/*!40101 SET x = 1 */", "/*!40101 SET x = 1 */"),
    ],
)
def test_normalize_mysql_strips_feature_comments_and_introducers_outside_literals(
    restored: str, normalised: str
) -> None:
    """Only code is touched: a comment or an introducer spelled inside a string or a quoted
    name stays; MySQL executable comments stay for sqlglot."""
    assert normalised == normalize_mysql(restored)


def test_statements_split_at_semicolons_outside_literals() -> None:
    """Two statements (and a ';' inside a DEFAULT literal) give their operations in order."""
    ops = _ops("ALTER TABLE `t` ADD COLUMN `s` VARCHAR(3) DEFAULT _UTF8MB4';'; DROP TABLE `t`;")
    assert [_add("s", "varchar(3)", ";"), DropTable(T)] == ops
