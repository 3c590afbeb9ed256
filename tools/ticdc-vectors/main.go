// Command ticdc-vectors writes the canal-json messages TiCDC emits for a scripted source
// history (a spec file), for the golden cases tests/cases/ticdc_*.
//
// TiCDC's own encoder (github.com/pingcap/tiflow pkg/sink/codec/canal) cannot be built
// here: the Go module proxy answers 403 for github.com/pingcap/tiflow,
// github.com/pingcap/ticdc and github.com/pingcap/tidb (README.md). What is built from
// TiCDC's own dependencies, at the versions TiCDC pins or the nearest the proxy serves:
//
//   - the DDL text: TiDB's parser restores each statement with the flags TiCDC uses
//     (tiflow cdc/owner/ddl_sink.go addSpecialComment; ticdc pkg/common/event/util.go Restore);
//   - mysqlType: the parser's types.TypeToStr plus the unsigned/zerofill suffixes
//     (tiflow pkg/sink/codec/utils/field_types.go GetMySQLType, content-compatible=false);
//   - DML message bytes: easyjson's jwriter, the writer tiflow's newJSONMessageForDML uses,
//     fields in the order that function writes them;
//   - DDL and watermark message bytes: goccy/go-json Marshal of the same field set as
//     tiflow's JSONMessage / canalJSONMessageWithTiDBExtension;
//   - binary strings: golang.org/x/text charmap.ISO8859_1, the decoder of tiflow's
//     canalEntryBuilder.formatValue; FLOAT/DOUBLE: strconv.FormatFloat(v, 'f', -1, 32|64)
//     as formatValue does.
//
// Everything else (ENUM index, SET mask, BIT number, DECIMAL text, TIME, JSON text) is
// written in the spec as the text TiCDC's mounter produces (cdc/entry/mounter.go
// formatColVal); each case's README cites the rule.
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/mailru/easyjson/jwriter"
	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/mysql"
	"github.com/pingcap/tidb/pkg/parser/types"

	// The value-expression driver: string literals restore as the real TiDB driver does
	// (charset introducer, single quotes); backslashes differ, so specs avoid them.
	_ "github.com/pingcap/tidb/pkg/parser/test_driver"
	"golang.org/x/text/encoding/charmap"
)

// Spec is one scripted source history.
type Spec struct {
	// Extension is enable-tidb-extension (default true here; TiCDC's default is false).
	Extension *bool `json:"extension"`
	// StartMs is the physical part (ms) of the first commit TSO.
	StartMs int64 `json:"start_ms"`
	// ServerTZ is the TiCDC server time zone TIMESTAMP values are rendered in.
	ServerTZ string `json:"server_tz"`
	// SessionDB is the database the DDL sessions USE (for unqualified names).
	SessionDB string `json:"session_db"`
	// Tables are CREATE TABLE statements that ran before the changefeed started: the
	// schema is known to TiCDC, but no DDL message is emitted for them.
	Tables []string `json:"tables"`
	Steps  []Step   `json:"steps"`
}

// Step is one committed transaction (rows), one DDL, or one watermark.
type Step struct {
	DDL       string `json:"ddl"`
	Watermark bool   `json:"watermark"`
	Txn       []Row  `json:"txn"`
}

// Row is one row change inside a transaction.
type Row struct {
	Op    string                     `json:"op"`
	Table string                     `json:"table"`
	Old   map[string]json.RawMessage `json:"old"`
	New   map[string]json.RawMessage `json:"row"`
}

type column struct {
	name   string
	tp     *types.FieldType
	pk, uk bool
}

type table struct {
	db, name string
	cols     []*column
	// unique indexes by name, to clear the UK flag on DROP INDEX
	unique map[string][]string
}

