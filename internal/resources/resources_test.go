package resources

import (
	"context"
	"errors"
	"slices"
	"testing"
)

type res struct {
	name string
	log  *[]string
	fail error
}

func (r *res) Commit(context.Context) error { *r.log = append(*r.log, "commit "+r.name); return r.fail }
func (r *res) Rollback()                    { *r.log = append(*r.log, "rollback "+r.name) }

func TestSet(t *testing.T) {
	var log []string
	s := New()
	ctx := With(context.Background(), s)
	if From(ctx) != s || From(context.Background()) != nil {
		t.Fatal("From does not return the set With stored")
	}
	opened := 0
	open := func(name string) func() (Resource, error) {
		return func() (Resource, error) { opened++; return &res{name: name, log: &log}, nil }
	}
	a1, _ := s.Join("a", open("a"))
	s.Join("b", open("b"))
	a2, _ := s.Join("a", open("a"))
	if a1 != a2 || opened != 2 {
		t.Fatalf("joining a key twice opened %d resources, want 2 and the same one for a", opened)
	}
	if _, err := s.Join("c", func() (Resource, error) { return nil, errors.New("no database") }); err == nil {
		t.Fatal("a failed open joined")
	}
	if err := s.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Rollback()
	if want := []string{"commit a", "commit b", "rollback a", "rollback b"}; !slices.Equal(log, want) {
		t.Fatalf("%v, want %v: in the order joined", log, want)
	}
	log = nil
	a1.(*res).fail = errors.New("lost")
	if err := s.Commit(context.Background()); err == nil || !slices.Equal(log, []string{"commit a"}) {
		t.Fatalf("commit after a failure: err %v, %v; want the error and b not committed", err, log)
	}
	var none *Set
	if none.Commit(context.Background()) != nil {
		t.Fatal("a nil set's commit failed")
	}
	none.Rollback()
}
