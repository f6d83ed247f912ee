package e2e

// This file has no build tag: it is a unit test (make unit, make test) of
// the e2e files' source, which it parses without building them.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryTestHasAGroup: every e2e test's first statement is parallel(t)
// or serial(t, reason) (framework_test.go), so none runs beside the others
// by accident or alone without saying why.
func TestEveryTestHasAGroup(t *testing.T) {
	t.Parallel() // it reads source files only; in the e2e binary it shares the cluster with no one
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if !hasBuildTag(f, "e2e") {
			continue
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			checked++
			if group := testGroup(fn); group == "" {
				t.Errorf("%s: %s does not begin with parallel(t) or serial(t, reason)", name, fn.Name.Name)
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked %d e2e tests, expected the whole suite (more than 30): is the file list right?", checked)
	}
}

// testGroup is the name of the group function fn's first statement
// calls with t first (parallel or serial), or "".
func testGroup(fn *ast.FuncDecl) string {
	if fn.Body == nil || len(fn.Body.List) == 0 {
		return ""
	}
	stmt, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return ""
	}
	call, ok := stmt.X.(*ast.CallExpr)
	if !ok || len(call.Args) == 0 {
		return ""
	}
	callee, ok := call.Fun.(*ast.Ident)
	if !ok {
		return ""
	}
	arg, ok := call.Args[0].(*ast.Ident)
	if !ok || arg.Name != "t" {
		return ""
	}
	switch {
	case callee.Name == "parallel" && len(call.Args) == 1:
		return callee.Name
	case callee.Name == "serial" && len(call.Args) == 2:
		return callee.Name
	}
	return ""
}

func hasBuildTag(f *ast.File, tag string) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if c.Text == "//go:build "+tag {
				return true
			}
		}
	}
	return false
}