type generator struct {
	spec   Spec
	tz     *time.Location
	tables map[string]*table
	out    *strings.Builder
	step   int
	lastTs uint64
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ticdc-vectors SPEC.json > events.jsonl")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	check(err)
	var spec Spec
	check(json.Unmarshal(raw, &spec))
	if spec.ServerTZ == "" {
		spec.ServerTZ = "UTC"
	}
	tz, err := time.LoadLocation(spec.ServerTZ)
	check(err)
	g := &generator{spec: spec, tz: tz, tables: map[string]*table{}, out: &strings.Builder{}}
	for _, ddl := range spec.Tables {
		g.applyDDL(g.parse(ddl))
	}
	for _, s := range spec.Steps {
		switch {
		case s.DDL != "":
			g.ddl(s.DDL)
		case s.Watermark:
			g.watermark()
		default:
			g.txn(s.Txn)
		}
	}
	fmt.Print(g.out.String())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "ticdc-vectors:", err)
		os.Exit(1)
	}
}

func (g *generator) extension() bool { return g.spec.Extension == nil || *g.spec.Extension }

// nextTs is the commit TSO of the next step: physical ms << 18 | logical.
func (g *generator) nextTs() uint64 {
	g.step++
	ms := g.spec.StartMs + int64(g.step)*7
	g.lastTs = uint64(ms)<<18 | uint64(g.step%5)
	return g.lastTs
}

// es is convertToCanalTs (tiflow pkg/sink/codec/canal/canal_entry.go): commitTs >> 18.
func es(ts uint64) int64 { return int64(ts >> 18) }

// wall stands for the encoder's time.Now() in "ts": a few ms after the commit.
func wall(ts uint64) int64 { return es(ts) + 4 }

func (g *generator) parse(sql string) ast.StmtNode {
	p := parser.New()
	stmts, _, err := p.Parse(sql, "utf8mb4", "utf8mb4_bin")
	check(err)
	if len(stmts) != 1 {
		check(fmt.Errorf("one statement per DDL step: %s", sql))
	}
	return stmts[0]
}

// restore is TiCDC's DDL text: the statement restored with addSpecialComment's flags.
func restore(stmt ast.StmtNode) string {
	flags := format.RestoreTiDBSpecialComment | format.RestoreNameBackQuotes |
		format.RestoreKeyWordUppercase | format.RestoreStringSingleQuotes |
		format.SkipPlacementRuleForRestore | format.RestoreWithTTLEnableOff
	var sb strings.Builder
	check(stmt.Restore(format.NewRestoreCtx(flags, &sb)))
	return sb.String()
}

func (g *generator) schemaOf(name ast.TableName) string {
	if name.Schema.O != "" {
		return name.Schema.O
	}
	if g.spec.SessionDB == "" {
		check(fmt.Errorf("unqualified table %s and no session_db", name.Name.O))
	}
	return g.spec.SessionDB
}

func (g *generator) table(id string) *table {
	t, ok := g.tables[id]
	if !ok {
		check(fmt.Errorf("unknown table %s", id))
	}
	return t
}

func newColumn(def *ast.ColumnDef) *column {
	c := &column{name: def.Name.Name.O, tp: def.Tp}
	for _, o := range def.Options {
		switch o.Tp {
		case ast.ColumnOptionPrimaryKey:
			c.pk = true
		case ast.ColumnOptionUniqKey:
			c.uk = true
		}
	}
	return c
}

func (t *table) col(name string) *column {
	for _, c := range t.cols {
		if strings.EqualFold(c.name, name) {
			return c
		}
	}
	check(fmt.Errorf("%s.%s has no column %s", t.db, t.name, name))
	return nil
}

func (t *table) addConstraint(cons *ast.Constraint) {
	var names []string
	for _, k := range cons.Keys {
		names = append(names, k.Column.Name.O)
	}
	switch cons.Tp {
	case ast.ConstraintPrimaryKey:
		for _, n := range names {
			t.col(n).pk = true
		}
	case ast.ConstraintUniq, ast.ConstraintUniqKey, ast.ConstraintUniqIndex:
		for _, n := range names {
			t.col(n).uk = true
		}
		t.unique[cons.Name] = names
	}
}

