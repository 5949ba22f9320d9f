// Command apifile lists the exported API of the library's public packages,
// one declaration per line, sorted, the way Go's own api/*.txt files do:
// checked in as api/dedup.txt, every change to the API is a diff in review.
//
//	go -C internal/tools run ./apifile -root ../.. -write   # make api
//	go -C internal/tools run ./apifile -root ../..          # make vet: fail on a difference
//
// The public packages are those of the root module outside cmd/, internal/,
// examples/ and integration/. An exported interface with more than three
// methods fails too.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

var private = regexp.MustCompile(`/(cmd|internal|examples|integration)(/|$)`)

func main() {
	root := flag.String("root", ".", "the root module's directory")
	write := flag.Bool("write", false, "write api/dedup.txt instead of comparing with it")
	flag.Parse()
	if err := run(*root, *write); err != nil {
		fmt.Fprintln(os.Stderr, "apifile:", err)
		os.Exit(1)
	}
}

func run(root string, write bool) error {
	cfg := &packages.Config{Dir: root, Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return err
	}
	var lines []string
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return fmt.Errorf("%s: %v", p.PkgPath, p.Errors[0])
		}
		if private.MatchString(p.PkgPath) || p.Types == nil {
			continue
		}
		if err := smallInterfaces(p.Types); err != nil {
			return err
		}
		lines = append(lines, api(p.Types)...)
	}
	slices.Sort(lines)
	got := []byte(strings.Join(lines, "\n") + "\n")
	path := filepath.Join(root, "api", "dedup.txt")
	if write {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, got, 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w (make api writes it)", err)
	}
	if bytes.Equal(got, want) {
		return nil
	}
	return errors.New("the public API is not api/dedup.txt's; run make api and review the difference:\n" + diff(want, got))
}

// diff names the lines only one side has.
func diff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	var b strings.Builder
	for _, l := range w {
		if l != "" && !slices.Contains(g, l) {
			fmt.Fprintf(&b, "-%s\n", l)
		}
	}
	for _, l := range g {
		if l != "" && !slices.Contains(w, l) {
			fmt.Fprintf(&b, "+%s\n", l)
		}
	}
	return b.String()
}

// maxMethods bounds an exported interface: one a user implements must not
// grow (a new method breaks every implementer), so new events come as new
// small interfaces instead.
const maxMethods = 3

func smallInterfaces(pkg *types.Package) error {
	for _, name := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok || !tn.Exported() {
			continue
		}
		if it, ok := tn.Type().Underlying().(*types.Interface); ok && it.NumMethods() > maxMethods {
			return fmt.Errorf("%s.%s has %d methods, at most %d: add a new interface instead", pkg.Path(), name, it.NumMethods(), maxMethods)
		}
	}
	return nil
}

// api is one line per exported name of pkg: each const, var, func and
// type, each exported field and method of a type.
func api(pkg *types.Package) []string {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	prefix := "pkg " + pkg.Path() + ", "
	var out []string
	add := func(format string, args ...any) { out = append(out, prefix+fmt.Sprintf(format, args...)) }
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			add("const %s %s", name, types.TypeString(o.Type(), qual))
		case *types.Var:
			add("var %s %s", name, types.TypeString(o.Type(), qual))
		case *types.Func:
			add("func %s%s", name, strings.TrimPrefix(types.TypeString(o.Type(), qual), "func"))
		case *types.TypeName:
			out = append(out, typeLines(prefix, o, qual)...)
		}
	}
	return out
}

func typeLines(prefix string, tn *types.TypeName, qual types.Qualifier) []string {
	name := tn.Name()
	if tn.IsAlias() {
		return []string{prefix + fmt.Sprintf("type %s = %s", name, types.TypeString(tn.Type(), qual))}
	}
	var out []string
	under := tn.Type().Underlying()
	switch u := under.(type) {
	case *types.Struct:
		out = append(out, prefix+fmt.Sprintf("type %s struct", name))
		for f := range u.Fields() {
			if f.Exported() {
				out = append(out, prefix+fmt.Sprintf("type %s struct, %s %s", name, f.Name(), types.TypeString(f.Type(), qual)))
			}
		}
	case *types.Interface:
		out = append(out, prefix+fmt.Sprintf("type %s interface", name))
		for m := range u.Methods() {
			out = append(out, prefix+fmt.Sprintf("type %s interface, %s%s", name, m.Name(), strings.TrimPrefix(types.TypeString(m.Type(), qual), "func")))
		}
	default:
		out = append(out, prefix+fmt.Sprintf("type %s %s", name, types.TypeString(under, qual)))
	}
	mset := types.NewMethodSet(types.NewPointer(tn.Type()))
	for sel := range mset.Methods() {
		m := sel.Obj()
		if !m.Exported() || len(sel.Index()) > 1 { // promoted methods are the embedded type's
			continue
		}
		recv := name
		if _, ptr := m.Type().(*types.Signature).Recv().Type().(*types.Pointer); ptr {
			recv = "*" + name
		}
		out = append(out, prefix+fmt.Sprintf("method (%s) %s%s", recv, m.Name(), strings.TrimPrefix(types.TypeString(m.Type(), qual), "func")))
	}
	return out
}
