package inbox_test

import (
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/dedupkit/dedup/inbox"
)

// The guide shows the table a user creates: it must be the one CreateTable
// creates.
func TestGuideShowsTheDDL(t *testing.T) {
	guide, err := os.ReadFile("../docs/library.md")
	if err != nil {
		t.Fatal(err)
	}
	db, _ := sql.Open("pgx", "postgres://unused")
	ib, err := inbox.New(db, inbox.Config{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), "```sql\n"+ib.DDL()+"\n```") {
		t.Fatalf("docs/library.md does not show the inbox's DDL as CreateTable runs it:\n%s", ib.DDL())
	}
}