// applyDDL changes the tracked schema and returns the canal type, database and table of
// the DDL message (tiflow canal_entry.go convertDdlEventType; the names come from the
// DDL event's TableInfo: schema_storage.go BuildDDLEvents).
func (g *generator) applyDDL(stmt ast.StmtNode) (kind, db, tbl string) {
	switch s := stmt.(type) {
	case *ast.CreateTableStmt:
		t := &table{db: g.schemaOf(*s.Table), name: s.Table.Name.O, unique: map[string][]string{}}
		for _, def := range s.Cols {
			t.cols = append(t.cols, newColumn(def))
		}
		for _, cons := range s.Constraints {
			t.addConstraint(cons)
		}
		g.tables[t.db+"."+t.name] = t
		return "CREATE", t.db, t.name
	case *ast.AlterTableStmt:
		t := g.table(g.schemaOf(*s.Table) + "." + s.Table.Name.O)
		kind = "ALTER"
		for _, spec := range s.Specs {
			switch spec.Tp {
			case ast.AlterTableAddColumns:
				if spec.Position != nil && spec.Position.Tp != ast.ColumnPositionNone {
					check(fmt.Errorf("only ADD COLUMN at the end is modelled"))
				}
				for _, def := range spec.NewColumns {
					t.cols = append(t.cols, newColumn(def))
				}
			case ast.AlterTableSetTiFlashReplica:
				kind = "QUERY"
			default:
				check(fmt.Errorf("ALTER TABLE spec %d is not modelled", spec.Tp))
			}
		}
		return kind, t.db, t.name
	case *ast.CreateIndexStmt:
		t := g.table(g.schemaOf(*s.Table) + "." + s.Table.Name.O)
		if s.KeyType == ast.IndexKeyTypeUnique {
			var names []string
			for _, k := range s.IndexPartSpecifications {
				names = append(names, k.Column.Name.O)
				t.col(k.Column.Name.O).uk = true
			}
			t.unique[s.IndexName] = names
		}
		return "CINDEX", t.db, t.name
	case *ast.DropIndexStmt:
		t := g.table(g.schemaOf(*s.Table) + "." + s.Table.Name.O)
		for _, n := range t.unique[s.IndexName] {
			t.col(n).uk = false
		}
		delete(t.unique, s.IndexName)
		return "DINDEX", t.db, t.name
	case *ast.TruncateTableStmt:
		t := g.table(g.schemaOf(*s.Table) + "." + s.Table.Name.O)
		return "TRUNCATE", t.db, t.name
	case *ast.RenameTableStmt:
		if len(s.TableToTables) != 1 {
			check(fmt.Errorf("one table per RENAME is modelled"))
		}
		from, to := s.TableToTables[0].OldTable, s.TableToTables[0].NewTable
		t := g.table(g.schemaOf(*from) + "." + from.Name.O)
		delete(g.tables, t.db+"."+t.name)
		t.db, t.name = g.schemaOf(*to), to.Name.O
		g.tables[t.db+"."+t.name] = t
		return "RENAME", t.db, t.name
	case *ast.DropTableStmt:
		if len(s.Tables) != 1 || s.IsView {
			check(fmt.Errorf("one table per DROP TABLE is modelled"))
		}
		t := g.table(g.schemaOf(*s.Tables[0]) + "." + s.Tables[0].Name.O)
		delete(g.tables, t.db+"."+t.name)
		return "ERASE", t.db, t.name
	case *ast.CreateDatabaseStmt:
		return "QUERY", s.Name.O, ""
	case *ast.DropDatabaseStmt:
		return "QUERY", s.Name.O, ""
	case *ast.CreateViewStmt:
		return "QUERY", g.schemaOf(*s.ViewName), s.ViewName.Name.O
	}
	check(fmt.Errorf("DDL %T is not modelled", stmt))
	return "", "", ""
}

