package migrations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFiles(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) { testFiles(t, d) })
	}
	if _, err := Files("mysql"); err == nil {
		t.Error("Files(\"mysql\"): no error")
	}
}

func testFiles(t *testing.T, dialect string) {
	ms, err := Files(dialect)
	if err != nil {
		t.Fatalf("Files: %v", err)
	}
	if len(ms) == 0 {
		t.Fatal("Files: no migrations")
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Errorf("ms[%d].Version = %d, want %d", i, m.Version, i+1)
		}
		if !strings.HasSuffix(m.Name, ".sql") || m.SQL == "" {
			t.Errorf("ms[%d] = {Name: %q, len(SQL): %d}, want a .sql file with text", i, m.Name, len(m.SQL))
		}
		if len(m.Statements()) == 0 {
			t.Errorf("%s: no statements", m.Name)
		}
		if m.Dialect != "" && m.Dialect != dialect {
			t.Errorf("%s: the %s dialect's file among the %s migrations", m.Name, m.Dialect, dialect)
		}
	}
	if ms[0].Name != "0001_init.sql" {
		t.Errorf("ms[0].Name = %q, want 0001_init.sql", ms[0].Name)
	}
}

// TestPortable guards the promise that one migration set serves SQLite and
// PostgreSQL by rejecting, outside the dialect files, what only one of
// them understands.
func TestPortable(t *testing.T) {
	ms, err := Files(SQLite)
	if err != nil {
		t.Fatalf("Files: %v", err)
	}
	banned := []string{"AUTOINCREMENT", "BLOB", "BYTEA", "SERIAL", "PRAGMA", "WITHOUT ROWID", "INSERT OR", "REPLACE INTO", "JSONB", "TIMESTAMP", "DATETIME"}
	for _, m := range ms {
		if m.Dialect != "" {
			continue
		}
		upper := strings.ToUpper(m.SQL)
		for _, b := range banned {
			if strings.Contains(upper, b) {
				t.Errorf("%s contains %q, which is not portable", m.Name, b)
			}
		}
	}
}

func TestSplit(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []string
		wantErr bool
	}{
		"one": {
			in:   "CREATE TABLE a (x TEXT);\n",
			want: []string{"CREATE TABLE a (x TEXT)"},
		},
		"multi-line with comments and blanks": {
			in: "-- header; with a semicolon\n\nCREATE TABLE a (\n    x TEXT, -- inline\n    y BIGINT\n);  \r\nCREATE INDEX a_y ON a (y);",
			want: []string{
				"CREATE TABLE a (\n    x TEXT, -- inline\n    y BIGINT\n)",
				"CREATE INDEX a_y ON a (y)",
			},
		},
		"missing final semicolon": {
			in:      "CREATE TABLE a (x TEXT);\nCREATE TABLE b (x TEXT)\n",
			wantErr: true,
		},
		"semicolon inside a statement": {
			in:      "INSERT INTO a VALUES ('x;y');\n",
			wantErr: true,
		},
		"comment after the semicolon": {
			in:      "CREATE TABLE a (x TEXT); -- done\n",
			wantErr: true,
		},
		"empty statement": {
			in:      "CREATE TABLE a (x TEXT);\n;\n",
			wantErr: true,
		},
		"nothing": {
			in:      "-- only a comment\n",
			wantErr: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := split(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("split: got %q, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("split: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("split (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	tests := map[string]struct {
		want    int
		wantErr bool
	}{
		"0001_init.sql":     {want: 1},
		"0012_add_x.sql":    {want: 12},
		"init.sql":          {wantErr: true},
		"0000_zero.sql":     {wantErr: true},
		"abcd_letter.sql":   {wantErr: true},
		"0002_.sql":         {wantErr: true},
		"0011_x.sqlite.sql": {want: 11},
	}
	for name, tt := range tests {
		got, err := version(name)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("version(%q) = %d, %v; want %d, error %t", name, got, err, tt.want, tt.wantErr)
		}
	}
}
