// The oracle for kfn's CEL quantity library (functions/sdk/cel-quantity.ts): each CEL expression
// read from stdin, one a line, evaluated with the apiserver's own quantity library
// (k8s.io/apiserver/pkg/cel/library) in cel-go, written as "expression<TAB>answer". Regenerate
// the answers the unit test holds kfn to with
//
//	cut -f1 answers.tsv | go run . > answers.new && mv answers.new answers.tsv
package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/google/cel-go/cel"
	"k8s.io/apiserver/pkg/cel/library"
)

func main() {
	env, err := cel.NewEnv(library.Quantity())
	if err != nil {
		panic(err)
	}
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		expr := lines.Text()
		ast, issues := env.Compile(expr)
		if issues.Err() != nil {
			fmt.Printf("%s\terror: %v\n", expr, issues.Err())
			continue
		}
		program, err := env.Program(ast)
		if err != nil {
			fmt.Printf("%s\terror: %v\n", expr, err)
			continue
		}
		out, _, err := program.Eval(map[string]any{})
		if err != nil {
			fmt.Printf("%s\terror: %v\n", expr, err)
			continue
		}
		fmt.Printf("%s\t%v\n", expr, out.Value())
	}
}