// ddlMessage is the field set of tiflow's JSONMessage plus the _tidb extension, in
// declaration order (canal_json_message.go).
type ddlMessage struct {
	ID        int64             `json:"id"`
	Schema    string            `json:"database"`
	Table     string            `json:"table"`
	PKNames   []string          `json:"pkNames"`
	IsDDL     bool              `json:"isDdl"`
	EventType string            `json:"type"`
	ES        int64             `json:"es"`
	TS        int64             `json:"ts"`
	Query     string            `json:"sql"`
	SQLType   map[string]int32  `json:"sqlType"`
	MySQLType map[string]string `json:"mysqlType"`
	Data      []map[string]any  `json:"data"`
	Old       []map[string]any  `json:"old"`
}

type tidbExtension struct {
	CommitTs    uint64 `json:"commitTs,omitempty"`
	WatermarkTs uint64 `json:"watermarkTs,omitempty"`
}

type withExtension struct {
	*ddlMessage
	Extensions *tidbExtension `json:"_tidb"`
}

func (g *generator) emitJSON(msg *ddlMessage, ext *tidbExtension) {
	var (
		b   []byte
		err error
	)
	if ext == nil {
		b, err = gojson.Marshal(msg)
	} else {
		b, err = gojson.Marshal(withExtension{ddlMessage: msg, Extensions: ext})
	}
	check(err)
	g.out.Write(b)
	g.out.WriteByte('\n')
}

func (g *generator) ddl(sql string) {
	stmt := g.parse(sql)
	kind, db, tbl := g.applyDDL(stmt)
	query := restore(stmt)
	if kind == "ERASE" {
		// FromJobWithArgs rebuilds the DROP TABLE text from the table info.
		query = restore(g.parse(fmt.Sprintf("DROP TABLE `%s`.`%s`", db, tbl)))
	}
	ts := g.nextTs()
	msg := &ddlMessage{Schema: db, Table: tbl, IsDDL: true, EventType: kind, ES: es(ts), TS: wall(ts), Query: query}
	if g.extension() {
		g.emitJSON(msg, &tidbExtension{CommitTs: ts})
	} else {
		g.emitJSON(msg, nil)
	}
}

// watermark is EncodeCheckpointEvent: only with the TiDB extension.
func (g *generator) watermark() {
	if !g.extension() {
		return
	}
	ts := g.lastTs
	g.emitJSON(&ddlMessage{EventType: "TIDB_WATERMARK", ES: es(ts), TS: wall(ts)}, &tidbExtension{WatermarkTs: ts})
}

// value is one column value in TiCDC's text form; nil is NULL.
func (g *generator) value(raw json.RawMessage) *string {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return &text
	}
	var typed map[string]any
	check(json.Unmarshal(raw, &typed))
	var out string
	switch {
	case typed["float32"] != nil:
		f, err := strconv.ParseFloat(typed["float32"].(string), 32)
		check(err)
		out = strconv.FormatFloat(float64(float32(f)), 'f', -1, 32)
	case typed["float64"] != nil:
		f, err := strconv.ParseFloat(typed["float64"].(string), 64)
		check(err)
		out = strconv.FormatFloat(f, 'f', -1, 64)
	case typed["bytes_hex"] != nil:
		b, err := hex.DecodeString(typed["bytes_hex"].(string))
		check(err)
		out = latin1(b)
	case typed["bytes_all"] != nil:
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		out = latin1(b)
	case typed["timestamp_utc"] != nil:
		// The row holds the UTC instant; the mounter decodes it in the server time zone
		// and formats it with the column's fsp (Time.String).
		text := typed["timestamp_utc"].(string)
		t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", text, time.UTC)
		check(err)
		fsp := int(typed["fsp"].(float64))
		layout := "2006-01-02 15:04:05"
		if fsp > 0 {
			layout += "." + strings.Repeat("0", fsp)
		}
		out = t.In(g.tz).Format(layout)
	default:
		check(fmt.Errorf("unknown typed value %s", raw))
	}
	return &out
}

func latin1(b []byte) string {
	decoded, err := charmap.ISO8859_1.NewDecoder().Bytes(b)
	check(err)
	return string(decoded)
}

type image struct {
	vals []*string
}

func (g *generator) image(t *table, row map[string]json.RawMessage) image {
	if len(row) != len(t.cols) {
		check(fmt.Errorf("%s.%s: a row names %d columns, the table has %d", t.db, t.name, len(row), len(t.cols)))
	}
	img := image{}
	for _, c := range t.cols {
		raw, ok := row[c.name]
		if !ok {
			check(fmt.Errorf("%s.%s: row lacks column %s", t.db, t.name, c.name))
		}
		img.vals = append(img.vals, g.value(raw))
	}
	return img
}

type rowEvent struct {
	t        *table
	kind     string // INSERT, UPDATE, DELETE
	pre, cur image
}

func order(kind string) int {
	return map[string]int{"DELETE": 0, "UPDATE": 1, "INSERT": 2}[kind]
}

// txn emits one transaction: an UPDATE whose primary- or unique-key value changed is split
// into DELETE + INSERT (cdc/model/sink.go trySplitAndSortUpdateEvent / ShouldSplitUpdateEvent,
// default for MQ sinks: output-raw-change-event=false), and the transaction's rows are then
// ordered DELETE < UPDATE < INSERT (txnRows.Less).
func (g *generator) txn(rows []Row) {
	ts := g.nextTs()
	var events []rowEvent
	split := false
	for _, r := range rows {
		t := g.table(r.Table)
		switch strings.ToUpper(r.Op) {
		case "INSERT":
			events = append(events, rowEvent{t: t, kind: "INSERT", cur: g.image(t, r.New)})
		case "DELETE":
			events = append(events, rowEvent{t: t, kind: "DELETE", pre: g.image(t, r.Old)})
		case "UPDATE":
			pre, cur := g.image(t, r.Old), g.image(t, r.New)
			if keyChanged(t, pre, cur) {
				split = true
				events = append(events,
					rowEvent{t: t, kind: "DELETE", pre: pre},
					rowEvent{t: t, kind: "INSERT", cur: cur})
			} else {
				events = append(events, rowEvent{t: t, kind: "UPDATE", pre: pre, cur: cur})
			}
		default:
			check(fmt.Errorf("unknown op %q", r.Op))
		}
	}
	if split {
		sort.SliceStable(events, func(i, j int) bool { return order(events[i].kind) < order(events[j].kind) })
	}
	for _, e := range events {
		g.dml(e, ts)
	}
}

func keyChanged(t *table, pre, cur image) bool {
	for i, c := range t.cols {
		if !(c.pk || c.uk) || pre.vals[i] == nil || cur.vals[i] == nil {
			continue
		}
		if *pre.vals[i] != *cur.vals[i] {
			return true
		}
	}
	return false
}

// mysqlType is GetMySQLType with content-compatible=false: the bare type name.
func mysqlType(c *column) string {
	s := types.TypeToStr(c.tp.GetType(), c.tp.GetCharset())
	if mysql.HasUnsignedFlag(c.tp.GetFlag()) && s != "bit" && s != "year" {
		s += " unsigned"
	}
	if mysql.HasZerofillFlag(c.tp.GetFlag()) && !strings.HasPrefix(s, "year") {
		s += " zerofill"
	}
	return s
}

// javaType is getJavaSQLType / MySQLType2JavaType (java.sql.Types codes).
func javaType(c *column, v *string) int32 {
	binary := c.tp.GetCharset() == "binary"
	var jt int32
	switch c.tp.GetType() {
	case mysql.TypeTiny:
		jt = -6
	case mysql.TypeShort:
		jt = 5
	case mysql.TypeLong, mysql.TypeInt24, mysql.TypeEnum:
		jt = 4
	case mysql.TypeFloat:
		jt = 7
	case mysql.TypeDouble:
		jt = 8
	case mysql.TypeNewDecimal:
		jt = 3
	case mysql.TypeTimestamp, mysql.TypeDatetime:
		jt = 93
	case mysql.TypeLonglong:
		jt = -5
	case mysql.TypeDate, mysql.TypeNewDate:
		jt = 91
	case mysql.TypeDuration:
		jt = 92
	case mysql.TypeYear, mysql.TypeJSON:
		jt = 12
	case mysql.TypeSet, mysql.TypeBit:
		jt = -7
	case mysql.TypeTinyBlob, mysql.TypeMediumBlob, mysql.TypeLongBlob, mysql.TypeBlob:
		jt = 2005
		if binary {
			jt = 2004
		}
	case mysql.TypeVarString, mysql.TypeVarchar:
		jt = 12
		if binary {
			jt = 2004
		}
	case mysql.TypeString:
		jt = 1
		if binary {
			jt = 2004
		}
	default:
		check(fmt.Errorf("no java type for %s", c.name))
	}
	if !mysql.HasUnsignedFlag(c.tp.GetFlag()) || v == nil {
		return jt
	}
	// Unsigned integers beyond the signed range are promoted to the next java type.
	n, err := strconv.ParseUint(*v, 10, 64)
	if err != nil {
		return jt
	}
	switch c.tp.GetType() {
	case mysql.TypeTiny:
		if n > 127 {
			jt = 5
		}
	case mysql.TypeShort:
		if n > 32767 {
			jt = 4
		}
	case mysql.TypeLong:
		if n > 2147483647 {
			jt = -5
		}
	case mysql.TypeLonglong:
		if n > 9223372036854775807 {
			jt = 3
		}
	}
	return jt
}

func writeImage(out *jwriter.Writer, t *table, img image) {
	out.RawString("[{")
	for i, c := range t.cols {
		if i > 0 {
			out.RawByte(',')
		}
		out.String(c.name)
		out.RawByte(':')
		if img.vals[i] == nil {
			out.RawString("null")
		} else {
			out.String(*img.vals[i])
		}
	}
	out.RawString("}]")
}

// dml writes one row message in newJSONMessageForDML's field order.
func (g *generator) dml(e rowEvent, ts uint64) {
	t := e.t
	types := e.cur
	if e.kind == "DELETE" {
		types = e.pre
	}
	out := &jwriter.Writer{}
	out.RawString(`{"id":0,"database":`)
	out.String(t.db)
	out.RawString(`,"table":`)
	out.String(t.name)
	out.RawString(`,"pkNames":[`)
	first := true
	for _, c := range t.cols {
		if c.pk {
			if !first {
				out.RawByte(',')
			}
			first = false
			out.String(c.name)
		}
	}
	out.RawString(`],"isDdl":false,"type":`)
	out.String(e.kind)
	out.RawString(`,"es":`)
	out.Int64(es(ts))
	out.RawString(`,"ts":`)
	out.Int64(wall(ts))
	out.RawString(`,"sql":"","sqlType":{`)
	for i, c := range t.cols {
		if i > 0 {
			out.RawByte(',')
		}
		out.String(c.name)
		out.RawByte(':')
		out.Int32(javaType(c, types.vals[i]))
	}
	// TiCDC fills mysqlType from a Go map: its key order is unspecified; column order here.
	out.RawString(`},"mysqlType":{`)
	for i, c := range t.cols {
		if i > 0 {
			out.RawByte(',')
		}
		out.String(c.name)
		out.RawByte(':')
		out.String(mysqlType(c))
	}
	out.RawString("}")
	switch e.kind {
	case "DELETE":
		out.RawString(`,"old":null,"data":`)
		writeImage(out, t, e.pre)
	case "INSERT":
		out.RawString(`,"old":null,"data":`)
		writeImage(out, t, e.cur)
	default:
		out.RawString(`,"old":`)
		writeImage(out, t, e.pre)
		out.RawString(`,"data":`)
		writeImage(out, t, e.cur)
	}
	if g.extension() {
		out.RawString(`,"_tidb":{"commitTs":`)
		out.Uint64(ts)
		out.RawByte('}')
	}
	out.RawByte('}')
	b, err := out.BuildBytes()
	check(err)
	g.out.Write(b)
	g.out.WriteByte('\n')
}
